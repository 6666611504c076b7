"""KV events against the real ZeroMQ library (pyzmq, libzmq inside), both ways:

- pyzmq's SUB subscribes to `inferrail-sim`'s PUB socket and reads the batches a chat request
  stores, `[topic, seq, payload]` with the payload msgpack as vLLM 0.32 writes it;
- `inferrail-tools kv-events` (the gateway's own SUB client and decoder) reads a pyzmq PUB
  socket publishing vLLM-shaped batches, both the map-tagged events of vLLM >= 0.26 and the
  positional arrays of older releases.
"""

from __future__ import annotations

import json
import subprocess
import time

import msgpack
import pytest
import zmq

from conftest import MODEL, Proc, _binary, free_port, http_post_json, start_sim

pytestmark = pytest.mark.timeout(60)


def test_pyzmq_subscribes_to_the_simulator(tmp_path):
    port = free_port()
    config = json.dumps({"enable_kv_cache_events": True, "endpoint": f"tcp://*:{port}", "topic": "kv"})
    engine = start_sim(tmp_path, "sim-kv", ["--kv-events-config", config])
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    try:
        sub.setsockopt(zmq.SUBSCRIBE, b"kv")
        sub.setsockopt(zmq.RCVTIMEO, 200)
        sub.connect(f"tcp://127.0.0.1:{port}")
        prompt = "the quick brown fox " * 40
        got = None
        deadline = time.monotonic() + 20
        # A subscription takes a moment to reach the publisher: send until a batch comes back.
        while got is None and time.monotonic() < deadline:
            http_post_json(
                f"{engine.url}/v1/completions",
                {"model": MODEL, "prompt": prompt, "max_tokens": 1},
            )
            try:
                got = sub.recv_multipart()
            except zmq.Again:
                prompt += " again"
        assert got is not None, "no KV event batch arrived"
        topic, seq, payload = got
        assert topic == b"kv"
        assert len(seq) == 8
        ts, events, rank = msgpack.unpackb(payload, raw=False)
        assert isinstance(ts, float) and rank == 0
        stored = [e for e in events if e["type"] == "BlockStored"]
        assert stored, events
        e = stored[0]
        assert e["medium"] == "GPU"
        assert len(e["token_ids"]) == e["block_size"] * len(e["block_hashes"])
    finally:
        sub.close(linger=0)
        ctx.term()
        engine.proc.stop()


def _stored_map(seq: int) -> dict:
    return {
        "type": "BlockStored",
        "block_hashes": [1000 + seq, 2000 + seq],
        "parent_block_hash": None,
        "token_ids": list(range(seq, seq + 32)),
        "block_size": 16,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "extra_keys": [["salt"], None],
        "group_idx": 0,
        "kv_cache_spec_kind": "full_attention",
        "a_field_from_the_future": {"x": [1, 2]},
    }


def test_inferrail_reads_a_pyzmq_publisher(tmp_path):
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    tool = Proc(
        "kv-events",
        [str(_binary("inferrail-tools")), "kv-events", "--endpoint", f"tcp://127.0.0.1:{port}",
         "--topic", "kv", "--count", "3", "--timeout", "20"],
        tmp_path / "kv-events.log",
    )
    try:
        seq = 0
        deadline = time.monotonic() + 30
        # The slow-joiner rule: messages before the subscription arrives are not delivered, so
        # publish until the tool has read three and exited.
        while tool.p.poll() is None and time.monotonic() < deadline:
            if seq % 2 == 0:
                events = [_stored_map(seq), {"type": "BlockRemoved", "block_hashes": [7], "medium": "GPU"}]
            else:
                # The positional form of older vLLM: the tag, then the fields in order.
                events = [["BlockStored", [3000 + seq], None, list(range(16)), 16, None, "GPU"],
                          ["AllBlocksCleared"]]
            payload = msgpack.packb([1796014365.25 + seq, events, 0], use_bin_type=True)
            pub.send_multipart([b"kv", seq.to_bytes(8, "big"), payload])
            seq += 1
            time.sleep(0.05)
        tool.p.wait(timeout=10)
        out = tool.log.read_text().splitlines()
        assert tool.p.returncode == 0, "\n".join(out)
        lines = [json.loads(line) for line in out if line.startswith("{")]
        assert len(lines) == 3, out
        seqs = [l["seq"] for l in lines]
        assert seqs == list(range(seqs[0], seqs[0] + 3))
        for l in lines:
            assert l["topic"] == "kv" and l["data_parallel_rank"] == 0
            assert l["unknown_events"] == 0
            assert l["ts"] == 1796014365.25 + l["seq"]
            first = l["events"][0]
            if l["seq"] % 2 == 0:
                assert first["block_hashes"] == [1000 + l["seq"], 2000 + l["seq"]]
                assert first["token_ids"] == list(range(l["seq"], l["seq"] + 32))
                assert first["extra_keys"] == [["salt"], None]
                assert l["events"][1] == {"type": "BlockRemoved", "block_hashes": [7], "medium": "GPU",
                                          "group_idx": None, "locality": None, "ownership": None}
            else:
                assert first["block_hashes"] == [3000 + l["seq"]]
                assert first["token_ids"] == list(range(16))
                assert first["extra_keys"] is None
                assert l["events"][1] == {"type": "AllBlocksCleared"}
    finally:
        tool.stop()
        pub.close(linger=0)
        ctx.term()
