#!/usr/bin/env python3
"""Per tuning point: cost_model's p99 TTFT (model time) with the default kappa (0.92) against
kappa = 1.0, each with a seeded 95% bootstrap interval, from the result files in runs/."""
import json, os, random, re, sys

HERE = os.path.dirname(os.path.abspath(__file__))

def p99(xs):
    s = sorted(xs)
    return s[min(len(s) - 1, int(0.99 * len(s)))]

def interval(xs, seed, n=1000):
    rng = random.Random(seed)
    vals = sorted(p99([rng.choice(xs) for _ in xs]) for _ in range(n))
    return vals[int(0.025 * n)], vals[int(0.975 * n) - 1]

def load(path):
    d = json.load(open(path))
    r = d["report"]
    scale = d["spec"].get("time_scale", 1.0) if isinstance(d.get("spec"), dict) else 1.0
    return [x / 1e6 / scale for x in r["samples"]["ttft_us"]], r["sent"], scale

rows = {}
for f in sorted(os.listdir(os.path.join(HERE, "runs"))):
    m = re.match(r"(base|kappa1)-(\w+)-r([\d.]+)-(.+)-rep1\.json", f)
    if m:
        rows.setdefault((m[2], float(m[3])), {})[(m[1], m[4])] = load(os.path.join(HERE, "runs", f))

print("| workload | wall req/s | front | sent | p99 TTFT s [95%] | verdict kappa 1.0 vs 0.92 |")
print("|---|---:|---|---:|---|---|")
for (w, rate), fronts in sorted(rows.items()):
    cis = {}
    for key in sorted(fronts):
        xs, sent, _ = fronts[key]
        lo, hi = interval(xs, seed=int(rate * 100))
        cis[key] = (lo, hi)
        label = "cost_model, kappa 1.0" if key[0] == "kappa1" else (key[1] + (", kappa 0.92" if key[1] == "cost_model" else ""))
        verdict = ""
        if key == ("kappa1", "cost_model") and ("base", "cost_model") in cis:
            b = cis[("base", "cost_model")]
            verdict = "lower" if hi < b[0] else ("higher" if lo > b[1] else "tie")
        print(f"| {w} | {rate:g} | {label} | {sent} | {p99(xs):.3f} [{lo:.3f}–{hi:.3f}] | {verdict} |")
