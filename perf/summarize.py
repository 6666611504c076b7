#!/usr/bin/env python3
"""Summarises a perf/overhead results directory into summary.md and summary.json.

Input (written by perf/overhead): meta.json, runs.jsonl (one line per run: leg, rate, rep, raw
file, CPU ticks of the process under test) and raw/*.json (inferrail-bench load reports).

Per rate, over repetitions (medians):
  - direct p50 / p99 / p99.9 latency;
  - added latency of each proxy: its percentile minus the direct percentile of the same
    repetition, then the median of those differences;
  - CPU µs per request of each proxy process (utime + stime over completed requests, warmup
    included since the CPU counters cover it);
  - gateway / nginx ratios for added p50, added p99 and CPU.
Stdlib only.
"""

import json
import statistics
import sys
from pathlib import Path

PERCENTILES = [("p50", "p50"), ("p99", "p99"), ("p99.9", "p999")]
PROXIES = ["gateway", "nginx"]


def load_runs(out):
    """Returns {(rate, rep, leg): run} with the load report merged in."""
    runs = {}
    for line in (out / "runs.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        run = json.loads(line)
        run["report"] = json.loads((out / run["file"]).read_text())
        runs[(run["rate"], run["rep"], run["leg"])] = run
    return runs


def cpu_us_per_request(run, key="cpu_ticks"):
    report = run["report"]
    handled = report["completed"] + report["warmup"]["completed"]
    if handled == 0:
        return None
    return run[key] / run["clk_tck"] * 1e6 / handled


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ratio(a, b):
    if a is None or b is None or b <= 0:
        return None
    return a / b


def summarise_rate(runs, rate):
    reps = sorted({rep for (r, rep, _) in runs if r == rate})
    direct = [runs[(rate, rep, "direct")] for rep in reps if (rate, rep, "direct") in runs]
    result = {"rate": rate, "reps": len(direct), "direct": {}, "engine_cpu_us": None}
    for label, key in PERCENTILES:
        result["direct"][label] = median(r["report"]["latency_us"][key] for r in direct)
    result["engine_cpu_us"] = median(cpu_us_per_request(r, "engine_cpu_ticks") for r in direct)
    for proxy in PROXIES:
        pairs = [
            (runs[(rate, rep, "direct")], runs[(rate, rep, proxy)])
            for rep in reps
            if (rate, rep, "direct") in runs and (rate, rep, proxy) in runs
        ]
        if not pairs:
            result[proxy] = None
            continue
        added = {
            label: median(p["report"]["latency_us"][key] - d["report"]["latency_us"][key] for d, p in pairs)
            for label, key in PERCENTILES
        }
        result[proxy] = {
            "reps": len(pairs),
            "added_us": added,
            "cpu_us_per_request": median(cpu_us_per_request(p) for _, p in pairs),
        }
    gw, ng = result["gateway"], result["nginx"]
    if gw and ng:
        result["gateway_over_nginx"] = {
            "added_p50": ratio(gw["added_us"]["p50"], ng["added_us"]["p50"]),
            "added_p99": ratio(gw["added_us"]["p99"], ng["added_us"]["p99"]),
            "cpu": ratio(gw["cpu_us_per_request"], ng["cpu_us_per_request"]),
        }
    else:
        result["gateway_over_nginx"] = None
    # Health of the runs: a generator that fell behind or targets that failed make the figures suspect.
    result["health"] = {}
    for leg in ["direct"] + PROXIES:
        legs = [runs[(rate, rep, leg)]["report"] for rep in reps if (rate, rep, leg) in runs]
        if legs:
            result["health"][leg] = {
                "errors": sum(sum(r["errors"].values()) for r in legs),
                "achieved_rate": median(r["achieved_rate"] for r in legs),
                "send_lag_p99_us_max": max(r["send_lag_us"]["p99"] for r in legs),
                "connections_opened_max": max(r["connections_opened"] for r in legs),
            }
    return result


def fmt(v, digits=0):
    if v is None:
        return "—"
    return f"{v:.{digits}f}"


def fmt_ratio(v):
    return "—" if v is None else f"{v:.2f}×"


def markdown(meta, results):
    lines = [
        f"# Gateway overhead — {meta['started_utc']}",
        "",
        f"- rates {meta['rates']} req/s; {meta['reps']} repetitions of {meta['duration']} "
        f"(+{meta['warmup']} warmup) per leg, in alternation direct → gateway → nginx",
        f"- {meta['arrivals']} arrivals (inferrail-bench load, open loop, latency from the scheduled time); "
        f"request body {meta['body_bytes']} bytes; engine: nginx `return 200` (1 worker)",
        f"- gateway: {meta['gateway']}",
        f"- pinning: {meta['pinning']}; nproc {meta['nproc']}; kernel {meta['kernel']}; nginx {meta['nginx']}",
        "- added = proxy percentile − direct percentile of the same repetition, median over repetitions; "
        "CPU = utime+stime of the proxy process (gateway: all threads; nginx: its worker) per completed request",
        "",
    ]
    for r in results:
        lines += [f"## {r['rate']} req/s", ""]
        lines += ["| | p50 µs | p99 µs | p99.9 µs | CPU µs/req |", "|---|---:|---:|---:|---:|"]
        d = r["direct"]
        lines.append(
            f"| direct (latency) | {fmt(d['p50'])} | {fmt(d['p99'])} | {fmt(d['p99.9'])} | "
            f"{fmt(r['engine_cpu_us'], 1)} (engine) |"
        )
        for proxy in PROXIES:
            p = r[proxy]
            if p is None:
                lines.append(f"| {proxy} added | not run | | | |")
                continue
            a = p["added_us"]
            lines.append(
                f"| {proxy} added | {fmt(a['p50'])} | {fmt(a['p99'])} | {fmt(a['p99.9'])} | "
                f"{fmt(p['cpu_us_per_request'], 1)} |"
            )
        g = r["gateway_over_nginx"]
        if g:
            lines.append(
                f"| gateway / nginx | {fmt_ratio(g['added_p50'])} | {fmt_ratio(g['added_p99'])} | | "
                f"{fmt_ratio(g['cpu'])} |"
            )
        lines += ["", "| run health | errors | achieved req/s (median) | send lag p99 µs (worst) | connections (max) |",
                  "|---|---:|---:|---:|---:|"]
        for leg, h in r["health"].items():
            lines.append(
                f"| {leg} | {h['errors']} | {fmt(h['achieved_rate'], 1)} | {h['send_lag_p99_us_max']} | "
                f"{h['connections_opened_max']} |"
            )
        lines.append("")
    lines += [
        "Caveat: this machine is shared and small. With fewer than two CPUs nothing is pinned and the "
        "load generator, the engine and the proxy compete for the same core; read the ratios, "
        "not the absolute figures, and distrust a run whose send lag or errors are high.",
        "",
    ]
    return "\n".join(lines)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: summarize.py RESULTS_DIR")
    out = Path(sys.argv[1])
    meta = json.loads((out / "meta.json").read_text())
    runs = load_runs(out)
    rates = sorted({rate for (rate, _, _) in runs})
    results = [summarise_rate(runs, rate) for rate in rates]
    (out / "summary.json").write_text(json.dumps({"meta": meta, "rates": results}, indent=2) + "\n")
    md = markdown(meta, results)
    (out / "summary.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
