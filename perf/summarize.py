#!/usr/bin/env python3
"""Summarises a perf/overhead results directory into summary.md and summary.json.

Input (written by perf/overhead): meta.json, runs.jsonl (one line per run: leg, rate, rep, raw
file, CPU ticks of the process under test and of the engine) and raw/*.json (inferrail-bench load
reports).

Per rate, over repetitions (medians):
  - direct p50 / p99 / p99.9 latency;
  - added latency of each proxy leg (gateway, gateway_cost, nginx, sglang, sglang_cache, vllm,
    vllm_cache): its percentile minus the direct percentile of the same repetition, then the
    median of those differences;
  - CPU µs per request of each proxy process (the scheduler's exact on-CPU time from schedstat,
    summed over threads, when runs.jsonl has it; else utime + stime, which tick-accounting
    kernels sample at each tick), over completed requests, warmup included since the counters
    cover it;
  - gateway / other proxy ratios for added p50, added p99 and CPU per request, plus
    gateway_cost / the cache-aware peers (like for like: routing that looks at the prompt).
Results directories of older runs (legs direct, gateway, nginx; nginx engine) still summarise.
Stdlib only.
"""

import json
import statistics
import sys
from pathlib import Path

PERCENTILES = [("p50", "p50"), ("p99", "p99"), ("p99.9", "p999")]
# Every proxy leg perf/overhead knows, in table order.
PROXIES = ["gateway", "gateway_cost", "gateway_cost_base", "nginx", "sglang", "sglang_cache", "vllm", "vllm_cache"]
# What each leg is, for the table.
DESCRIPTIONS = {
    "gateway": "inferrail, round_robin",
    "gateway_cost": "inferrail, cost_model + tokenizer",
    "gateway_cost_base": "inferrail baseline build (GATEWAY_BASE), cost_model + tokenizer",
    "nginx": "nginx keep-alive proxy",
    "sglang": "SGLang router, round_robin",
    "sglang_cache": "SGLang router, cache_aware",
    "vllm": "vLLM router, round_robin",
    "vllm_cache": "vLLM router, cache_aware",
}
# Like-for-like pairs beyond "gateway / everything": routing that reads the prompt.
LIKE_FOR_LIKE = [
    ("gateway_cost", "sglang_cache"),
    ("gateway_cost", "vllm_cache"),
    ("gateway_cost", "gateway_cost_base"),
    ("gateway_cost", "nginx"),
]
OLD_ENGINE = "nginx `return 200` (1 worker)"


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
    """CPU µs of the counted process per request it handled (warmup included), or None.

    `cpu_ticks` / `engine_cpu_ticks` (utime + stime) are replaced by the scheduler's exact
    on-CPU time (`cpu_ns` / `engine_cpu_ns`, schedstat summed over threads) when the run has it
    and the process kept the same threads over the leg; `exact=False` forces the tick figure."""
    return _cpu_us(run, key, exact=USE_EXACT_CPU)


# Set by main(): every leg of a run is read the same way (exact only when every leg has it).
USE_EXACT_CPU = True


def cpu_ticks_us_per_request(run, key="cpu_ticks"):
    """The tick-sampled figure (utime + stime) even when the exact one exists."""
    return _cpu_us(run, key, exact=False)


def _cpu_us(run, key, exact):
    report = run["report"]
    handled = report["completed"] + report["warmup"]["completed"]
    if handled == 0 or key not in run:
        return None
    ns_key = key.replace("_ticks", "_ns")
    if exact and ns_key in run and run.get("threads_stable", False):
        return run[ns_key] / 1e3 / handled
    return run[key] / run["clk_tck"] * 1e6 / handled


def switches_per_request(run):
    """Context switches of the counted process per request handled, or None (older runs)."""
    report = run["report"]
    handled = report["completed"] + report["warmup"]["completed"]
    if handled == 0 or "context_switches" not in run:
        return None
    return run["context_switches"] / handled


def cpu_by_thread(runs):
    """{thread name: median on-CPU µs per request} over runs that listed their threads."""
    per_name = {}
    for run in runs:
        report = run["report"]
        handled = report["completed"] + report["warmup"]["completed"]
        if handled == 0:
            continue
        for name, ns in run.get("cpu_ns_by_thread", {}).items():
            per_name.setdefault(name, []).append(ns / 1e3 / handled)
    return {name: median(values) for name, values in sorted(per_name.items())}


def cpu_source(runs):
    """How the CPU figures of these runs were measured, for the report's header."""
    runs = list(runs)
    exact = sum(1 for r in runs if "cpu_ns" in r and r.get("threads_stable", False))
    if exact == len(runs):
        return "exact"
    if exact == 0:
        return "ticks"
    return f"mixed ({exact} of {len(runs)} legs exact)"


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ratio(a, b):
    if a is None or b is None or b <= 0:
        return None
    return a / b


