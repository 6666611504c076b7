"""Fixtures of the OpenAI SDK suite: the real binaries as subprocesses on 127.0.0.1.

- `sim`: one `inferrail-sim` with its default latency model (the clients talk to it directly).
- `fleet`: three `inferrail-sim --zero-latency` behind one `inferrail serve` gateway.

Binaries come from $INFERRAIL_BIN_DIR (default <repo>/target/debug; `cargo build --workspace
--bins` builds them). Ports are free ones found by binding port 0. Every process is killed at
teardown, also when a test fails or times out, and (PR_SET_PDEATHSIG) when pytest itself dies.
"""

from __future__ import annotations

import atexit
import ctypes
import http.client
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = Path(os.environ.get("INFERRAIL_BIN_DIR") or REPO / "target" / "debug")
MODEL = "sim-llama"
START_TIMEOUT = 20.0  # seconds for a process to answer /health
START_ATTEMPTS = 3  # a free port can be taken between the probe and the bind: retry then

_live: list[subprocess.Popen] = []


def _binary(name: str) -> Path:
    path = BIN_DIR / name
    if not os.access(path, os.X_OK):
        pytest.exit(
            f"{path} not found: run `cargo build --workspace --bins` (or set INFERRAIL_BIN_DIR)",
            returncode=2,
        )
    return path


def free_port() -> int:
    """A TCP port nothing listens on right now (the kernel's pick for a bind to port 0)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    # Linux: the child gets SIGKILL when pytest exits, however it exits.
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Proc:
    """One child process, its output in a log file."""

    def __init__(self, name: str, argv: list[str], log: Path):
        self.name = name
        self.log = log
        self._out = open(log, "wb")
        self.p = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            cwd=log.parent,
            preexec_fn=_die_with_parent,
        )
        _live.append(self.p)

    def tail(self, n: int = 40) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(timeout=5)
        if self.p in _live:
            _live.remove(self.p)
        self._out.close()


@atexit.register
def _kill_leftovers() -> None:
    for p in list(_live):
        if p.poll() is None:
            p.kill()


def http_get(url: str, timeout: float = 2.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def http_post_json(url: str, body: dict, timeout: float = 10.0) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def wait_until(proc: Proc, url: str, ready=lambda status, body: status == 200) -> bool:
    """Polls `url` until `ready` holds (True), the process exits or START_TIMEOUT passes (False)."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.p.poll() is not None:
            return False
        try:
            status, body = http_get(url, timeout=1.0)
            if ready(status, body):
                return True
        except (OSError, ValueError):
            pass
        time.sleep(0.05)
    return False


@dataclass
class Engine:
    url: str  # http://127.0.0.1:PORT
    proc: Proc

    def prompt_tokens_chat(self, messages: list[dict]) -> int:
        """What the engine counts for this chat prompt (vLLM's POST /tokenize)."""
        return http_post_json(f"{self.url}/tokenize", {"model": MODEL, "messages": messages})["count"]

    def prompt_tokens_text(self, prompt: str) -> int:
        return http_post_json(f"{self.url}/tokenize", {"model": MODEL, "prompt": prompt})["count"]

    def prompt_tokens_chat_many(self, prompts: list[list[dict]]) -> list[int]:
        """prompt_tokens_chat of each, over one keep-alive connection (fast for thousands)."""
        host, port = self.url.removeprefix("http://").split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=10)
        counts = []
        try:
            for msgs in prompts:
                body = json.dumps({"model": MODEL, "messages": msgs})
                conn.request("POST", "/tokenize", body, {"content-type": "application/json"})
                r = conn.getresponse()
                data = r.read()
                assert r.status == 200, (r.status, data)
                counts.append(json.loads(data)["count"])
        finally:
            conn.close()
        return counts


def start_sim(tmp: Path, name: str, extra: list[str]) -> Engine:
    binary = _binary("inferrail-sim")
    for attempt in range(START_ATTEMPTS):
        port = free_port()
        argv = [str(binary), "--host", "127.0.0.1", "--port", str(port), "--served-model-name", MODEL]
        proc = Proc(name, argv + extra, tmp / f"{name}.{attempt}.log")
        url = f"http://127.0.0.1:{port}"
        if wait_until(proc, f"{url}/health"):
            return Engine(url, proc)
        tail = proc.tail()
        proc.stop()
    pytest.fail(f"{name} did not answer /health within {START_TIMEOUT}s:\n{tail}")


