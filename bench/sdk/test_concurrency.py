"""1,000 concurrent streams through the async SDK and the gateway in front of three simulators.

The simulators run with `--zero-latency`, so the test exercises the gateway and the clients, not
the latency model, and finishes in seconds.

Connection limits: httpx's default pool allows 100 connections (20 kept alive), so with one
default client 900 of the 1,000 streams would wait for a connection instead of being open at
once. Each stream needs its own connection (HTTP/1.1), so the clients get
`httpx.AsyncClient(limits=httpx.Limits(max_connections=..., max_keepalive_connections=...))`
adding up to 1,000. The streams are spread over CLIENTS such clients of 100 connections rather
than one client of 1,000 because httpcore's pool rescans every connection on every request and
release (O(connections) per event, encode/httpcore#1035): one pool of 1,000 costs ~25 s of CPU
here, ten pools of 100 a tenth of a second. All 1,000 streams are still in one asyncio.gather.
"""

from __future__ import annotations

import asyncio
import collections

import httpx
import openai
import pytest

from conftest import MODEL, Fleet

STREAMS = 1000
CLIENTS = 10  # AsyncOpenAI clients, each with its own pool of STREAMS // CLIENTS connections
MAX_TOKENS = 8


def prompt(i: int) -> list[dict]:
    # A different prompt (and length) per stream, so a mixed-up response shows in its usage.
    return [{"role": "user", "content": f"Request {i}: " + "tell me more " * (i % 13)}]


def async_client(url: str, connections: int) -> openai.AsyncOpenAI:
    http = httpx.AsyncClient(
        limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
        timeout=httpx.Timeout(60.0, connect=10.0),
    )
    return openai.AsyncOpenAI(base_url=url, api_key="unused", max_retries=0, http_client=http)


@pytest.mark.asyncio
@pytest.mark.timeout(100)
async def test_1000_concurrent_streams_exact_usage(fleet: Fleet):
    # What a simulator counts for each prompt (the three count alike).
    expected = fleet.engines[0].prompt_tokens_chat_many([prompt(i) for i in range(STREAMS)])
    clients = [async_client(f"{fleet.url}/v1", STREAMS // CLIENTS) for _ in range(CLIENTS)]

    async def one(i: int):
        client = clients[i % CLIENTS]
        raw = await client.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=prompt(i),
            max_tokens=MAX_TOKENS,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={"ignore_eos": True},
        )
        replica = raw.headers.get("x-inferrail-replica")
        stream = raw.parse()
        tokens, usage, finish = 0, None, None
        async with stream:
            async for chunk in stream:
                if chunk.usage is not None:
                    usage = chunk.usage
                for c in chunk.choices:
                    if c.delta.role is None:  # not the role chunk: one token
                        tokens += 1
                    if c.finish_reason is not None:
                        finish = c.finish_reason
        return i, replica, tokens, finish, usage

    try:
        results = await asyncio.gather(*(one(i) for i in range(STREAMS)), return_exceptions=True)
    finally:
        for c in clients:
            await c.close()

    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, f"{len(errors)} of {STREAMS} streams failed, first: {errors[0]!r}"
    bad = []
    for i, replica, tokens, finish, usage in results:
        if (
            usage is None
            or usage.prompt_tokens != expected[i]
            or usage.completion_tokens != MAX_TOKENS
            or usage.total_tokens != expected[i] + MAX_TOKENS
            or tokens != MAX_TOKENS
            or finish != "length"
        ):
            bad.append((i, replica, tokens, finish, usage, expected[i]))
    assert not bad, f"{len(bad)} of {STREAMS} streams with wrong usage, first: {bad[:3]}"
    served = collections.Counter(r[1] for r in results)
    assert set(served) == set(fleet.replica_ids), served
