"""The official `openai` Python SDK against the simulator and through the gateway.

Every test taking `target` runs twice: `[sim]` talks to one `inferrail-sim` directly, `[gateway]`
goes through `inferrail serve` in front of three simulators. The simulator guarantees that with
`max_tokens: N` and `ignore_eos: true` a completion has exactly N tokens, one stream chunk each.
"""

from __future__ import annotations

import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion

from conftest import MODEL, Target

N = 7  # max_tokens of the functional tests
CLIENT_TIMEOUT = httpx.Timeout(30.0, connect=5.0)
# `ignore_eos` (vLLM's sampling parameter, not part of the OpenAI schema) goes in extra_body;
# `return_token_ids` makes vLLM report each chunk's token ids.
EXACT = {"ignore_eos": True}


def sync_client(t: Target) -> openai.OpenAI:
    # max_retries=0: a failure must surface, not be retried away.
    return openai.OpenAI(base_url=t.base_url, api_key="unused", max_retries=0, timeout=CLIENT_TIMEOUT)


def async_client(t: Target) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=t.base_url, api_key="unused", max_retries=0, timeout=CLIENT_TIMEOUT
    )


def messages(text: str) -> list[dict]:
    return [
        {"role": "system", "content": "You are a terse assistant."},
        {"role": "user", "content": text},
    ]


def check_usage(usage, prompt_tokens: int, completion_tokens: int = N) -> None:
    assert usage is not None
    assert usage.prompt_tokens == prompt_tokens
    assert usage.completion_tokens == completion_tokens
    assert usage.total_tokens == prompt_tokens + completion_tokens


def check_chat_stream(chunks: list, prompt_tokens: int, with_token_ids: bool) -> str:
    """The chunks of a chat stream with include_usage; returns the streamed text."""
    assert chunks, "empty stream"
    *body, last = chunks
    # The last chunk is the usage chunk: no choices; every other chunk has none.
    assert last.choices == []
    check_usage(last.usage, prompt_tokens)
    assert all(c.usage is None for c in body)
    assert all(len(c.choices) == 1 for c in body)
    assert len({c.id for c in chunks}) == 1
    # vLLM's first chunk names the role with empty content; then one chunk per token.
    first, *tokens = body
    assert first.choices[0].delta.role == "assistant"
    assert first.choices[0].delta.content == ""
    assert len(tokens) == last.usage.completion_tokens == N
    assert all(c.choices[0].delta.content is not None for c in tokens)
    assert [c.choices[0].finish_reason for c in tokens] == [None] * (N - 1) + ["length"]
    if with_token_ids:
        ids = [tid for c in tokens for tid in c.choices[0].token_ids]
        assert len(ids) == N
    return "".join(c.choices[0].delta.content for c in tokens)


# ---------------------------------------------------------------------------------------------
# models.list


def test_models_list(target: Target):
    with sync_client(target) as client:
        ids = [m.id for m in client.models.list()]
    assert MODEL in ids


@pytest.mark.asyncio
async def test_models_list_async(target: Target):
    async with async_client(target) as client:
        page = await client.models.list()
        ids = [m.id async for m in page]
    assert MODEL in ids


# ---------------------------------------------------------------------------------------------
# chat completions


def test_chat_non_streaming(target: Target):
    msgs = messages("Name three rivers.")
    with sync_client(target) as client:
        r = client.chat.completions.create(model=MODEL, messages=msgs, max_tokens=N, extra_body=EXACT)
    assert isinstance(r, ChatCompletion)
    assert r.object == "chat.completion"
    assert r.model == MODEL
    assert len(r.choices) == 1
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content
    assert r.choices[0].finish_reason == "length"
    check_usage(r.usage, target.engine.prompt_tokens_chat(msgs))


def test_chat_streaming_usage_matches_non_streaming(target: Target):
    msgs = messages("Describe a lighthouse in one sentence.")
    with sync_client(target) as client:
        plain = client.chat.completions.create(
            model=MODEL, messages=msgs, max_tokens=N, extra_body=EXACT
        )
        stream = client.chat.completions.create(
            model=MODEL,
            messages=msgs,
            max_tokens=N,
            stream=True,
            stream_options={"include_usage": True},
            extra_body={**EXACT, "return_token_ids": True},
        )
        with stream:
            chunks = list(stream)
    check_chat_stream(chunks, plain.usage.prompt_tokens, with_token_ids=True)
    assert chunks[-1].usage.prompt_tokens == plain.usage.prompt_tokens
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens == N
    assert plain.usage.prompt_tokens == target.engine.prompt_tokens_chat(msgs)


@pytest.mark.asyncio
async def test_chat_non_streaming_async(target: Target):
    msgs = messages("What is a prime number?")
    async with async_client(target) as client:
        r = await client.chat.completions.create(
            model=MODEL, messages=msgs, max_tokens=N, extra_body=EXACT
        )
    assert r.choices[0].message.content
    assert r.choices[0].finish_reason == "length"
    check_usage(r.usage, target.engine.prompt_tokens_chat(msgs))


