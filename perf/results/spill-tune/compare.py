#!/usr/bin/env python3
"""Per tuning point: cost_model's p99 TTFT (model time) at spill weight 0 (the default, `s0`),
0.25 (`s025`) and 1.0 (`s1`), each with the report's interval (seeded percentile bootstrap over
the run's requests, exact nearest-rank p99, 2,000 resamples), the verdict of each weight against
0 (lower / higher when the intervals separate, else tie), and the engines' prefix-cache hit rate.
Reference fronts run at weight 0's points are listed without a verdict. Reads `runs/`, where the
sweep writes `VARIANT-WORKLOAD-rRATE-FRONT-rep1.json`."""
import json, math, os, random, re

HERE = os.path.dirname(os.path.abspath(__file__))
RESAMPLES = 2000
WEIGHTS = {"s0": "0", "s025": "0.25", "s1": "1.0"}


def p99(sorted_xs):
    """Exact nearest rank, as the report's."""
    return sorted_xs[max(1, math.ceil(0.99 * len(sorted_xs))) - 1]


def interval(xs, seed):
    rng = random.Random(seed)
    vals = sorted(p99(sorted(rng.choice(xs) for _ in xs)) for _ in range(RESAMPLES))
    tail = round(0.025 * RESAMPLES)
    return vals[tail], vals[RESAMPLES - 1 - tail]


def load(path):
    d = json.load(open(path))
    scale = d["spec"].get("time_scale", 1.0)  # absent when 1
    xs = sorted(x / 1e6 / scale for x in d["report"]["samples"]["ttft_us"])
    return xs, d["report"]["sent"], d["report"]["errors"]["total"], d["engines"]["hit_rate"]


def main():
    folder = os.path.join(HERE, "runs")
    rows = {}
    for f in sorted(os.listdir(folder)):
        m = re.fullmatch(r"(s\w+?)-(\w+)-r([\d.]+)-(.+)-rep1\.json", f)
        if m and m[1] in WEIGHTS:
            rows.setdefault((m[2], float(m[3])), {})[(m[1], m[4])] = load(os.path.join(folder, f))
    print("| workload | wall req/s | front | sent | errors | hit rate | p99 TTFT s [95%] | vs weight 0 |")
    print("|---|---:|---|---:|---:|---:|---|---|")
    tally = {v: {"lower": 0, "tie": 0, "higher": 0} for v in WEIGHTS if v != "s0"}
    for (w, rate), fronts in sorted(rows.items()):
        cis = {}
        for key in sorted(fronts):
            xs, sent, errors, hit = fronts[key]
            lo, hi = cis[key] = interval(xs, seed=int(rate * 100))
            variant, front = key
            label = f"cost_model, spill {WEIGHTS[variant]}" if front == "cost_model" else front
            verdict = ""
            if front == "cost_model" and variant != "s0" and ("s0", "cost_model") in cis:
                b_lo, b_hi = cis[("s0", "cost_model")]
                verdict = "lower" if hi < b_lo else ("higher" if lo > b_hi else "tie")
                tally[variant][verdict] += 1
            print(f"| {w} | {rate:g} | {label} | {sent} | {errors} | {hit:.3f} | "
                  f"{p99(xs):.3f} [{lo:.3f}–{hi:.3f}] | {verdict} |")
    print()
    for v, t in tally.items():
        print(f"- spill {WEIGHTS[v]} against 0: lower at {t['lower']}, tie at {t['tie']}, "
              f"higher at {t['higher']}")


if __name__ == "__main__":
    main()
