#!/usr/bin/env python3
"""Run-to-run noise, read after the study (not part of its rule): weight 0 here (c61b218) makes
the same decisions as kappa-tune's `kappa1` variant (e54c665 with kappa 1.0; the defaults that
differ between the two commits are exactly these two settings), at the same points and seeds.
So each pair is one configuration run twice; where their intervals separate, the interval of a
single run is narrower than the spread between runs."""
import os, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare import interval, load, p99  # noqa: E402

KAPPA1 = os.path.join(HERE, "..", "kappa-tune", "runs", "kappa1")
print("| workload | wall req/s | p99 TTFT s, kappa-tune kappa1 [95%] | p99 TTFT s, spill-tune s0 [95%] | intervals |")
print("|---|---:|---|---|---|")
separated = total = 0
for f in sorted(os.listdir(os.path.join(HERE, "runs"))):
    if not (f.startswith("s0-") and f.endswith("-cost_model-rep1.json")):
        continue
    twin = os.path.join(KAPPA1, "kappa1-" + f[len("s0-"):])
    if not os.path.exists(twin):
        continue
    _, w, r = f.split("-")[:3]
    rate = float(r[1:])
    a, b = load(twin)[0], load(os.path.join(HERE, "runs", f))[0]
    (alo, ahi), (blo, bhi) = interval(a, int(rate * 100)), interval(b, int(rate * 100))
    apart = ahi < blo or bhi < alo
    separated += apart
    total += 1
    print(f"| {w} | {rate:g} | {p99(a):.3f} [{alo:.3f}–{ahi:.3f}] | {p99(b):.3f} [{blo:.3f}–{bhi:.3f}] | "
          f"{'separated' if apart else 'overlap'} |")
print(f"\nSeparated at {separated} of {total} pairs.")
