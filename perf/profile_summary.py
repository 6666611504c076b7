#!/usr/bin/env python3
"""Helpers of perf/profile (stdlib only).

  profile_summary.py bodies OUT.jsonl COUNT START
      COUNT chat bodies, one JSON object a line: a shared ~250-word system prompt and a user
      question made unique by its index (START, START+1, ...), so the tokenizer's segment cache
      hits the system prompt and misses the question, as with real traffic.
  profile_summary.py summarize OUT
      reads OUT/meta.json, OUT/callgrind/run*/{measure,idle}/* and OUT/perf-top.txt; writes
      OUT/summary.json, OUT/summary.md and the first part of OUT/callgrind-top.txt.
  profile_summary.py no-uring CMD [ARGS...]
      runs CMD with a seccomp filter that fails io_uring_setup/enter/register with ENOSYS, so
      monoio's FusionDriver falls back to its epoll (legacy) driver. Needed under valgrind: it
      does not treat io_uring_enter as a blocking syscall, so a thread waiting in it keeps
      valgrind's global lock and every other thread of the process stops until it wakes.
  profile_summary.py compare DIR_A DIR_B [TOP]
      instructions/request of both results directories, their ratio, and the per-function
      exclusive Ir/request deltas of the TOP (default 25) functions.

Callgrind files are parsed directly (not through callgrind_annotate) so that one function's
cost is merged across the inlined-source files callgrind splits it into, and across threads.
"""
import gzip
import json
import os
import re
import sys
from collections import defaultdict

WORDS = "the router sends each request to the replica that already holds most of its prompt".split()
TOPICS = ["prefix caching", "time to first token", "batch size", "KV cache eviction",
          "tensor parallelism", "speculative decoding", "quantization", "request routing",
          "load balancing", "autoscaling", "chunked prefill", "paged attention",
          "streaming responses", "rate limits", "GPU memory"]
VERBS = ["explain", "compare", "summarize", "list the trade-offs of", "give an example of",
         "estimate the cost of"]


def bodies(path, count, start):
    system = ("You are a support assistant for an inference platform. "
              + " ".join(WORDS[i % len(WORDS)] for i in range(240)))
    with open(path, "w") as f:
        for k in range(start, start + count):
            q = (f"Request {k}: please {VERBS[k % len(VERBS)]} {TOPICS[(k // 6) % len(TOPICS)]} "
                 f"for a deployment with {8 + k % 57} replicas and {k % 1000} users per minute, "
                 f"and say how {TOPICS[(k * 7) % len(TOPICS)]} interacts with it.")
            f.write(json.dumps({"model": "sim-llama", "max_tokens": 16, "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": q}]}) + "\n")


# ------------------------------------------------------------------------------ callgrind files

def _open(path):
    return gzip.open(path, "rt", errors="replace") if path.endswith(".gz") else \
        open(path, errors="replace")


_NAMED = re.compile(r"^\((\d+)\)(?: (.*))?$")
THREAD_ROOTS = [  # (label, source file of the closure a thread runs), first match wins
    ("core", "dataplane/src/cores.rs"),
    ("control", "control/src/control_thread.rs"),
    ("tokenizer-pool", "shards/src/pool.rs"),
    ("index", "shards/src/index/"),
    ("jsonl-writer", "control/src/jsonl.rs"),
    ("discovery", "control/src/discovery.rs"),
]
# Threads whose work mostly runs on timers (control: engine /metrics scrapes every 100 ms per
# replica, health probes, config reloads; the log writers; main waits for signals), so their cost
# per request depends on the request rate and the wall time, not only on the code path. Every
# other thread (data core, tokenizer pool, KV index) is on the request path.
BACKGROUND = {"control", "jsonl-writer", "discovery", "main"}


