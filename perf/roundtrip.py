#!/usr/bin/env python3
"""Cross-CPU wake-up round trip: how long one byte takes to go from a process pinned to CPU A to
one pinned to CPU B and back, over a socketpair, both sides blocking in recv (so every hop is a
wake-up of a sleeping task on the other CPU, as in perf/overhead's legs).

On a shared virtual machine this moves with host contention (ADR 019: 20 to 100 µs at the
median, 950 µs once), so perf/overhead records it before and after its legs: a run whose round
trip is far above its usual level measured the host as much as the proxies.

Usage: roundtrip.py [--cpus A,B] [--trips N] [--warmup N]
Prints one JSON object: {"cpus": [A, B], "trips": N, "p50_us": ..., "p99_us": ..., "max_us": ...}.
Exits 2 with a message on stderr when the CPUs cannot be used (fewer than two, or not allowed).
"""
import argparse
import json
import os
import socket
import sys
import time


def percentile(sorted_values, q):
    """Nearest-rank percentile of an ascending list (q in 0..100)."""
    if not sorted_values:
        raise ValueError("no samples")
    rank = max(1, -(-len(sorted_values) * q // 100))
    return sorted_values[int(rank) - 1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpus", default="0,1", help="the two CPUs, comma-separated (default 0,1)")
    ap.add_argument("--trips", type=int, default=2000, help="timed round trips (default 2000)")
    ap.add_argument("--warmup", type=int, default=200, help="untimed round trips first (default 200)")
    args = ap.parse_args()
    try:
        a, b = (int(x) for x in args.cpus.split(","))
    except ValueError:
        print(f"roundtrip: --cpus must be two integers like 0,1 (got {args.cpus!r})", file=sys.stderr)
        return 2
    if args.trips < 1 or args.warmup < 0:
        print("roundtrip: --trips must be at least 1 and --warmup at least 0", file=sys.stderr)
        return 2
    allowed = os.sched_getaffinity(0)
    if a == b or a not in allowed or b not in allowed:
        print(f"roundtrip: needs two distinct allowed CPUs (asked {a},{b}; allowed {sorted(allowed)})",
              file=sys.stderr)
        return 2
    ours, theirs = socket.socketpair()
    pid = os.fork()
    if pid == 0:
        ours.close()
        os.sched_setaffinity(0, {b})
        try:
            while True:
                byte = theirs.recv(1)
                if not byte:
                    break
                theirs.sendall(byte)
        finally:
            os._exit(0)
    theirs.close()
    os.sched_setaffinity(0, {a})
    samples = []
    for i in range(args.warmup + args.trips):
        start = time.perf_counter_ns()
        ours.sendall(b"x")
        if ours.recv(1) != b"x":
            print("roundtrip: the echo side closed early", file=sys.stderr)
            return 1
        if i >= args.warmup:
            samples.append((time.perf_counter_ns() - start) / 1000)
    ours.close()
    os.waitpid(pid, 0)
    samples.sort()
    print(json.dumps({
        "cpus": [a, b],
        "trips": args.trips,
        "p50_us": round(percentile(samples, 50), 1),
        "p99_us": round(percentile(samples, 99), 1),
        "max_us": round(samples[-1], 1),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