@pytest.mark.asyncio
async def test_chat_streaming_async(target: Target):
    msgs = messages("Count to five.")
    async with async_client(target) as client:
        plain = await client.chat.completions.create(
            model=MODEL, messages=msgs, max_tokens=N, extra_body=EXACT
        )
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=msgs,
            max_tokens=N,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=EXACT,
        )
        async with stream:
            chunks = [c async for c in stream]
    check_chat_stream(chunks, plain.usage.prompt_tokens, with_token_ids=False)
    assert chunks[-1].usage.completion_tokens == plain.usage.completion_tokens


def test_chat_streaming_without_usage(target: Target):
    """Without stream_options no chunk carries usage, and the stream still ends cleanly."""
    with sync_client(target) as client:
        stream = client.chat.completions.create(
            model=MODEL, messages=messages("Hi."), max_tokens=N, stream=True, extra_body=EXACT
        )
        with stream:
            chunks = list(stream)
    assert all(c.usage is None for c in chunks)
    assert len(chunks) == 1 + N
    assert chunks[-1].choices[0].finish_reason == "length"


# ---------------------------------------------------------------------------------------------
# completions


def test_completions_non_streaming(target: Target):
    prompt = "The quick brown fox"
    with sync_client(target) as client:
        r = client.completions.create(model=MODEL, prompt=prompt, max_tokens=N, extra_body=EXACT)
    assert r.object == "text_completion"
    assert r.model == MODEL
    assert len(r.choices) == 1
    assert r.choices[0].text
    assert r.choices[0].finish_reason == "length"
    check_usage(r.usage, target.engine.prompt_tokens_text(prompt))


def test_completions_streaming(target: Target):
    prompt = "Once upon a time"
    with sync_client(target) as client:
        plain = client.completions.create(model=MODEL, prompt=prompt, max_tokens=N, extra_body=EXACT)
        stream = client.completions.create(
            model=MODEL,
            prompt=prompt,
            max_tokens=N,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=EXACT,
        )
        with stream:
            chunks = list(stream)
    *tokens, last = chunks
    assert last.choices == []
    check_usage(last.usage, plain.usage.prompt_tokens)
    assert plain.usage.prompt_tokens == target.engine.prompt_tokens_text(prompt)
    assert len(tokens) == N
    assert all(c.usage is None and len(c.choices) == 1 for c in tokens)
    assert [c.choices[0].finish_reason for c in tokens] == [None] * (N - 1) + ["length"]
    assert "".join(c.choices[0].text for c in tokens)


@pytest.mark.asyncio
async def test_completions_streaming_async(target: Target):
    prompt = "In a galaxy far away"
    async with async_client(target) as client:
        stream = await client.completions.create(
            model=MODEL,
            prompt=prompt,
            max_tokens=N,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=EXACT,
        )
        async with stream:
            chunks = [c async for c in stream]
    assert len(chunks) == N + 1
    check_usage(chunks[-1].usage, target.engine.prompt_tokens_text(prompt))


# ---------------------------------------------------------------------------------------------
# errors: OpenAI-shaped bodies mapped to the SDK's exception types


def check_error_body(e: openai.APIStatusError, status: int, *words: str) -> None:
    assert e.status_code == status
    # The SDK unwraps {"error": {...}} into e.body.
    assert isinstance(e.body, dict), e.body
    message = e.body.get("message")
    assert isinstance(message, str) and message, e.body
    for w in words:
        assert w in message, message


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_unknown_model_chat_not_found(target: Target, stream: bool):
    with sync_client(target) as client, pytest.raises(openai.NotFoundError) as ei:
        client.chat.completions.create(
            model="no-such-model", messages=messages("hello"), max_tokens=N, stream=stream
        )
    check_error_body(ei.value, 404, "no-such-model")


def test_unknown_model_completions_not_found(target: Target):
    with sync_client(target) as client, pytest.raises(openai.NotFoundError) as ei:
        client.completions.create(model="no-such-model", prompt="hello", max_tokens=N)
    check_error_body(ei.value, 404, "no-such-model")


@pytest.mark.asyncio
async def test_unknown_model_async_not_found(target: Target):
    async with async_client(target) as client:
        with pytest.raises(openai.NotFoundError) as ei:
            await client.chat.completions.create(
                model="no-such-model", messages=messages("hello"), max_tokens=N
            )
    check_error_body(ei.value, 404, "no-such-model")


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_negative_max_tokens_bad_request(target: Target, stream: bool):
    with sync_client(target) as client, pytest.raises(openai.BadRequestError) as ei:
        client.chat.completions.create(
            model=MODEL, messages=messages("hello"), max_tokens=-1, stream=stream
        )
    check_error_body(ei.value, 400, "max_tokens")


def test_negative_max_tokens_completions_bad_request(target: Target):
    with sync_client(target) as client, pytest.raises(openai.BadRequestError) as ei:
        client.completions.create(model=MODEL, prompt="hello", max_tokens=-1)
    check_error_body(ei.value, 400, "max_tokens")


def test_missing_messages_bad_request(target: Target):
    # The typed method will not send a request without `messages`; the SDK's own low-level
    # `post` sends the body as is and maps the error the same way.
    with sync_client(target) as client, pytest.raises(openai.BadRequestError) as ei:
        client.post("/chat/completions", body={"model": MODEL, "max_tokens": N}, cast_to=ChatCompletion)
    check_error_body(ei.value, 400, "messages")