def parse_callgrind(path):
    """Returns (summary Ir, {fn: exclusive Ir}, {fn: inclusive Ir}, thread number, root files).

    Root files: the source files of the code inlined into std's __rust_begin_short_backtrace,
    i.e. the closure the thread was spawned with, which names the thread."""
    names, files = {}, {}
    excl = defaultdict(int)
    incl_calls = defaultdict(int)
    summary = None
    fn = None
    fl = fi = None
    callee = None
    pending_call = None  # callee name when the next cost line is a call's inclusive cost
    thread = None
    roots = set()
    with _open(path) as f:
        for line in f:
            c = line[:1]
            if c.isdigit() or c in "+-*":
                parts = line.split()
                cost = int(parts[1]) if len(parts) > 1 else 0
                if pending_call is not None:
                    if pending_call != fn:  # a self call adds nothing to inclusive cost
                        incl_calls[fn] += cost
                    pending_call = None
                else:
                    excl[fn] += cost
                if fn.endswith("__rust_begin_short_backtrace"):
                    roots.add(fi or fl)
                continue
            if line.startswith("fn="):
                fn = _name(names, line[3:].rstrip("\n"))
                excl.setdefault(fn, 0)
                fi = None
            elif line.startswith("cfn="):
                callee = _name(names, line[4:].rstrip("\n"))
            elif line.startswith("calls="):
                pending_call = callee
            elif line.startswith("fl="):
                fl = _name(files, line[3:].rstrip("\n"))
                fi = None
            elif line.startswith(("fi=", "fe=")):
                fi = _name(files, line[3:].rstrip("\n"))
            elif line.startswith(("cfi=", "cfl=")):
                _name(files, line[4:].rstrip("\n"))
            elif line.startswith("summary:"):
                summary = int(line.split()[1])
            elif line.startswith("thread:"):
                thread = int(line.split()[1])
    if summary is None:
        summary = sum(excl.values())
    incl = {k: excl[k] + incl_calls.get(k, 0) for k in set(excl) | set(incl_calls)}
    return summary, dict(excl), incl, thread, roots


def _name(names, spec):
    m = _NAMED.match(spec)
    if not m:
        return spec
    if m.group(2) is not None:
        names[m.group(1)] = m.group(2)
    return names.get(m.group(1), spec)


def thread_label(roots, number):
    for label, marker in THREAD_ROOTS:
        if any(r and marker in r for r in roots):
            return label
    return "main" if number == 1 else f"thread-{number}"


def read_phase(folder, labels=None):
    """All thread files of one dump: totals per thread, and per-function costs merged over all
    threads and over the request-path threads. labels: {thread number: label} from another
    dump of the same process (a thread that did nothing in a dump names nothing)."""
    if not os.path.isdir(folder):
        return None
    threads = []
    costs = {k: defaultdict(int) for k in ("excl", "incl", "req_excl", "req_incl")}
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        summary, e, i, number, roots = parse_callgrind(path)
        if number is None:
            m = re.search(r"-(\d+)(?:\.gz)?$", name)
            number = int(m.group(1)) if m else 0
        label = thread_label(roots, number)
        if label.startswith("thread-") and labels and number in labels:
            label = labels[number]
        threads.append({"thread": number, "label": label, "file": name, "ir": summary,
                        "request_path": label not in BACKGROUND})
        for key, d in (("excl", e), ("incl", i)):
            for k, v in d.items():
                costs[key][k] += v
                if label not in BACKGROUND:
                    costs["req_" + key][k] += v
    return {"threads": threads, "ir": sum(t["ir"] for t in threads),
            "ir_request_path": sum(t["ir"] for t in threads if t["request_path"]), **costs}


# ------------------------------------------------------------------------------ summarize

def fmt(n):
    return f"{n:,.0f}"


def top(d, n):
    return sorted(d.items(), key=lambda kv: (-kv[1], kv[0]))[:n]


def short(name, width=110):
    return name if len(name) <= width else name[:width - 1] + "…"


