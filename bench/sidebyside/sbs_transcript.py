#!/usr/bin/env python3
"""Deterministic synthetic agent transcripts for context-compression benchmarks.

Pure standard library, no third-party imports, no network.  The same
``(n_messages, total_chars, seed)`` triple always yields byte-identical output
on any CPython 3.8+ (no use of ``hash()``; every random stream is derived from
``random.Random`` seeded with integers).

Output format: a list of OpenAI chat-completions style message dicts::

    {"role": "system",    "content": str}
    {"role": "user",      "content": str}
    {"role": "assistant", "content": str, "tool_calls": [
        {"id": str, "type": "function",
         "function": {"name": str, "arguments": <JSON string>}}, ...]}
    {"role": "tool",      "tool_call_id": str, "content": str}
    {"role": "assistant", "content": str}            # final answer of a turn

Shape of the conversation:

* message 0 is a system prompt (``system_chars`` long, not scaled);
* then "turns": a user message, zero or more tool-calling steps (an assistant
  message carrying 1-3 parallel tool calls followed by one tool result per
  call), and a final assistant answer;
* the transcript always ends with a fresh user message (the situation in which
  an agent runs its preflight compression check);
* tool call / tool result pairing is always valid (no orphans);
* sizes are log-normally distributed per message kind and then scaled so that
  ``content`` + tool-call ``arguments`` characters add up to roughly
  ``total_chars`` (within a few percent);
* realism hooks that exercise compressors: repeated reads of the same file
  with identical output (dedup), repeated identical terminal commands, large
  ``write_file``/``patch`` arguments (argument truncation), very large tool
  outputs (head/tail truncation), ``exit_code`` / ``total_count`` fields that
  summarisers parse, and a few obviously fake secrets (``sk-FAKE…``,
  ``ghp_FAKE…``) that redaction passes should catch.

Command line::

    python sbs_transcript.py --messages 2000 --chars 800000 --seed 7 --stats
    python sbs_transcript.py --messages 2000 --out t.jsonl      # JSON Lines

The content generators (prose, code, logs, tool arguments and results) are in
sbs_content.py; this module builds the conversation's skeleton and sizes it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from sbs_content import (  # noqa: E402
    MIN_SCALED,
    TOOL_NAMES,
    fake_secret,
    ident,
    lognormal,
    new_call,
    prose,
    rand_path,
    render_args,
    render_result,
)

__all__ = [
    "generate_transcript",
    "transcript_stats",
    "tool_schemas",
    "DEFAULT_SEED",
]

DEFAULT_SEED = 20240601
DEFAULT_CHARS_PER_MESSAGE = 400  # 2,000 messages -> ~800K characters

def _skeleton(n_messages: int, rng: random.Random) -> list[dict[str, Any]]:
    path_pool = sorted({rand_path(rng) for _ in range(160)})
    reads: dict[str, int] = {}
    commands: dict[str, int] = {}
    counter = [0]
    target = n_messages - 1  # the final user message is appended at the end
    items: list[dict[str, Any]] = [{"kind": "system"}]
    calls_by_id: dict[int, dict[str, Any]] = {}

    def user_item() -> dict[str, Any]:
        return {"kind": "user", "size": lognormal(rng, 180, 0.9, 15, 6000)}

    def final_item() -> dict[str, Any]:
        return {"kind": "final", "size": lognormal(rng, 350, 0.8, 15, 12000)}

    def step(k: int) -> list[dict[str, Any]]:
        calls = [new_call(rng, path_pool, reads, commands, counter) for _ in range(k)]
        for c in calls:
            calls_by_id[c["num"]] = c
        text = 0.0 if rng.random() < 0.55 else lognormal(rng, 100, 0.6, 10, 1500)
        out = [{"kind": "call", "size": text, "calls": calls}]
        out += [{"kind": "result", "call": c} for c in calls]
        return out

    def random_block() -> list[dict[str, Any]]:
        block = [user_item()]
        if rng.random() >= 0.15:
            steps = 1
            while rng.random() < 0.85 and steps < 30:
                steps += 1
            for _ in range(steps):
                r = rng.random()
                k = 1 if r < 0.80 else (2 if r < 0.92 else 3)
                block += step(k)
        block.append(final_item())
        return block

    def exact_block(r: int) -> list[dict[str, Any]]:
        """A block of exactly ``r`` messages (r >= 2)."""
        if r == 2:
            return [user_item(), final_item()]
        if r == 3:  # interrupted turn: no final answer
            return [user_item()] + step(1)
        m = r - 2
        ks: list[int] = []
        while m >= 2:
            ks.append(1)
            m -= 2
        if m == 1:
            ks[-1] += 1
        block = [user_item()]
        for k in ks:
            block += step(k)
        block.append(final_item())
        return block

    while len(items) < target:
        block = random_block()
        if len(items) + len(block) <= target:
            items += block
            continue
        r = target - len(items)
        if r >= 2:
            items += exact_block(r)
        elif r == 1:
            # Add one more parallel call to the last tool-calling step.
            j = max((i for i, it in enumerate(items) if it["kind"] == "call"), default=-1)
            if j < 0:
                items.append(final_item())
            else:
                extra = new_call(rng, path_pool, reads, commands, counter)
                calls_by_id[extra["num"]] = extra
                items[j]["calls"].append(extra)
                k = j + 1
                while k < len(items) and items[k]["kind"] == "result":
                    k += 1
                items.insert(k, {"kind": "result", "call": extra})
        break
    items.append(user_item())
    # Attach the referenced call objects for repeated results.
    for it in items:
        if it["kind"] == "result" and it["call"]["ref"] is not None:
            it["call"]["ref_call"] = calls_by_id.get(it["call"]["ref"])
    return items


def _total_chars(messages: list[dict[str, Any]]) -> int:
    total = 0
    for m in messages:
        total += len(m.get("content") or "")
        for tc in m.get("tool_calls") or []:
            total += len(tc["function"]["arguments"])
    return total


def _render(items: list[dict[str, Any]], bulk_factor: float, chat_factor: float,
            seed: int, system_chars: int, id_prefix: str) -> list[dict[str, Any]]:
    """Render the skeleton.  ``bulk_factor`` scales tool results and tool-call
    arguments; ``chat_factor`` scales user / assistant prose."""
    def scaled(x: float) -> int:
        return 0 if x <= 0 else max(MIN_SCALED, int(round(x * bulk_factor)))

    def chat(x: float) -> int:
        return 0 if x <= 0 else max(MIN_SCALED, int(round(x * chat_factor)))

    messages: list[dict[str, Any]] = []
    rendered_results: dict[str, str] = {}
    for idx, it in enumerate(items):
        irng = random.Random(seed * 1_000_003 + idx * 7919 + 17)
        k = it["kind"]
        if k == "system":
            messages.append({
                "role": "system",
                "content": ("You are a helpful autonomous coding agent. "
                            + prose(irng, max(0, system_chars - 43))),
            })
        elif k == "user":
            text = prose(irng, chat(it["size"]))
            if irng.random() < 0.01:
                text += f" (my token is {fake_secret(irng, 'ghp_FAKE')})"
            messages.append({"role": "user", "content": text})
        elif k == "final":
            messages.append({"role": "assistant", "content": prose(irng, chat(it["size"]))})
        elif k == "call":
            tcs = []
            for c in it["calls"]:
                saved = c["args_size"]
                c["args_size"] = scaled(saved)
                crng = random.Random(seed * 1_000_003 + c["num"] * 104729 + 3)
                args = render_args(c, crng)
                c["args_size"] = saved
                tcs.append({"id": f"{id_prefix}{c['num']:06d}", "type": "function",
                            "function": {"name": c["name"], "arguments": args}})
            messages.append({"role": "assistant", "content": prose(irng, chat(it["size"])),
                             "tool_calls": tcs})
        else:  # result
            c = it["call"]
            ref = c.get("ref_call")
            if ref is not None and ref["call_id"] in rendered_results:
                content = rendered_results[ref["call_id"]]
            else:
                crng = random.Random(seed * 1_000_003 + c["num"] * 130363 + 5)
                content = render_result(c, scaled(c["result_size"]), crng)
            rendered_results[c["call_id"]] = content
            messages.append({"role": "tool", "tool_call_id": f"{id_prefix}{c['num']:06d}",
                             "content": content})
    return messages


def generate_transcript(
    n_messages: int = 2000,
    total_chars: int | None = None,
    seed: int = DEFAULT_SEED,
    system_chars: int = 12_000,
    call_id_prefix: str = "call_",
) -> list[dict[str, Any]]:
    """Return ``n_messages`` messages (system first, a user message last).

    ``total_chars`` is the target for ``content`` + tool-call ``arguments``
    characters over the whole transcript (system prompt included); it defaults
    to ``400 * n_messages``.  The result is deterministic for a given
    ``(n_messages, total_chars, seed, system_chars, call_id_prefix)``.
    Use distinct ``call_id_prefix`` values when concatenating transcripts so
    tool-call ids stay unique.
    """
    if n_messages < 4:
        raise ValueError("n_messages must be >= 4")
    if total_chars is None:
        total_chars = DEFAULT_CHARS_PER_MESSAGE * n_messages
    rng = random.Random(seed)
    items = _skeleton(n_messages, rng)

    # Sizing: user / assistant prose keeps its natural size; tool results and
    # tool-call arguments (the bulk of real agent transcripts) are scaled so
    # the total hits the target.  If the prose alone would take more than 70%
    # of the budget, everything is scaled uniformly instead.
    chat_raw = 0.0
    bulk_raw = 0.0
    for it in items:
        k = it["kind"]
        if k in ("user", "final", "call"):
            chat_raw += it["size"]
        if k == "call":
            bulk_raw += sum(c["args_size"] for c in it["calls"])
        if k == "result":
            src_call = it["call"].get("ref_call") or it["call"]
            bulk_raw += src_call["result_size"]
    budget = max(1.0, float(total_chars - system_chars))
    if budget - chat_raw >= 0.3 * budget and bulk_raw > 0:
        chat_factor = 1.0
        bulk_factor = (budget - chat_raw) / bulk_raw
        uniform = False
    else:
        chat_factor = bulk_factor = budget / max(1.0, chat_raw + bulk_raw)
        uniform = True
    # Rendering adds fixed overhead (JSON keys, line numbers, minimum sizes),
    # so re-render with a corrected factor until the total is within ~1%.
    messages = _render(items, bulk_factor, chat_factor, seed, system_chars, call_id_prefix)
    for _ in range(5):
        actual = _total_chars(messages) - system_chars
        if actual <= 0 or abs(actual - budget) <= 0.01 * budget:
            break
        if uniform:
            chat_factor *= budget / actual
            bulk_factor = chat_factor
        else:
            chat_part = sum(len(m.get("content") or "") for m in messages[1:]
                            if m["role"] in ("user", "assistant"))
            bulk_part = actual - chat_part
            if bulk_part > 0 and budget - chat_part > 0:
                bulk_factor *= (budget - chat_part) / bulk_part
            else:
                bulk_factor *= budget / actual
        messages = _render(items, bulk_factor, chat_factor, seed, system_chars, call_id_prefix)
    assert len(messages) == n_messages, (len(messages), n_messages)
    return messages


def transcript_stats(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts and character totals for a transcript."""
    by_role: dict[str, int] = {}
    content_chars = 0
    args_chars = 0
    n_calls = 0
    tool_sizes: list[int] = []
    for m in messages:
        by_role[m["role"]] = by_role.get(m["role"], 0) + 1
        c = m.get("content") or ""
        content_chars += len(c) if isinstance(c, str) else len(json.dumps(c))
        for tc in m.get("tool_calls") or []:
            n_calls += 1
            args_chars += len(tc["function"]["arguments"])
        if m["role"] == "tool":
            tool_sizes.append(len(c))
    tool_sizes.sort()

    def pct(p: float) -> int:
        return tool_sizes[min(len(tool_sizes) - 1, int(p * len(tool_sizes)))] if tool_sizes else 0

    return {
        "messages": len(messages),
        "by_role": by_role,
        "tool_calls": n_calls,
        "content_chars": content_chars,
        "arguments_chars": args_chars,
        "total_chars": content_chars + args_chars,
        "json_bytes": len(json.dumps(messages, ensure_ascii=False)),
        "tool_result_chars_p50": pct(0.50),
        "tool_result_chars_p90": pct(0.90),
        "tool_result_chars_max": tool_sizes[-1] if tool_sizes else 0,
    }