def ratios(num, den):
    """num / den for added p50, added p99 and CPU per request; None when either leg is missing."""
    if not num or not den:
        return None
    return {
        "added_p50": ratio(num["added_us"]["p50"], den["added_us"]["p50"]),
        "added_p99": ratio(num["added_us"]["p99"], den["added_us"]["p99"]),
        "cpu": ratio(num["cpu_us_per_request"], den["cpu_us_per_request"]),
    }


def prompt_tokens_per_response(report):
    usage = report.get("usage")
    if not usage or not usage.get("responses"):
        return None
    return usage["prompt_tokens"] / usage["responses"]


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
            "cpu_ticks_us_per_request": median(cpu_ticks_us_per_request(p) for _, p in pairs),
            "cpu_us_by_thread": cpu_by_thread(p for _, p in pairs),
        }
    result["gateway_over"] = {
        other: ratios(result["gateway"], result[other]) for other in PROXIES if other != "gateway"
    }
    result["like_for_like"] = {f"{a}/{b}": ratios(result[a], result[b]) for a, b in LIKE_FOR_LIKE}
    # Kept under its old name for readers of older summary.json files.
    result["gateway_over_nginx"] = result["gateway_over"]["nginx"]
    # Health of the runs: a generator that fell behind, targets that failed or answers whose usage
    # differs from direct's make the figures of that leg suspect.
    result["health"] = {}
    for leg in ["direct"] + PROXIES:
        legs = [runs[(rate, rep, leg)] for rep in reps if (rate, rep, leg) in runs]
        if legs:
            reports = [r["report"] for r in legs]
            result["health"][leg] = {
                "errors": sum(sum(r["errors"].values()) for r in reports),
                "achieved_rate": median(r["achieved_rate"] for r in reports),
                "send_lag_p99_us_max": max(r["send_lag_us"]["p99"] for r in reports),
                "connections_opened_max": max(r["connections_opened"] for r in reports),
                "peak_in_flight_max": max((r["peak_in_flight"] for r in reports if "peak_in_flight" in r),
                                          default=None),
                "prompt_tokens_per_response": median(prompt_tokens_per_response(r) for r in reports),
                "engine_cpu_us": median(cpu_us_per_request(r, "engine_cpu_ticks") for r in legs),
                "switches_per_request": median(switches_per_request(r) for r in legs),
            }
    return result


def fmt(v, digits=0):
    if v is None:
        return "—"
    return f"{v:.{digits}f}"


def fmt_ratio(v):
    return "—" if v is None else f"{v:.2f}×"


def leg_notes(meta):
    """{leg: note} of the legs that were requested; older runs only noted the gateway."""
    if "legs" in meta:
        return meta["legs"]
    return {"direct": "ran", "gateway": meta.get("gateway", "—"), "nginx": "ran"}


CPU_SOURCES = {
    "exact": "the scheduler's on-CPU time (schedstat, ns, summed over threads)",
    "ticks": "utime+stime (sampled at timer ticks)",
}