def summarize(out):
    meta = json.load(open(os.path.join(out, "meta.json")))
    result = {"meta": meta}
    md = [f"# perf/profile — {meta['stamp']}", ""]
    md += [f"- git commit: `{meta['git_commit']}`"
           + (" **(dirty tree: uncommitted changes, see dirty.patch; these figures belong to no "
              "commit)**" if meta.get('git_dirty') else "")
           + ("" if meta.get('binaries_rebuilt', True) else " (SKIP_BUILD=1: binaries not rebuilt)"),
           f"- machine: {meta['machine']}",
           f"- gateway: 1 data core, policy `{meta['policy']}`, tokenizer `{meta['tokenizer']}` "
           f"(block_size 16), 3 × `inferrail-sim --zero-latency`; config in `gateway.yaml`",
           f"- bodies: chat requests, shared ~{meta['prompt_tokens_probe']}-token prompt "
           f"(system prompt shared, user question unique per request), max_tokens 16",
           ""]
    cg_runs = []
    cg_dir = os.path.join(out, "callgrind")
    for run in sorted(os.listdir(cg_dir)) if os.path.isdir(cg_dir) else []:
        rdir = os.path.join(cg_dir, run)
        if not os.path.exists(os.path.join(rdir, "run.json")):
            continue
        info = json.load(open(os.path.join(rdir, "run.json")))
        measure = read_phase(os.path.join(rdir, "measure"))
        if measure is None or not info["completed"]:
            continue
        labels = {t["thread"]: t["label"] for t in measure["threads"]}
        idle = read_phase(os.path.join(rdir, "idle"), labels)
        done = info["completed"]
        entry = {"run": run, "completed": done, "sent": info["sent"], "errors": info["errors"],
                 "wall_s": info["wall_s"], "connections_opened": info.get("connections_opened"),
                 "driver": info.get("driver"),
                 "ir_total": measure["ir"], "ir_per_request": measure["ir"] / done,
                 "request_path_per_request": measure["ir_request_path"] / done,
                 "threads": []}
        idle_rate = {}
        if idle is not None and info.get("idle_s"):
            for t in idle["threads"]:
                idle_rate[t["thread"]] = t["ir"] / info["idle_s"]
            entry["idle_s"] = info["idle_s"]
            entry["idle_ir_per_s"] = idle["ir"] / info["idle_s"]
            entry["corrected_per_request"] = \
                (measure["ir"] - entry["idle_ir_per_s"] * info["wall_s"]) / done
        for t in measure["threads"]:
            entry["threads"].append({**t, "ir_per_request": t["ir"] / done,
                                     "idle_ir_per_s": idle_rate.get(t["thread"])})
        for k in ("excl", "incl", "req_excl", "req_incl"):
            entry["_" + k] = measure[k]
        cg_runs.append(entry)

    if cg_runs:
        first = cg_runs[0]
        n = first["completed"]

        def spread(key):
            v = [r[key] for r in cg_runs if r.get(key) is not None]
            return (max(v) - min(v)) / min(v) * 100 if len(v) > 1 and min(v) > 0 else None

        result["callgrind"] = {
            "requests": meta["requests"], "warmup_requests": meta["warmup_requests"],
            "rate": meta["cg_rate"],
            "instructions_per_request": first["ir_per_request"],
            "request_path_per_request": first["request_path_per_request"],
            "corrected_per_request": first.get("corrected_per_request"),
            "spread_percent": {k: spread(k) for k in
                               ("ir_per_request", "request_path_per_request", "corrected_per_request")},
            "runs": [{k: v for k, v in r.items() if not k.startswith("_")} for r in cg_runs],
            "functions_exclusive_per_request": {k: v / n for k, v in top(first["_req_excl"], 300)},
            "functions_inclusive_per_request": {k: v / n for k, v in top(first["_req_incl"], 300)},
            "functions_exclusive_all_threads_per_request": {k: v / n for k, v in top(first["_excl"], 300)},
        }
        md += ["## Instructions per request (callgrind, exact)", "",
               "- **all threads**: every instruction of every gateway thread between the zeroing and the "
               "dump / completed requests (the brief's definition; includes timer work, see below)",
               "- **request path**: the same over the threads requests run on (data core, tokenizer pool, "
               "KV index): the figure to compare commits with",
               "- **corrected**: all threads minus the idle-phase rate × the measured wall time", "",
               "| run | completed | errors | all threads Ir/req | **request path Ir/req** | corrected Ir/req "
               "| idle Ir/s | wall s | conns | driver |",
               "|---|---|---|---|---|---|---|---|---|---|"]
        for r in cg_runs:
            c = r.get("corrected_per_request")
            ir_s = r.get("idle_ir_per_s")
            md.append(f"| {r['run']} | {r['completed']} | {r['errors']} | {fmt(r['ir_per_request'])} | "
                      f"**{fmt(r['request_path_per_request'])}** | {fmt(c) if c is not None else '-'} | "
                      f"{fmt(ir_s) if ir_s is not None else '-'} | {r['wall_s']:.1f} | "
                      f"{r.get('connections_opened')} | {r.get('driver')} |")
        sp = result["callgrind"]["spread_percent"]
        if len(cg_runs) > 1:
            md += ["", "Spread between runs ((max - min) / min): " + ", ".join(
                f"{k.replace('_per_request', '').replace('ir', 'all threads')} "
                f"{v:.2f} %" for k, v in sp.items() if v is not None) + "."]
        md += ["", f"Per thread ({first['run']}):", "",
               "| thread | on request path | Ir / request | share | idle Ir / s |", "|---|---|---|---|---|"]
        for t in sorted(first["threads"], key=lambda t: -t["ir"]):
            share = t["ir"] / first["ir_total"] * 100 if first["ir_total"] else 0
            ir_s = t.get("idle_ir_per_s")
            md.append(f"| {t['label']} ({t['file']}) | {'yes' if t['request_path'] else 'no'} | "
                      f"{fmt(t['ir_per_request'])} | {share:.1f} % | {fmt(ir_s) if ir_s is not None else '-'} |")
        rp = first["request_path_per_request"] * n
        md += ["", "Top 10 functions by exclusive Ir / request (request-path threads, merged by name; "
               "full lists in `callgrind-top.txt`):", "",
               "| Ir / request | share of request path | function |", "|---|---|---|"]
        for name, v in top(first["_req_excl"], 10):
            md.append(f"| {fmt(v / n)} | {v / rp * 100:.1f} % | `{short(name, 100)}` |")
        md.append("")
        write_callgrind_top(out, cg_runs)

    perf_top = os.path.join(out, "perf-top.txt")
    if os.path.exists(os.path.join(out, "flamegraph.json")):
        fg = json.load(open(os.path.join(out, "flamegraph.json")))
        result["flamegraph"] = fg
        md += ["## Flamegraph (perf, cpu-clock, indicative)", ""]
        md += [f"- load: {fg['rate']} req/s open loop for {fg['duration']}; sent {fg['sent']}, "
               f"completed {fg['completed']}, errors {fg['errors']}, achieved "
               f"{fg['achieved_rate']:.0f} req/s; latency p50 {fg['p50_us']} µs, p99 {fg['p99_us']} µs",
               f"- samples: {fg['samples']} (cpu-clock at {fg['frequency']} Hz, call graph "
               f"`{fg['call_graph']}`), gateway CPU {fg['gateway_cpu_us_per_request']:.1f} µs/request "
               f"(utime+stime over the recording / completed)",
               "- `flamegraph.svg` (open in a browser; click to zoom), `perf-top.txt` (top 30 by self samples)",
               "", "Top 10 by self samples:", "", "| self % | function |", "|---|---|"]
        for row in fg.get("top", [])[:10]:
            md.append(f"| {row['percent']:.2f} % | `{short(row['symbol'], 100)}` |")
        md.append("")
    elif os.path.exists(perf_top):
        md += ["## Flamegraph", "", "see perf-top.txt", ""]

    md += ["## Commands", "", "```"] + meta.get("commands", []) + ["```", ""]
    md += ["Reading: the callgrind figure counts every user-space instruction of every gateway "
           "thread (data core, control thread, tokenizer pool, KV index, ...) between "
           "`callgrind_control -z` and `callgrind_control -d`, divided by the requests completed "
           "in that window; kernel work (syscalls, io_uring, TCP) is not counted. Compare commits "
           "with `perf/profile compare DIR_A DIR_B`.", ""]
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write("\n".join(md))
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("\n".join(md))


