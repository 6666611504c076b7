#!/usr/bin/env python3
"""How far a plain `transformers` pipeline gets on the vLLM goldens (a diagnostic, not a test).

For every golden with ids, this renders the request with `apply_chat_template` directly on the
client's messages (no vLLM message preparation) and encodes the text. Completions are encoded as
`tokenizer(prompt)`. It prints, per family and case kind, how many goldens the plain pipeline
reproduces. The ones it misses show what vLLM's preparation changes: content parts, tool-call
arguments, null contents. A Rust tokenizer must reproduce those too.

    python check_transformers.py [--tokenizers DIR] [family ...]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from typing import Any


def naive_ids(tok: Any, endpoint: str, body: dict[str, Any]) -> list[int]:
    if endpoint == "/v1/completions":
        p = body["prompt"]
        if isinstance(p, list):
            return list(p)
        return tok(p, add_special_tokens=body.get("add_special_tokens", True))["input_ids"]
    kwargs = dict(body.get("chat_template_kwargs") or {})
    text = tok.apply_chat_template(
        body["messages"], tools=body.get("tools"), documents=body.get("documents"),
        add_generation_prompt=body.get("add_generation_prompt", True),
        continue_final_message=body.get("continue_final_message", False), tokenize=False, **kwargs)
    return tok(text, add_special_tokens=body.get("add_special_tokens", False))["input_ids"]


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(here))
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tokenizers", default=os.path.join(
        os.environ.get("INFERRAIL_FIXTURES", os.path.join(repo, "target", "fixtures")), "tokenizers"))
    ap.add_argument("families", nargs="*")
    args = ap.parse_args()
    from transformers import AutoTokenizer  # imported late: --help works without it

    families = args.families or sorted(f[:-6] for f in os.listdir(here) if f.endswith(".jsonl"))
    for fam in families:
        tok = AutoTokenizer.from_pretrained(os.path.join(args.tokenizers, fam))
        per_kind: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0])
        with open(os.path.join(here, f"{fam}.jsonl"), encoding="utf-8") as f:
            for line in f:
                rec = json.loads(line)
                if "prompt_token_ids" not in rec:
                    continue
                kind = rec["case"].split("/")[2]
                try:
                    ok = naive_ids(tok, rec["endpoint"], rec["body"]) == rec["prompt_token_ids"]
                except Exception:  # a template error is a miss like any other
                    ok = False
                per_kind[kind][0] += ok
                per_kind[kind][1] += 1
        hit = sum(v[0] for v in per_kind.values())
        total = sum(v[1] for v in per_kind.values())
        print(f"{fam}: plain transformers reproduces {hit}/{total}")
        for kind, (h, n) in sorted(per_kind.items()):
            if h != n:
                print(f"  {kind}: {h}/{n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