@dataclass
class Target:
    """Where a test's clients point: the simulator itself or the gateway."""

    name: str
    base_url: str  # .../v1 for the SDK
    engine: Engine  # a simulator behind it, for /tokenize


@dataclass
class Fleet:
    gateway: Proc
    url: str
    admin_url: str
    engines: list[Engine]
    replica_ids: list[str]


# Per replica. The gateway splits both caps evenly over its data cores and answers 503 when
# every replica is over this core's share; `max_pending` counts requests still waiting for their
# first byte. With the defaults (512 / 256) and 2 cores, 1,000 streams opened at once exceed
# 3 x 128 pending on a core and some get 503 "every replica ... is at its concurrency limit". The
# 1,000-stream test wants every stream admitted whichever replica and core it lands on.
REPLICA_CAP = 1000

GATEWAY_CONFIG = """\
# Written by bench/sdk/conftest.py: three simulators behind one gateway.
server:
  listen: 127.0.0.1:{port}
  admin_listen: 127.0.0.1:{admin_port}
  cores: auto
  request_timeout: 60s
  shutdown_timeout: 2s
  reload_interval: 0
models:
  - name: {model}
    policy: least_request
replicas:
{replicas}
"""


def _all_routable(n: int):
    def ready(status: int, body: bytes) -> bool:
        if status != 200:
            return False
        reps = json.loads(body)["replicas"]
        return len(reps) == n and all(r["routable"] and r["healthy"] for r in reps)

    return ready


@pytest.fixture(scope="session")
def sim(tmp_path_factory) -> Engine:
    """One simulator with its default latency model."""
    tmp = tmp_path_factory.mktemp("sim")
    engine = start_sim(tmp, "sim", [])
    yield engine
    engine.proc.stop()


@pytest.fixture(scope="session")
def fleet(tmp_path_factory) -> Fleet:
    """Three `--zero-latency` simulators behind `inferrail serve` (least_request)."""
    tmp = tmp_path_factory.mktemp("fleet")
    engines: list[Engine] = []
    gateway: Proc | None = None
    try:
        for i in range(3):
            engines.append(start_sim(tmp, f"sim{i}", ["--zero-latency"]))
        ids = [f"r{i}" for i in range(3)]
        replicas = "".join(
            f"  - id: {rid}\n    url: {e.url}\n    models: [{MODEL}]\n"
            f"    max_concurrency: {REPLICA_CAP}\n    max_pending: {REPLICA_CAP}\n"
            for rid, e in zip(ids, engines)
        )
        binary = _binary("inferrail")
        for attempt in range(START_ATTEMPTS):
            port, admin_port = free_port(), free_port()
            config = tmp / "inferrail.yaml"
            config.write_text(
                GATEWAY_CONFIG.format(port=port, admin_port=admin_port, model=MODEL, replicas=replicas)
            )
            gateway = Proc(
                "gateway",
                [str(binary), "serve", "--config", str(config)],
                tmp / f"gateway.{attempt}.log",
            )
            url, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
            if wait_until(gateway, f"{url}/health") and wait_until(
                gateway, f"{admin}/admin/replicas", _all_routable(len(engines))
            ):
                break
            tail = gateway.tail()
            gateway.stop()
            gateway = None
        if gateway is None:
            pytest.fail(f"the gateway did not become ready within {START_TIMEOUT}s:\n{tail}")
        yield Fleet(gateway, url, admin, engines, ids)
    finally:
        if gateway is not None:
            gateway.stop()
        for e in engines:
            e.proc.stop()


@pytest.fixture(params=["sim", "gateway"])
def target(request) -> Target:
    """Each test that takes `target` runs twice: against the simulator and through the gateway."""
    if request.param == "sim":
        engine = request.getfixturevalue("sim")
        return Target("sim", f"{engine.url}/v1", engine)
    f = request.getfixturevalue("fleet")
    return Target("gateway", f"{f.url}/v1", f.engines[0])