def write_callgrind_top(out, runs, n=25):
    first = runs[0]
    done = first["completed"]
    rp = first["request_path_per_request"] * done
    lines = [f"# callgrind, {first['run']}: {done} completed requests; all threads "
             f"{fmt(first['ir_per_request'])} Ir/request, request-path threads "
             f"{fmt(first['request_path_per_request'])} Ir/request",
             "# functions merged by name across inlined-source files and threads; inclusive = self + "
             "calls to other functions (recursion levels f'2 are callgrind's own; mutual recursion "
             "is counted twice, as in callgrind_annotate)", ""]
    for title, d, total in (("exclusive, request-path threads", first["_req_excl"], rp),
                            ("inclusive, request-path threads", first["_req_incl"], rp),
                            ("exclusive, all threads", first["_excl"], first["ir_total"]),
                            ("inclusive, all threads", first["_incl"], first["ir_total"])):
        lines += [f"## top {n} by {title}, Ir per request", "",
                  f"{'Ir/request':>14} {'share':>7}  function"]
        for name, v in top(d, n):
            lines.append(f"{v / done:>14,.0f} {v / total * 100:>6.2f}%  {name}")
        lines.append("")
    with open(os.path.join(out, "callgrind-top.txt"), "w") as f:
        f.write("\n".join(lines))


# ------------------------------------------------------------------------------ compare

