#!/usr/bin/env python3
"""Generate golden prompt-token ids from a real vLLM for the gateway's tokenizer parity tests.

For each tokenizer family this serves a real vLLM (``vllm serve <tiny model> --tokenizer <family
dir>``), builds a deterministic (seeded) set of OpenAI chat / completion request bodies, asks vLLM
for their prompt token ids through ``POST /tokenize`` and cross-checks every answer with
``POST /v1/chat/completions/render`` / ``POST /v1/completions/render`` (the exact body a client
would send). One JSON object per line goes to ``<out>/<family>.jsonl``:

    {"case": "<family>/<nnnn>/<kind>", "endpoint": "/v1/chat/completions" | "/v1/completions",
     "body": {...the request body exactly as the gateway receives it...},
     "prompt_token_ids": [...]}            # or "error": <HTTP status> when vLLM refuses it

Nothing else is written (no tokenizer files, no rendered text). Run it with the vLLM venv python;
see README.md in this folder for the exact commands.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import string
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Callable

MODEL_NAME = "m"
CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
# Llama 3.x templates print today's date unless `date_string` is given; the goldens must not
# depend on the day they were generated, so every Llama request pins it.
PINNED_DATE = "26 Jul 2024"

# ----------------------------------------------------------------------------- family settings

FAMILIES: dict[str, dict[str, Any]] = {
    "qwen3": {
        "tool_parser": "hermes",  # vLLM refuses tools (tool_choice auto) without one
        "specials": ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
                     "<tool_call>", "</tool_call>", "<tool_response>", "<|vision_start|>",
                     "<|fim_prefix|>"],
        "thinking": True,
        "max_tool_calls": 3,
        "strict_alternation": False,
        "pin_date": False,
    },
    "llama3_2": {
        "tool_parser": "llama3_json",  # vLLM refuses tools (tool_choice auto) without one
        "specials": ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                     "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>",
                     "<|reserved_special_token_5|>"],
        "thinking": False,
        "max_tool_calls": 1,  # the template raises on more than one call per message
        "strict_alternation": False,
        "pin_date": True,
    },
    "mistral_nemo": {
        "tool_parser": "mistral",  # vLLM refuses tools (tool_choice auto) without one
        "specials": ["<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]",
                     "[TOOL_RESULTS]", "<unk>"],
        "thinking": False,
        "max_tool_calls": 2,
        "strict_alternation": True,  # the template raises unless user/assistant alternate
        "pin_date": False,
    },
}
# Strings that look special in some other family (plain text for most tokenizers).
FOREIGN_SPECIALS = ["<|im_start|>", "<|eot_id|>", "<｜User｜>", "<｜end▁of▁sentence｜>", "[INST]", "<s>", "</s>",
                    "<|endoftext|>", "<think>", "<|start_header_id|>user<|end_header_id|>"]

# ----------------------------------------------------------------------------- text material

WORDS = """the quick brown fox jumps over lazy dog cache router token prefix block engine replica
latency throughput request response stream model prompt system user assistant tool function
weather city temperature forecast database query index shard thread core queue memory budget
please explain why how what when where which could would should might must will shall can the a
an of to in on at by for with from into about between through during before after above below
kernel socket buffer epoll io_uring monoio tokio async await future poll wake pin box arc rc
matrix vector tensor gradient softmax attention layer head embedding rotary position norm
river mountain ocean forest desert island valley bridge tower castle garden library museum
don't can't won't it's I'm you're we've they'll she'd HELLO World CamelCase snake_case kebab-case
""".split()

CODE = [
    "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{v:?}\");\n}\n",
    "SELECT id, name FROM users WHERE age >= 21 AND city = 'Zürich' ORDER BY name;",
    "{\"key\": [1, 2.5, null, true], \"nested\": {\"a\": \"b\"}}",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "    indented line\n\tTabbed line\n        deeper <tag attr=\"x\">&amp;</tag>",
    "$ curl -s http://127.0.0.1:8000/v1/models | jq '.data[0].id'",
    "x = [i**2 for i in range(100) if i % 3 == 0]  # squares",
]

CJK = ["你好，世界！", "今天天气怎么样？", "机器学习模型的推理速度很重要。", "東京は日本の首都です。",
       "ありがとうございます", "カタカナとひらがな", "안녕하세요, 반갑습니다.", "한국어 문장입니다",
       "繁體中文測試", "𠀀𠀁𠀂 (CJK Ext B)", "全角スペース\u3000あり"]
EMOJI = ["😀", "🚀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇫🇷", "1️⃣", "❤️", "🧑🏿‍💻", "🐍🦀",
         "😂😂😂", "✨", "🫠"]
COMBINING = ["e\u0301", "n\u0303o", "a\u0308\u0304", "Tiếng Việt", "नमस्ते दुनिया", "สวัสดีครับ",
             "Z\u0351\u0300a\u0362\u0353l\u0335g\u0328o", "ﬁ ligature", "Å vs A\u030a", "ß ẞ ǅ",
             "o\u0338", "ÅngstrÖm"]
RTL = ["مرحبا بالعالم", "שלום עולם", "\u200fسلام\u200f", "العربية 123 English", "עִבְרִית",
       "\u202bembedded RTL\u202c", "فارسی: ۱۲۳۴"]
WHITESPACE = ["  ", "\t", "\n", "\n\n", "\n\n\n", " \n ", "\r\n", "\u00a0", "\u3000", "   \t  ",
              "\u200b", "\ufeff", "\x0b", "\x0c"]
PUNCT = ["...", "!!", "?!", "—", "–", "«quoted»", "“smart”", "'single'", "(paren)", "[bracket]",
         "{brace}", "<angle>", "a&b", "50%", "$100", "#hash", "@user", "~/path", "C:\\dir\\f.txt",
         "https://example.com/a?b=c&d=e", "x->y", "a::b", "i++", "==="]


def number(rng: random.Random) -> str:
    k = rng.randrange(6)
    if k == 0:
        return str(rng.randrange(10))
    if k == 1:
        return str(rng.randrange(10 ** rng.randrange(2, 20)))
    if k == 2:
        return f"{rng.uniform(-1000, 1000):.{rng.randrange(1, 6)}f}"
    if k == 3:
        return f"{rng.randrange(1, 999)},{rng.randrange(100, 999)},{rng.randrange(100, 999)}"
    if k == 4:
        return f"{rng.randrange(1970, 2100)}-{rng.randrange(1, 13):02d}-{rng.randrange(1, 29):02d}"
    return f"0x{rng.randrange(1 << 32):08X}"


def words(rng: random.Random, n: int) -> str:
    out = []
    for _ in range(n):
        w = rng.choice(WORDS)
        r = rng.random()
        if r < 0.08:
            w = w.capitalize()
        elif r < 0.10:
            w = w.upper()
        out.append(w)
        if rng.random() < 0.07:
            out[-1] += rng.choice([",", ".", ";", ":", "?", "!"])
    return " ".join(out)


def text(rng: random.Random, n: int, flavors: tuple[str, ...] = ("plain",),
         specials: list[str] | None = None) -> str:
    """Roughly `n` words of text mixing the given flavors of material."""
    pieces: list[str] = []
    while sum(len(p.split()) or 1 for p in pieces) < n:
        f = rng.choice(flavors)
        if f == "plain":
            pieces.append(words(rng, rng.randrange(3, 12)))
        elif f == "code":
            pieces.append(rng.choice(CODE))
        elif f == "cjk":
            pieces.append(rng.choice(CJK))
        elif f == "emoji":
            pieces.append("".join(rng.choice(EMOJI) for _ in range(rng.randrange(1, 4))))
        elif f == "combining":
            pieces.append(rng.choice(COMBINING))
        elif f == "rtl":
            pieces.append(rng.choice(RTL))
        elif f == "ws":
            pieces.append(words(rng, 2) + rng.choice(WHITESPACE) + words(rng, 2))
        elif f == "punct":
            pieces.append(rng.choice(PUNCT))
        elif f == "number":
            pieces.append(number(rng))
        elif f == "special":
            sp = specials or FOREIGN_SPECIALS
            pieces.append(rng.choice(sp) + rng.choice(["", " ", "\n"]) + words(rng, 2))
    sep = [" ", " ", " ", "\n", "", "  "]
    out = pieces[0]
    for p in pieces[1:]:
        out += rng.choice(sep) + p
    return out


UNICODE_FLAVORS = ("plain", "cjk", "emoji", "combining", "rtl", "punct")
MIXED_FLAVORS = ("plain", "plain", "code", "cjk", "emoji", "number", "punct", "ws")

# ----------------------------------------------------------------------------- tools

TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city. Units default to celsius.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. 'Zürich' or \"東京\""},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search_docs",
        "description": "Full-text search over the <docs> index & return the top hits.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"},
            "top_k": {"type": "integer", "minimum": 1, "maximum": 50, "default": 5},
            "filters": {"type": "object", "properties": {
                "lang": {"type": "string"}, "year": {"type": "integer"}}}},
            "required": ["query"]}}},
    {"type": "function", "function": {
        "name": "run_sql",
        "description": "Run a read-only SQL query. Returns rows as JSON arrays.",
        "parameters": {"type": "object", "properties": {
            "sql": {"type": "string", "description": "SELECT only"},
            "params": {"type": "array", "items": {"type": ["string", "number", "null"]}}},
            "required": ["sql"]}}},
    {"type": "function", "function": {
        "name": "send_email",
        "description": "Send an e-mail on the user's behalf 📧",
        "parameters": {"type": "object", "properties": {
            "to": {"type": "array", "items": {"type": "string", "format": "email"}},
            "subject": {"type": "string"}, "body": {"type": "string"},
            "urgent": {"type": "boolean", "default": False}},
            "required": ["to", "subject", "body"]}}},
    {"type": "function", "function": {
        "name": "calculate",
        "description": "Evaluate an arithmetic expression exactly.",
        "parameters": {"type": "object", "properties": {
            "expression": {"type": "string"}, "precision": {"type": "number"}},
            "required": ["expression"]}}},
    {"type": "function", "function": {
        "name": "no_args",
        "description": "A tool without parameters.",
        "parameters": {"type": "object", "properties": {}}}},
]


def tool_args(rng: random.Random, name: str) -> dict[str, Any]:
    if name == "get_weather":
        a: dict[str, Any] = {"city": rng.choice(["Paris", "Zürich", "東京", "São Paulo", "القاهرة", "New York"])}
        if rng.random() < 0.5:
            a["unit"] = rng.choice(["celsius", "fahrenheit"])
        return a
    if name == "search_docs":
        a = {"query": text(rng, 4, ("plain", "punct", "cjk")), "top_k": rng.randrange(1, 20)}
        if rng.random() < 0.4:
            a["filters"] = {"lang": rng.choice(["en", "zh", "ar"]), "year": rng.randrange(1990, 2030)}
        return a
    if name == "run_sql":
        return {"sql": rng.choice(CODE[2:3] + ["SELECT 1", "SELECT * FROM t WHERE x < 3 AND y > 'a&b'"]),
                "params": [rng.choice(["a", 1, 2.5, None]) for _ in range(rng.randrange(0, 3))]}
    if name == "send_email":
        return {"to": ["alice@example.com"] + (["bob@example.org"] if rng.random() < 0.5 else []),
                "subject": text(rng, 3, ("plain", "emoji")), "body": text(rng, 12, MIXED_FLAVORS),
                "urgent": rng.random() < 0.3}
    if name == "calculate":
        return {"expression": f"{number(rng)} * ({rng.randrange(100)} + {rng.randrange(100)}) / 7",
                "precision": rng.choice([2, 0.001, 10])}
    return {}


def call_id(rng: random.Random) -> str:
    # 9 alphanumerics: what Mistral templates require and other templates accept.
    return "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(9))


def encode_args(rng: random.Random, args: dict[str, Any]) -> str:
    r = rng.random()
    if r < 0.5:
        return json.dumps(args, ensure_ascii=False)
    if r < 0.8:
        return json.dumps(args)  # \\uXXXX escapes, as many clients send
    return json.dumps(args, ensure_ascii=False, separators=(",", ":"))


def tool_result(rng: random.Random, name: str) -> str:
    r = rng.random()
    if name == "get_weather" or r < 0.3:
        return json.dumps({"temperature": round(rng.uniform(-20, 40), 1), "condition":
                           rng.choice(["sunny", "rain", "snow ❄️", "多云"])}, ensure_ascii=rng.random() < 0.5)
    if r < 0.6:
        return text(rng, rng.randrange(5, 30), MIXED_FLAVORS)
    return json.dumps([[1, "a"], [2, None]])


# ----------------------------------------------------------------------------- request builders


class Builder:
    """Builds request bodies for one family from one seeded RNG."""

    def __init__(self, family: str, seed: int):
        self.family = family
        self.cfg = FAMILIES[family]
        self.rng = random.Random(f"inferrail-goldens/{family}/{seed}")
        self.calls: dict[str, int] = {}

    def cycle(self, kind: str, n: int) -> int:
        """0, 1, ..., n-1, 0, ... on successive calls for `kind`: every variant gets its turn."""
        k = self.calls.get(kind, 0)
        self.calls[kind] = k + 1
        return k % n

    # -- helpers
    def t(self, n: int, flavors: tuple[str, ...] = ("plain",)) -> str:
        return text(self.rng, n, flavors, self.cfg["specials"])

    def content(self, s: str, parts_p: float = 0.0) -> Any:
        if self.rng.random() < parts_p:
            return self.parts(s)
        return s

    def parts(self, s: str) -> list[dict[str, str]]:
        k = self.rng.randrange(1, 4)
        chunks = [s] + [self.t(self.rng.randrange(2, 8)) for _ in range(k - 1)]
        return [{"type": "text", "text": c} for c in chunks]

    def chat(self, messages: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"model": MODEL_NAME, "messages": messages}
        rng = self.rng
        kwargs = dict(extra.pop("chat_template_kwargs", {}) or {})
        if self.cfg["thinking"] and "enable_thinking" not in kwargs and rng.random() < 0.3:
            kwargs["enable_thinking"] = rng.random() < 0.5
        if self.cfg["pin_date"]:
            kwargs["date_string"] = PINNED_DATE
        body.update(extra)
        if kwargs:
            body["chat_template_kwargs"] = kwargs
        # Fields a real client sends that must not change the prompt.
        r = rng.random()
        if r < 0.3:
            body["max_tokens"] = rng.randrange(1, 512)
        if r < 0.15:
            body["temperature"] = round(rng.uniform(0, 1.5), 2)
        if rng.random() < 0.15:
            body["stream"] = rng.random() < 0.5
        return body

    def completion(self, prompt: Any, **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"model": MODEL_NAME, "prompt": prompt}
        body.update(extra)
        if self.rng.random() < 0.3:
            body["max_tokens"] = self.rng.randrange(1, 256)
        return body

    def turns(self, n_pairs: int, flavors: tuple[str, ...] = ("plain",), parts_p: float = 0.0,
              final_user: bool = True) -> list[dict[str, Any]]:
        msgs: list[dict[str, Any]] = []
        for i in range(n_pairs):
            msgs.append({"role": "user", "content": self.content(self.t(self.rng.randrange(3, 40), flavors), parts_p)})
            if i < n_pairs - 1 or not final_user:
                msgs.append({"role": "assistant", "content": self.content(self.t(self.rng.randrange(3, 60), flavors), parts_p)})
        return msgs

    def system(self, flavors: tuple[str, ...] = ("plain",), parts_p: float = 0.0) -> dict[str, Any]:
        return {"role": "system", "content": self.content(self.t(self.rng.randrange(5, 50), flavors), parts_p)}

    def maybe_system(self, p: float = 0.5, **kw: Any) -> list[dict[str, Any]]:
        return [self.system(**kw)] if self.rng.random() < p else []

    def tools(self) -> list[dict[str, Any]]:
        k = self.rng.randrange(1, len(TOOLS) + 1)
        return self.rng.sample(TOOLS, k)

    def tool_exchange(self, tools: list[dict[str, Any]], with_content: bool = False,
                      parts_p: float = 0.0) -> list[dict[str, Any]]:
        """An assistant message with tool calls followed by one tool result per call."""
        rng = self.rng
        n = rng.randrange(1, self.cfg["max_tool_calls"] + 1)
        calls = []
        for _ in range(n):
            fn = rng.choice(tools)["function"]["name"]
            calls.append({"id": call_id(rng), "type": "function",
                          "function": {"name": fn, "arguments": encode_args(rng, tool_args(rng, fn))}})
        msg: dict[str, Any] = {"role": "assistant",
                               "content": self.t(rng.randrange(3, 15)) if with_content else None,
                               "tool_calls": calls}
        if not with_content and rng.random() < 0.3:
            del msg["content"]  # absent content is as common as explicit null
        out = [msg]
        for c in calls:
            tm: dict[str, Any] = {"role": "tool", "tool_call_id": c["id"],
                                  "content": self.content(tool_result(rng, c["function"]["name"]), parts_p)}
            if rng.random() < 0.3:
                tm["name"] = c["function"]["name"]
            out.append(tm)
        return out

    # -- case kinds: each returns (endpoint, body)
    def k_single_user(self):
        return CHAT, self.chat([{"role": "user", "content": self.t(self.rng.randrange(1, 40), MIXED_FLAVORS)}],
                               add_generation_prompt=self.rng.random() < 0.9)

    def k_system_user(self):
        msgs = [self.system(MIXED_FLAVORS), {"role": "user", "content": self.t(self.rng.randrange(2, 30))}]
        return CHAT, self.chat(msgs, add_generation_prompt=True)

    def k_multi_turn(self):
        msgs = self.maybe_system() + self.turns(self.rng.randrange(2, 7), MIXED_FLAVORS)
        return CHAT, self.chat(msgs, add_generation_prompt=True)

    def k_content_parts(self):
        msgs = self.maybe_system(0.5, parts_p=0.6) + self.turns(self.rng.randrange(1, 4), MIXED_FLAVORS, parts_p=0.7)
        if isinstance(msgs[-1]["content"], str):
            msgs[-1]["content"] = self.parts(msgs[-1]["content"])
        return CHAT, self.chat(msgs, add_generation_prompt=True)

    def k_tools_defs(self):
        msgs = self.maybe_system() + self.turns(self.rng.randrange(1, 3))
        return CHAT, self.chat(msgs, tools=self.tools(), add_generation_prompt=True)

    def k_tool_calls(self, with_content: bool = False):
        rng = self.rng
        tools = self.tools()
        msgs = self.maybe_system() + self.turns(rng.randrange(1, 3))
        msgs += self.tool_exchange(tools, with_content=with_content, parts_p=0.2)
        r = rng.random()
        if r < 0.4:
            msgs.append({"role": "assistant", "content": self.t(rng.randrange(3, 30), MIXED_FLAVORS)})
            msgs.append({"role": "user", "content": self.t(rng.randrange(3, 20))})
        elif r < 0.6 and not self.cfg["strict_alternation"]:
            msgs += self.tool_exchange(tools, parts_p=0.2)  # a second round of calls
        body_tools: list[dict[str, Any]] | None = tools if rng.random() < 0.85 else None
        extra: dict[str, Any] = {"add_generation_prompt": True}
        if body_tools is not None:
            extra["tools"] = body_tools
            if rng.random() < 0.3:
                extra["tool_choice"] = rng.choice(["auto", "none", "required"])
        return CHAT, self.chat(msgs, **extra)

    def k_tool_calls_with_content(self):
        return self.k_tool_calls(with_content=True)

    def k_tool_args_odd(self):
        """Tool-call arguments vLLM normalises: invalid JSON, non-objects and empty become {}."""
        rng = self.rng
        tools = self.tools()
        msgs = self.maybe_system(0.3) + self.turns(1)
        msgs += self.tool_exchange(tools)
        v = self.cycle("tool_args_odd", 5)
        target = next(m for m in msgs if m.get("tool_calls"))["tool_calls"][0]["function"]
        target["arguments"] = ['{"city": "Paris"', "[1, 2]", "", "42",
                               {"city": "Zürich", "days": [1, 2]}][v]
        return CHAT, self.chat(msgs, tools=tools, add_generation_prompt=rng.random() < 0.8)

    def k_special_in_user(self):
        rng = self.rng
        sp = self.cfg["specials"] + FOREIGN_SPECIALS
        s = self.t(rng.randrange(2, 10)) + rng.choice(["", " ", "\n"]) + rng.choice(sp) + \
            rng.choice(["", " ", "\n"]) + self.t(rng.randrange(2, 10), ("plain", "special"))
        msgs = self.maybe_system(0.3) + [{"role": "user", "content": self.content(s, 0.2)}]
        return CHAT, self.chat(msgs, add_generation_prompt=True)

    def k_unicode(self):
        msgs = self.maybe_system(0.3, flavors=UNICODE_FLAVORS) + \
            self.turns(self.rng.randrange(1, 4), UNICODE_FLAVORS, parts_p=0.2)
        return CHAT, self.chat(msgs, add_generation_prompt=True)

    def k_whitespace(self):
        rng = self.rng
        s = rng.choice(WHITESPACE) + self.t(rng.randrange(2, 20), ("plain", "ws", "code")) + rng.choice(WHITESPACE)
        msgs = self.maybe_system(0.3) + [{"role": "user", "content": s}]
        return CHAT, self.chat(msgs, add_generation_prompt=True)

    def k_long(self):
        rng = self.rng
        msgs = [self.system(MIXED_FLAVORS)]
        msgs[0]["content"] = self.t(rng.randrange(300, 900), MIXED_FLAVORS)
        msgs += self.turns(rng.randrange(1, 4), MIXED_FLAVORS)
        msgs[-1]["content"] = self.t(rng.randrange(300, 1200), MIXED_FLAVORS + ("cjk", "code"))
        return CHAT, self.chat(msgs, add_generation_prompt=True)

    def k_thinking(self):
        rng = self.rng
        msgs = self.maybe_system(0.4)
        for _ in range(rng.randrange(1, 3)):
            msgs.append({"role": "user", "content": self.t(rng.randrange(3, 20))})
            r = rng.random()
            if r < 0.4:
                msgs.append({"role": "assistant", "content": "<think>\n" + self.t(rng.randrange(3, 20)) +
                             "\n</think>\n\n" + self.t(rng.randrange(3, 20))})
            elif r < 0.7:
                # vLLM accepts the reasoning under either name
                key = "reasoning_content" if r < 0.55 else "reasoning"
                msgs.append({"role": "assistant", "content": self.t(rng.randrange(3, 20)),
                             key: self.t(rng.randrange(3, 20))})
            else:
                msgs.append({"role": "assistant", "content": self.t(rng.randrange(3, 20))})
        msgs.append({"role": "user", "content": self.t(rng.randrange(3, 20))})
        kwargs = {"enable_thinking": rng.random() < 0.5}
        return CHAT, self.chat(msgs, add_generation_prompt=True, chat_template_kwargs=kwargs)

    def k_continue_final(self):
        rng = self.rng
        msgs = self.maybe_system(0.3) + self.turns(rng.randrange(1, 3), MIXED_FLAVORS)
        msgs.append({"role": "assistant", "content": self.content(self.t(rng.randrange(1, 15), MIXED_FLAVORS), 0.2)})
        return CHAT, self.chat(msgs, add_generation_prompt=False, continue_final_message=True)

    def k_no_gen_prompt(self):
        rng = self.rng
        msgs = self.maybe_system(0.3) + self.turns(rng.randrange(1, 3), final_user=rng.random() < 0.5)
        return CHAT, self.chat(msgs, add_generation_prompt=False)

    def k_documents(self):
        docs = [{"title": self.t(2), "text": self.t(self.rng.randrange(5, 30), MIXED_FLAVORS)}
                for _ in range(self.rng.randrange(1, 3))]
        msgs = self.maybe_system(0.3) + self.turns(1)
        return CHAT, self.chat(msgs, documents=docs, add_generation_prompt=True)

    def k_names(self):
        msgs = self.maybe_system(0.3) + self.turns(self.rng.randrange(1, 3))
        for m in msgs:
            if self.rng.random() < 0.6:
                m["name"] = self.rng.choice(["alice", "bob_2", "Zoë"])
        return CHAT, self.chat(msgs, add_generation_prompt=True)

    def k_edge(self):
        rng = self.rng
        v = self.cycle("edge", 6)
        if v == 0:
            msgs = [{"role": "user", "content": ""}]
        elif v == 1:
            msgs = [{"role": "system", "content": ""}, {"role": "user", "content": self.t(3)}]
        elif v == 2:
            msgs = self.turns(2)
            msgs.insert(1, {"role": "assistant", "content": None})
            del msgs[2]
        elif v == 3:
            msgs = [{"role": "user", "content": [{"type": "text", "text": ""}]}]
        elif v == 4:
            msgs = [{"role": "user", "content": self.t(3)}, {"role": "assistant", "content": ""},
                    {"role": "user", "content": self.t(3)}]
        else:
            msgs = self.turns(1) + [{"role": "user", "content": self.t(5)}]  # two users in a row
        return CHAT, self.chat(msgs, add_generation_prompt=rng.random() < 0.8)

    def k_expected_refusal(self):
        rng = self.rng
        v = self.cycle("refusal", 5)
        msgs = self.turns(1)
        if v == 0:  # vLLM refuses both flags together
            msgs.append({"role": "assistant", "content": self.t(3)})
            return CHAT, self.chat(msgs, add_generation_prompt=True, continue_final_message=True)
        if v == 1:  # an image part for a text-only model
            msgs[-1]["content"] = [{"type": "text", "text": self.t(3)},
                                   {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}]
            return CHAT, self.chat(msgs, add_generation_prompt=True)
        if v == 2:  # an unknown content-part type
            msgs[-1]["content"] = [{"type": "bogus", "bogus": "x"}]
            return CHAT, self.chat(msgs, add_generation_prompt=True)
        if v == 3:  # a role no template knows
            msgs.insert(0, {"role": "narrator", "content": self.t(4)})
            return CHAT, self.chat(msgs, add_generation_prompt=True)
        return CHAT, self.chat([{"role": "system", "content": self.t(4)}], add_generation_prompt=True)

    def k_add_special_tokens(self):
        msgs = self.maybe_system(0.3) + self.turns(1)
        return CHAT, self.chat(msgs, add_generation_prompt=True, add_special_tokens=True)

    def k_completion_text(self):
        return COMPLETIONS, self.completion(self.t(self.rng.randrange(1, 60), MIXED_FLAVORS + UNICODE_FLAVORS))

    def k_completion_special(self):
        sp = self.cfg["specials"] + FOREIGN_SPECIALS
        s = self.rng.choice(sp) + self.t(self.rng.randrange(2, 15), ("plain", "special")) + self.rng.choice(sp)
        return COMPLETIONS, self.completion(s)

    def k_completion_no_special(self):
        return COMPLETIONS, self.completion(self.t(self.rng.randrange(2, 30), ("plain", "special", "cjk")),
                                            add_special_tokens=False)

    def k_completion_long(self):
        return COMPLETIONS, self.completion(self.t(self.rng.randrange(800, 2000), MIXED_FLAVORS + ("cjk", "code")))

    def k_completion_ids(self):
        n = self.rng.randrange(1, 64)
        return COMPLETIONS, self.completion([self.rng.randrange(0, 1000) for _ in range(n)])

    def k_completion_edge(self):
        v = self.cycle("completion_edge", 4)
        if v == 0:
            return COMPLETIONS, self.completion("")
        if v == 3:
            return COMPLETIONS, self.completion([])
        if v == 1:
            return COMPLETIONS, self.completion(self.rng.choice(WHITESPACE))
        return COMPLETIONS, self.completion([10 ** 7])  # an id no tokenizer here has


# (kind, count) per family; counts are the same for every family.
PLAN: list[tuple[str, int]] = [
    ("single_user", 20), ("system_user", 14), ("multi_turn", 20), ("content_parts", 16),
    ("tools_defs", 12), ("tool_calls", 22), ("tool_calls_with_content", 6), ("tool_args_odd", 5),
    ("special_in_user", 16), ("unicode", 20), ("whitespace", 10), ("long", 5), ("thinking", 14),
    ("continue_final", 10), ("no_gen_prompt", 6), ("documents", 3), ("names", 4), ("edge", 10),
    ("expected_refusal", 5), ("add_special_tokens", 2),
    ("completion_text", 24), ("completion_special", 8), ("completion_no_special", 5),
    ("completion_long", 3), ("completion_ids", 6), ("completion_edge", 4),
]


def build_requests(family: str, seed: int) -> list[tuple[str, str, dict[str, Any]]]:
    """Deterministic list of (case, endpoint, body) for a family."""
    b = Builder(family, seed)
    out = []
    for kind, count in PLAN:
        fn: Callable[[], tuple[str, dict[str, Any]]] = getattr(b, "k_" + kind)
        for _ in range(count):
            endpoint, body = fn()
            out.append((f"{family}/{len(out):04d}/{kind}", endpoint, body))
    return out


# ----------------------------------------------------------------------------- vLLM server


def http_post(port: int, path: str, body: dict[str, Any], timeout: float = 300.0) -> tuple[int, Any]:
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        raw = e.read()
        try:
            return e.code, json.loads(raw)
        except ValueError:
            return e.code, raw.decode("utf-8", "replace")


class Server:
    """A `vllm serve` child process bound to 127.0.0.1, stopped on exit."""

    def __init__(self, vllm: str, model_dir: str, tokenizer_dir: str, tool_parser: str, port: int,
                 log_path: str, max_model_len: int):
        self.port = port
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                raise RuntimeError(f"127.0.0.1:{port} is already in use; pick another --port")
        env = dict(os.environ)
        env.update({"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1",
                    "VLLM_HOST_IP": "127.0.0.1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                    "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
                    # the tiny model has 4096 positions; nothing is generated, so a longer
                    # max_model_len only lifts the prompt-length check for the long cases
                    "VLLM_ALLOW_LONG_MAX_MODEL_LEN": "1"})
        self.cmd = self.command(vllm, model_dir, tokenizer_dir, tool_parser, port, max_model_len)
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(self.cmd, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True)

    @staticmethod
    def command(vllm: str, model_dir: str, tokenizer_dir: str, tool_parser: str, port: int,
                max_model_len: int) -> list[str]:
        """The `vllm serve` argv: the CPU settings of shared/fixtures/vllm/capture.sh plus the
        family's tokenizer, the scale-out /render endpoints and a tool parser."""
        return [vllm, "serve", model_dir, "--tokenizer", tokenizer_dir, "--served-model-name", MODEL_NAME,
                "--host", "127.0.0.1", "--port", str(port), "--enable-scale-out",
                "--enable-auto-tool-choice", "--tool-call-parser", tool_parser,
                "--block-size", "32", "--enable-prefix-caching",
                "--max-model-len", str(max_model_len), "--dtype", "float32", "--seed", "0"]

    def wait_ready(self, timeout: float = 900.0) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"vllm exited with {self.proc.returncode}; see {self.log.name}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(1)
        raise RuntimeError(f"vllm not ready after {timeout}s; see {self.log.name}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()


# ----------------------------------------------------------------------------- golden capture

# Every field of vLLM's TokenizeChatRequest a client body may carry (documents and tool_choice are
# chat-only; /render sees them, and the cross-check shows whether they changed anything).
TOKENIZE_CHAT_KEYS = ("messages", "tools", "add_generation_prompt", "continue_final_message",
                      "add_special_tokens", "chat_template_kwargs")


def tokenize_body(endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
    """The POST /tokenize body equivalent to a chat / completion request body."""
    out: dict[str, Any] = {"model": body["model"]}
    if endpoint == CHAT:
        for k in TOKENIZE_CHAT_KEYS:
            if k in body:
                out[k] = body[k]
    else:
        out["prompt"] = body["prompt"]
        if "add_special_tokens" in body:
            out["add_special_tokens"] = body["add_special_tokens"]
    return out


def render_ids(resp: Any) -> list[int] | None:
    """Token ids out of a /render answer (chat: a generate request; completions: a list of them)."""
    if isinstance(resp, list):
        if len(resp) != 1:
            return None
        resp = resp[0]
    if isinstance(resp, dict):
        for k in ("token_ids", "prompt_token_ids"):
            if isinstance(resp.get(k), list):
                return resp[k]
        for v in resp.values():
            if isinstance(v, dict):
                ids = render_ids(v)
                if ids is not None:
                    return ids
    return None


def check_token_prompt(port: int, case: str, body: dict[str, Any], limits: tuple[int, int]) -> int:
    """Status of the real POST /v1/completions for a token-id prompt.

    /render does not check ids against the vocabulary; the real endpoint does (out-of-vocabulary
    ids are refused with 400 before reaching the engine). Ids the tiny model can embed are run for
    one token; ids in between (valid for the tokenizer, beyond the tiny model) are not sent,
    because they would crash the tiny engine, and count as accepted.
    """
    model_vocab, tok_vocab = limits
    ids = body["prompt"]
    top = max(ids, default=0)
    if model_vocab <= top < tok_vocab:
        return 200
    status, resp = http_post(port, COMPLETIONS, dict(body, max_tokens=1))
    if status == 200 and resp["usage"]["prompt_tokens"] != len(ids):
        raise RuntimeError(f"{case}: usage.prompt_tokens {resp['usage']['prompt_tokens']} != {len(ids)}")
    return status


def vocab_limits(model_dir: str, tok_dir: str) -> tuple[int, int]:
    """(ids the tiny model can embed, ids the tokenizer knows)."""
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
        model_vocab = json.load(f)["vocab_size"]
    with open(os.path.join(tok_dir, "tokenizer.json"), encoding="utf-8") as f:
        tj = json.load(f)
    ids = list(tj["model"]["vocab"].values()) + [t["id"] for t in tj.get("added_tokens", [])]
    return model_vocab, max(ids) + 1


def capture(port: int, case: str, endpoint: str, body: dict[str, Any], stats: dict[str, int],
            limits: tuple[int, int]) -> dict[str, Any]:
    """Ask vLLM for the prompt ids of one request and return its golden record.

    The ids come from ``<endpoint>/render``, which runs the exact body through the same code the
    real endpoint runs; ``/tokenize`` (given the equivalent tokenize body) must agree. A refusal by
    ``/render`` is recorded as ``"error": <status>`` because that is what the endpoint answers.
    """
    rec: dict[str, Any] = {"case": case, "endpoint": endpoint, "body": body}
    r_status, r_resp = http_post(port, endpoint + "/render", body)
    r_ids = render_ids(r_resp) if r_status == 200 else None
    if r_status == 200 and r_ids is None:
        raise RuntimeError(f"{case}: unrecognised /render answer: {str(r_resp)[:300]}")
    if endpoint == COMPLETIONS and isinstance(body["prompt"], list):
        # /tokenize takes only text: a token-id prompt is its own ids.
        tok_status, tok_ids = 200, list(body["prompt"])
    else:
        tok_status, t_resp = http_post(port, "/tokenize", tokenize_body(endpoint, body))
        tok_ids = t_resp["tokens"] if tok_status == 200 else None
    if r_status == 200 and endpoint == COMPLETIONS and isinstance(body["prompt"], list):
        r_status = check_token_prompt(port, case, body, limits)
        r_resp = f"POST {COMPLETIONS} answered {r_status}"
    if r_status != 200:
        rec["error"] = r_status
        stats["error"] += 1
        if tok_status == 200:
            stats["render_refused_tokenize_ok"] += 1
            print(f"  note {case}: refused ({r_status}), /tokenize 200: {str(r_resp)[:160]}", file=sys.stderr)
        return rec
    if tok_status != 200:
        stats["tokenize_refused_render_ok"] += 1
        print(f"  note {case}: /tokenize {tok_status}, /render 200", file=sys.stderr)
    elif tok_ids != r_ids:
        stats["mismatch"] += 1
        print(f"  MISMATCH {case}: /tokenize {len(tok_ids or [])} ids vs /render {len(r_ids)} ids", file=sys.stderr)
    else:
        stats["agree"] += 1
    rec["prompt_token_ids"] = r_ids
    stats["ok"] += 1
    return rec


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--tokenizers", default=os.path.join(
        os.environ.get("INFERRAIL_FIXTURES", os.path.join(repo, "target", "fixtures")), "tokenizers"),
        help="directory holding <family>/tokenizer.json (shards/fixtures/fetch.sh fills it)")
    ap.add_argument("--model", default="/tmp/vllmcpu/tiny-llama", help="tiny model from make_tiny_model.py")
    ap.add_argument("--vllm", default=os.path.join(os.path.dirname(sys.executable), "vllm"))
    ap.add_argument("--out", default=here)
    ap.add_argument("--port", type=int, default=18971)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-model-len", type=int, default=32768)
    ap.add_argument("--logs", default="/tmp/vllmcpu")
    ap.add_argument("--dry-run", action="store_true", help="only print the request counts")
    ap.add_argument("--external", action="store_true",
                    help="use a vLLM already serving the (single) family on --port instead of starting one")
    args = ap.parse_args()

    summary = {}
    for family in [f for f in args.families.split(",") if f]:
        if family not in FAMILIES:
            print(f"unknown family {family}", file=sys.stderr)
            return 2
        reqs = build_requests(family, args.seed)
        if args.dry_run:
            print(family, len(reqs))
            continue
        tok_dir = os.path.join(args.tokenizers, family)
        if not os.path.isfile(os.path.join(tok_dir, "tokenizer.json")):
            print(f"{tok_dir}/tokenizer.json missing: run shards/fixtures/fetch.sh first", file=sys.stderr)
            return 2
        limits = vocab_limits(args.model, tok_dir)
        log_path = os.path.join(args.logs, f"goldens-{family}.log")
        print(f"[{family}] starting vllm (log {log_path})", flush=True)
        if not args.external:
            print("  " + " ".join(Server.command(args.vllm, args.model, tok_dir, FAMILIES[family]["tool_parser"],
                                                 args.port, args.max_model_len)), flush=True)
        server = None if args.external else \
            Server(args.vllm, args.model, tok_dir, FAMILIES[family]["tool_parser"], args.port, log_path,
                   args.max_model_len)
        stats = {k: 0 for k in ("ok", "error", "agree", "mismatch", "render_refused_tokenize_ok",
                                "tokenize_refused_render_ok")}
        try:
            if server is not None:
                server.wait_ready()
            print(f"[{family}] ready; {len(reqs)} requests", flush=True)
            os.makedirs(args.out, exist_ok=True)
            tmp = os.path.join(args.out, f".{family}.jsonl.tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                for case, endpoint, body in reqs:
                    rec = capture(args.port, case, endpoint, body, stats, limits)
                    f.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
            os.replace(tmp, os.path.join(args.out, f"{family}.jsonl"))
        finally:
            if server is not None:
                server.stop()
        summary[family] = stats
        print(f"[{family}] {stats}", flush=True)
    if summary:
        print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