def markdown(meta, results):
    notes = leg_notes(meta)
    engine = meta.get("engine_desc") or OLD_ENGINE
    ran = meta.get("legs_run") or [leg for leg in ["direct"] + PROXIES if notes.get(leg, "").startswith("ran")]
    lines = [
        f"# Proxy overhead — {meta['started_utc']}",
        "",
        f"- **engine: {engine}** (`ENGINE={meta.get('engine', 'nginx')}`); every leg goes to this one engine",
        f"- rates {meta['rates']} req/s; {meta['reps']} repetitions of {meta['duration']} "
        f"(+{meta['warmup']} warmup) per leg, in alternation {' → '.join(ran)}",
        f"- {meta['arrivals']} arrivals (inferrail-bench load, open loop, latency from the scheduled time); "
        f"request body {meta['body_bytes']} bytes",
        f"- gateway cores {meta.get('gateway_cores', '—')}; nginx workers {meta.get('nginx_workers', 1)}"
        + (f"; gateway_cost tokenizer {meta['gateway_tokenizer']}" if "gateway_cost" in notes else ""),
    ]
    if meta.get("peers") and meta.get("peers") != "not used":
        lines.append(f"- peers: {meta['peers']}; limits: {meta.get('peer_limits', '—')}")
    lines += [
        f"- pinning: {meta['pinning']}; nproc {meta['nproc']}; kernel {meta['kernel']}; nginx {meta.get('nginx') or '—'}",
    ]
    if "load_nice" in meta:
        lines.append(f"- load generator niceness {meta['load_nice']} (the engine's is 0)")
    trip = meta.get("roundtrip") or {}
    if trip.get("before") or trip.get("after"):
        def show(t):
            return f"p50 {t['p50_us']} µs, p99 {t['p99_us']} µs" if t else "not measured"
        lines.append(
            f"- cross-CPU wake-up round trip (perf/roundtrip.py, CPU 0 ↔ 1): before the legs "
            f"{show(trip.get('before'))}; after {show(trip.get('after'))}"
        )
    lines += [
        "- added = leg percentile − direct percentile of the same repetition, median over repetitions; "
        f"CPU = {CPU_SOURCES[meta.get('cpu_source', 'ticks')]} of the proxy process (gateway and routers: "
        "the whole process, all threads; nginx: its workers) per request handled; gw ÷ leg = gateway "
        "figure divided by that leg's (below 1: the gateway is cheaper)",
        "",
    ]
    skipped = [(leg, note) for leg, note in notes.items() if not note.startswith("ran")]
    if skipped:
        lines += ["Legs not run:", ""]
        lines += [f"- {leg}: {note}" for leg, note in skipped]
        lines.append("")
    for r in results:
        lines += [f"## {r['rate']} req/s", ""]
        lines += [
            "| leg | added p50 µs | added p99 µs | added p99.9 µs | CPU µs/req | gw ÷ leg p50 | gw ÷ leg p99 | gw ÷ leg CPU | CPU µs/req (ticks) |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        d = r["direct"]
        lines.append(
            f"| direct (latency itself, not added; CPU: the engine) | {fmt(d['p50'])} | {fmt(d['p99'])} | {fmt(d['p99.9'])} | "
            f"{fmt(r['engine_cpu_us'], 1)} | | | | |"
        )
        for proxy in PROXIES:
            p = r[proxy]
            label = f"{proxy} ({DESCRIPTIONS[proxy]})"
            if p is None:
                if proxy in notes:
                    lines.append(f"| {label} | not run | | | | | | | |")
                continue
            a = p["added_us"]
            g = r["gateway_over"].get(proxy) if proxy != "gateway" else None
            cells = [fmt_ratio(g["added_p50"]), fmt_ratio(g["added_p99"]), fmt_ratio(g["cpu"])] if g else ["", "", ""]
            lines.append(
                f"| {label} | {fmt(a['p50'])} | {fmt(a['p99'])} | {fmt(a['p99.9'])} | "
                f"{fmt(p['cpu_us_per_request'], 1)} | {' | '.join(cells)} | "
                f"{fmt(p.get('cpu_ticks_us_per_request'), 1)} |"
            )
        split = [
            (proxy, r[proxy]["cpu_us_by_thread"])
            for proxy in PROXIES
            if r[proxy] is not None and len(r[proxy].get("cpu_us_by_thread") or {}) > 1
        ]
        if split:
            lines.append("")
            for proxy, threads in split:
                lines.append(
                    f"CPU µs/req of {proxy} by thread (median over repetitions): "
                    + ", ".join(f"{name} {fmt(us, 1)}" for name, us in threads.items())
                )
        like = [(k, v) for k, v in r["like_for_like"].items() if v]
        if like:
            lines.append("")
            lines.append(
                "Like for like (routing that reads the prompt; gateway_cost against its baseline build and nginx): "
                + "; ".join(
                    f"{k.replace('/', ' ÷ ')}: p50 {fmt_ratio(v['added_p50'])}, p99 {fmt_ratio(v['added_p99'])}, "
                    f"CPU {fmt_ratio(v['cpu'])}"
                    for k, v in like
                )
            )
        lines += [
            "",
            "| run health | errors | achieved req/s (median) | send lag p99 µs (worst) | connections (max) "
            "| peak in flight | prompt tokens/resp | engine CPU µs/req | context switches/req |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for leg, h in r["health"].items():
            lines.append(
                f"| {leg} | {h['errors']} | {fmt(h['achieved_rate'], 1)} | {h['send_lag_p99_us_max']} | "
                f"{h['connections_opened_max']} | {fmt(h['peak_in_flight_max'])} | "
                f"{fmt(h['prompt_tokens_per_response'], 1)} | {fmt(h['engine_cpu_us'], 1)} | "
                f"{fmt(h['switches_per_request'], 2)} |"
            )
        lines.append("")
    lines += [
        "Caveat: this machine is shared and small. With fewer than two CPUs nothing is pinned and the "
        "load generator, the engine and the proxy compete for the same core; read the ratios, "
        "not the absolute figures, and distrust a run whose send lag or errors are high, or whose "
        "prompt tokens per response differ from direct's.",
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
    global USE_EXACT_CPU
    source = cpu_source(runs.values())
    if source.startswith("mixed"):
        print(f"summarize.py: CPU figures are {source}: a thread came or went during some legs, "
              "so every leg is read from utime+stime", file=sys.stderr)
        source = "ticks"
    USE_EXACT_CPU = source == "exact"
    meta["cpu_source"] = source
    if (out / "roundtrip.json").exists():
        meta["roundtrip"] = json.loads((out / "roundtrip.json").read_text())
    results = [summarise_rate(runs, rate) for rate in rates]
    (out / "summary.json").write_text(json.dumps({"meta": meta, "rates": results}, indent=2) + "\n")
    md = markdown(meta, results)
    (out / "summary.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