def tool_schemas(count: int = 40, seed: int = DEFAULT_SEED) -> list[dict[str, Any]]:
    """Deterministic synthetic OpenAI tool schemas (for request-size estimates)."""
    rng = random.Random(seed ^ 0x5EED)
    names = list(TOOL_NAMES)
    i = 0
    while len(names) < count:
        i += 1
        names.append(f"mcp_extra_tool_{i:02d}")
    out = []
    for name in names[:count]:
        props = {}
        for _ in range(rng.randrange(1, 7)):
            props[f"{ident(rng)}"] = {"type": ("string", "integer", "boolean")[rng.randrange(3)],
                                       "description": prose(rng, rng.randrange(40, 220))}
        out.append({"type": "function", "function": {
            "name": name,
            "description": prose(rng, rng.randrange(300, 1500)),
            "parameters": {"type": "object", "properties": props,
                           "required": sorted(props)[:1]},
        }})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=2000)
    p.add_argument("--chars", type=int, default=None,
                   help="target content+arguments chars (default 400 per message)")
    p.add_argument("--seed", type=int, default=DEFAULT_SEED)
    p.add_argument("--system-chars", type=int, default=12_000)
    p.add_argument("--out", default=None, help="write JSON Lines here ('-' = stdout)")
    p.add_argument("--stats", action="store_true", help="print stats as JSON")
    a = p.parse_args(argv)
    msgs = generate_transcript(a.messages, a.chars, a.seed, a.system_chars)
    if a.out:
        fh = sys.stdout if a.out == "-" else open(a.out, "w", encoding="utf-8")
        try:
            for m in msgs:
                fh.write(json.dumps(m, ensure_ascii=False) + "\n")
        finally:
            if fh is not sys.stdout:
                fh.close()
    if a.stats or not a.out:
        print(json.dumps(transcript_stats(msgs), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