def compare(a, b, n=25):
    sa = json.load(open(os.path.join(a, "summary.json")))
    sb = json.load(open(os.path.join(b, "summary.json")))
    ca, cb = sa.get("callgrind"), sb.get("callgrind")
    if not ca or not cb:
        sys.exit("compare: both directories need a callgrind part (summary.json has none)")
    for tag, d, s_, c in (("A", a, sa, ca), ("B", b, sb, cb)):
        dirty = " (DIRTY TREE: no commit has these figures)" if s_['meta'].get('git_dirty') else ""
        print(f"{tag} {d}\n  commit {s_['meta']['git_commit']}{dirty}, policy {s_['meta']['policy']}, "
              f"{c['requests']} requests at {c['rate']} req/s; runs: "
              + "; ".join(f"all {r['ir_per_request']:,.0f} / request path "
                          f"{r['request_path_per_request']:,.0f}" for r in c["runs"]))
    for key, title in (("request_path_per_request", "request path Ir/request"),
                       ("instructions_per_request", "all threads Ir/request"),
                       ("corrected_per_request", "corrected Ir/request")):
        va, vb = ca.get(key), cb.get(key)
        if va and vb:
            print(f"{title:>24}: A {va:>12,.0f}  B {vb:>12,.0f}  B/A {vb / va:.4f} "
                  f"({(vb / va - 1) * 100:+.2f} %)")
    for key in ("policy", "tokenizer", "requests", "warmup_requests", "cg_rate"):
        if sa["meta"].get(key) != sb["meta"].get(key):
            print(f"warning: {key} differs: A {sa['meta'].get(key)} B {sb['meta'].get(key)}")
    fa, fb = ca["functions_exclusive_per_request"], cb["functions_exclusive_per_request"]
    names = {k for k, _ in top(fa, n)} | {k for k, _ in top(fb, n)}
    rows = sorted(((fb.get(k, 0.0) - fa.get(k, 0.0), k) for k in names),
                  key=lambda r: (-abs(r[0]), r[1]))
    print(f"\nexclusive Ir/request on the request path, top {n} functions of either side, by |B-A| "
          f"(0 = below that side's top 300):")
    print(f"{'A':>12} {'B':>12} {'B-A':>12}  function")
    for d, k in rows:
        print(f"{fa.get(k, 0):>12,.0f} {fb.get(k, 0):>12,.0f} {d:>+12,.0f}  {short(k)}")


def no_uring(cmd):
    """Installs the filter on this process, then execs cmd (the filter is inherited)."""
    import ctypes
    import struct
    ld_nr, jeq, ret = 0x20, 0x15, 0x06
    allow, enosys = 0x7FFF0000, 0x00050000 | 38
    insns = [(ld_nr, 0, 0, 0),             # A = seccomp_data.nr
             (jeq, 3, 0, 425),             # io_uring_setup    -> ENOSYS
             (jeq, 2, 0, 426),             # io_uring_enter    -> ENOSYS
             (jeq, 1, 0, 427),             # io_uring_register -> ENOSYS
             (ret, 0, 0, allow),
             (ret, 0, 0, enosys)]
    raw = b"".join(struct.pack("HBBI", *i) for i in insns)
    buf = ctypes.create_string_buffer(raw, len(raw))

    class Fprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    prog = Fprog(len(insns), ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        sys.exit(f"no-uring: PR_SET_NO_NEW_PRIVS failed: errno {ctypes.get_errno()}")
    # seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_SPEC_ALLOW, prog): without SPEC_ALLOW
    # the kernel (spec_store_bypass_disable=seccomp, the default) turns on SSBD for a filtered
    # task, and valgrind's translated code then runs about 20x slower.
    nr = {"x86_64": 317, "aarch64": 277}.get(os.uname().machine)
    if nr is None:
        sys.exit(f"no-uring: unsupported machine {os.uname().machine}")
    if libc.syscall(nr, 1, 4, ctypes.byref(prog)) != 0:
        sys.exit(f"no-uring: seccomp failed: errno {ctypes.get_errno()}")
    os.execvp(cmd[0], cmd)


def main(argv):
    if len(argv) >= 5 and argv[1] == "bodies":
        bodies(argv[2], int(argv[3]), int(argv[4]))
    elif len(argv) >= 3 and argv[1] == "no-uring":
        no_uring(argv[2:])
    elif len(argv) == 3 and argv[1] == "summarize":
        summarize(argv[2])
    elif len(argv) in (4, 5) and argv[1] == "compare":
        compare(argv[2], argv[3], int(argv[4]) if len(argv) == 5 else 25)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
