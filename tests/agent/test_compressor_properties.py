"""Property tests: whatever the transcript, a compaction is valid and loses nothing it must keep.

Generated transcripts mix parallel tool calls, tool groups that land on every boundary,
transcripts with and without a system prompt, and list/multimodal content. Each result is
checked against the OpenAI and the Anthropic message rules.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.compression.compressor import ContextCompressor
from agent.compression.cut import head_size
from agent.compression.markers import split_summary
from agent.compression.prompts import MERGE_BEGIN, SUMMARY_PREFIX, SYSTEM_NOTE
from tests.harness.transcripts import (
    ScriptedProvider,
    all_text,
    anthropic_problems,
    make_engine,
    openai_problems,
    text_of,
)

Message = dict[str, Any]
SIZES = (0, 8, 60, 400, 1_500, 6_000)
PROPERTY_SETTINGS = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])


@st.composite
def contents(draw: st.DrawFn, tag: str) -> Any:
    """A string, or a list of text blocks with an optional image."""
    text = f"{tag} " + "w" * draw(st.sampled_from(SIZES))
    if not draw(st.booleans()):
        return text
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if draw(st.booleans()):
        blocks.append({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}})
    return blocks


@st.composite
def transcripts(draw: st.DrawFn, min_turns: int = 2, max_turns: int = 10,
                system: bool | None = None, prefix: str = "") -> list[Message]:
    ids = itertools.count()
    with_system = draw(st.booleans()) if system is None else system
    msgs: list[Message] = [{"role": "system", "content": "Be brief."}] if with_system else []
    earlier_results: list[str] = []
    for turn in range(draw(st.integers(min_turns, max_turns))):
        msgs.append({"role": "user", "content": draw(contents(f"{prefix}u{turn}"))})
        for step in range(draw(st.integers(0, 3))):
            calls = []
            for k in range(draw(st.integers(1, 3))):  # parallel calls
                long_arg = "p" * draw(st.sampled_from((10, 700)))
                calls.append({"id": f"{prefix}c{next(ids)}", "type": "function", "function": {
                    "name": "tool", "arguments": f'{{"path": "/f{turn}_{step}_{k}", '
                                                 f'"body": "{long_arg}"}}'}})
            note = draw(st.sampled_from((None, "", f"{prefix}thinking {turn}")))
            msgs.append({"role": "assistant", "content": note, "tool_calls": calls})
            for c in calls:
                if earlier_results and draw(st.integers(0, 4)) == 0:
                    body = draw(st.sampled_from(earlier_results))  # a repeated output
                else:
                    body = f"{prefix}r{c['id']} " + "o" * draw(st.sampled_from(SIZES))
                    earlier_results.append(body)
                msgs.append({"role": "tool", "tool_call_id": c["id"], "content": body})
        if draw(st.integers(0, 5)):  # usually the turn ends with a text answer
            msgs.append({"role": "assistant", "content": draw(contents(f"{prefix}a{turn}"))})
    return msgs


engines = st.builds(
    lambda window, keep: make_engine(
        context_length=window, max_output_tokens=256, protect_last_n=keep,
        summary_provider=ScriptedProvider(context_length=4_096)),
    st.sampled_from((2_000, 4_000, 8_000, 30_000)), st.sampled_from((0, 2, 6, 20)))


def _last_user(msgs: list[Message]) -> int:
    return max((i for i, m in enumerate(msgs) if m["role"] == "user"), default=-1)


def _same_turn(kept: Message, original: Message) -> bool:
    if kept == original:
        return True
    summary, rest = split_summary(kept)
    return summary is not None and rest == original["content"] and kept["role"] == original["role"]


def check_compaction(engine: ContextCompressor, before: list[Message], out: list[Message],
                     compacted_before: bool) -> None:
    assert openai_problems(out) == []
    assert anthropic_problems(out) == []
    assert all_text(out).count(SYSTEM_NOTE) == (1 if engine.compression_count else 0)
    report = engine.last_report
    assert report is not None
    if not report.changed:
        assert out == before
        return
    head_end = head_size(before, engine.protect_first_n, compacted_before)
    has_system = bool(before) and before[0]["role"] == "system"
    # The head is kept: the system prompt (plus the note) and, first time, the first exchange.
    if has_system:
        assert out[0]["role"] == "system"
        assert text_of(out[0]["content"]).startswith(text_of(before[0]["content"]))
    assert out[int(has_system):head_end] == before[int(has_system):head_end]
    # Exactly one summary, right after the head, carrying the prefix.
    summaries = [i for i, m in enumerate(out) if SUMMARY_PREFIX in text_of(m.get("content"))]
    assert summaries == [head_end]
    text = text_of(out[head_end]["content"])
    assert text.startswith(SUMMARY_PREFIX) or text.startswith(f"{MERGE_BEGIN}\n{SUMMARY_PREFIX}")
    # The newest user message and everything after it (its reply) stay verbatim at the end.
    last = _last_user(before)
    if last >= head_end:
        latest = before[last:]
        kept = out[len(out) - len(latest):]
        assert len(out) - len(latest) >= head_end
        assert _same_turn(kept[0], latest[0])
        assert kept[1:] == latest[1:]


async def _compress(engine: ContextCompressor, msgs: list[Message]) -> list[Message]:
    frozen = copy.deepcopy(msgs)
    out = await engine.compress(msgs, force=True)
    assert msgs == frozen  # the input is never mutated
    return out


@settings(PROPERTY_SETTINGS, max_examples=650)
@given(engine=engines, msgs=transcripts())
def test_one_compaction_is_valid_and_keeps_head_and_latest_turn(
        engine: ContextCompressor, msgs: list[Message]) -> None:
    out = asyncio.run(_compress(engine, msgs))
    check_compaction(engine, msgs, out, compacted_before=False)


@settings(PROPERTY_SETTINGS, max_examples=380)
@given(engine=engines, first=transcripts(min_turns=3),
       more=st.lists(st.integers(1, 4), min_size=2, max_size=3), data=st.data())
def test_repeated_compactions_keep_one_note_and_one_summary(
        engine: ContextCompressor, first: list[Message], more: list[int],
        data: st.DataObject) -> None:
    has_system = bool(first) and first[0]["role"] == "system"
    msgs = first
    for round_no, turns in enumerate(more):
        compacted_before = engine.compression_count > 0
        out = asyncio.run(_compress(engine, msgs))
        check_compaction(engine, msgs, out, compacted_before)
        extra = data.draw(transcripts(min_turns=turns, max_turns=turns, system=False,
                                      prefix=f"x{round_no}"))
        msgs = out + extra
    if engine.compression_count:
        assert all_text(msgs).count(SYSTEM_NOTE) == 1
        assert (msgs[0]["role"] == "system") == has_system
