#!/usr/bin/env python3
"""Per tuning point: cost_model's p99 TTFT (model time) with the default kappa (0.92, runs/base)
against kappa = 1.0 (runs/kappa1), each with a seeded 95% percentile bootstrap interval.

`inferrail-bench report` computes the same interval (one run per point: resample its requests,
take the exact nearest-rank p99, 2000 resamples) and its reports are here too
(base-report.md, kappa1-report.md); this script exists because the report groups runs by
(workload, rate, policy), so it cannot put the two variants side by side, and it prints two
decimals, too few to read the w5 difference."""
import json, math, os, random, re

HERE = os.path.dirname(os.path.abspath(__file__))
RESAMPLES = 2000


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
    return sorted(x / 1e6 / scale for x in d["report"]["samples"]["ttft_us"]), d["report"]["sent"]


rows = {}
for variant in ("base", "kappa1"):
    folder = os.path.join(HERE, "runs", variant)
    for f in sorted(os.listdir(folder)):
        m = re.fullmatch(r"\w+-(\w+)-r([\d.]+)-(.+)-rep1\.json", f)
        if m:
            rows.setdefault((m[1], float(m[2])), {})[(variant, m[3])] = load(os.path.join(folder, f))

print("| workload | wall req/s | front | sent | p99 TTFT s [95%] | verdict kappa 1.0 vs 0.92 |")
print("|---|---:|---|---:|---|---|")
for (w, rate), fronts in sorted(rows.items()):
    cis = {}
    for key in sorted(fronts):
        xs, sent = fronts[key]
        lo, hi = cis[key] = interval(xs, seed=int(rate * 100))
        variant, front = key
        label = f"{front}, kappa {'1.0' if variant == 'kappa1' else '0.92'}" if front == "cost_model" else front
        verdict = ""
        if key == ("kappa1", "cost_model") and ("base", "cost_model") in cis:
            b_lo, b_hi = cis[("base", "cost_model")]
            verdict = "lower" if hi < b_lo else ("higher" if lo > b_hi else "tie")
        print(f"| {w} | {rate:g} | {label} | {sent} | {p99(xs):.3f} [{lo:.3f}–{hi:.3f}] | {verdict} |")
