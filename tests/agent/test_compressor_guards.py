"""Guards: anti-thrashing, the compacted-N-times warning, and guard state across restarts."""

from __future__ import annotations

import json
from typing import Any

from agent.compression.prompts import OLDER_PREFIXES, SUMMARY_PREFIX
from agent.errors import RateLimitedError
from agent.usage import CanonicalUsage
from tests.harness.transcripts import (
    ScriptedProvider,
    assert_valid,
    assistant,
    chat,
    make_engine,
    user,
)

Message = dict[str, Any]


def turns(n: int, tag: str, size: int = 1_000) -> list[Message]:
    return [m for i in range(n)
            for m in (user(f"{tag}{i} " + "u" * size), assistant(f"ok {tag}{i} " + "a" * size))]


# A 40K-token system prompt (instructions, tool docs) dwarfs what compaction can remove, so
# every compaction here saves well under 10% of the request.
HEAVY_SYSTEM = {"role": "system", "content": "s" * 160_000}


def thrashing_engine(provider: ScriptedProvider) -> Any:
    return make_engine(64_000, provider, protect_last_n=0)


async def test_two_ineffective_compactions_pause_automatic_compaction() -> None:
    provider = ScriptedProvider()
    engine = thrashing_engine(provider)
    out = await engine.compress([HEAVY_SYSTEM, *turns(30, "a")])
    first = engine.last_report
    assert first is not None and first.outcome == "compressed"
    assert 0 < first.tokens_before - first.tokens_after < 0.1 * first.tokens_before
    assert not engine.get_status().auto_compression_paused
    assert not [n for n in first.notices if "/compress <topic>" in n]

    msgs = [*out, *turns(8, "b")]
    out = await engine.compress(msgs)
    second = engine.last_report
    assert second is not None and second.outcome == "compressed"
    assert second.tokens_before - second.tokens_after < 0.1 * second.tokens_before
    paused = [n for n in second.notices if "/new" in n and "/compress <topic>" in n]
    assert len(paused) == 1
    assert engine.get_status().auto_compression_paused
    assert not engine.should_compress(60_000)
    assert not engine.should_compress_preflight(msgs)

    # Automatic compaction is now skipped without calling the model, and says nothing new.
    calls = len(provider.requests)
    msgs = [*out, *turns(8, "c")]
    assert await engine.compress(msgs) == msgs
    assert engine.last_report is not None and engine.last_report.outcome == "skipped"
    assert engine.last_report.notices == () and len(provider.requests) == calls

    # A request that no longer fits is compacted anyway.
    assert engine.should_compress_preflight([*msgs, user("x" * 900_000)])

    # A manual compaction lifts the pause.
    out = await engine.compress(msgs, force=True)
    assert engine.last_report.outcome == "compressed"
    assert not engine.get_status().auto_compression_paused
    assert_valid(out)


async def test_an_effective_compaction_clears_the_strike_and_reset_lifts_a_pause() -> None:
    engine = thrashing_engine(ScriptedProvider())
    out = await engine.compress([HEAVY_SYSTEM, *turns(30, "a")])  # ineffective: strike one
    out = await engine.compress([*out, *turns(60, "big", size=3_000)])
    report = engine.last_report
    assert report is not None and report.tokens_after < 0.7 * report.tokens_before
    out = await engine.compress([*out, *turns(8, "b")])
    assert not engine.get_status().auto_compression_paused  # strikes were not consecutive
    await engine.compress([*out, *turns(8, "c")])
    assert engine.get_status().auto_compression_paused
    engine.on_session_reset()
    assert not engine.get_status().auto_compression_paused
    assert engine.compression_count == 0 and engine.previous_summary is None


async def test_from_the_second_compaction_on_each_one_warns_about_accuracy() -> None:
    engine = make_engine(8_000, ScriptedProvider(), max_output_tokens=256)
    msgs = chat(10, size=300)
    warnings: list[list[str]] = []
    for round_no in range(3):
        msgs = await engine.compress(msgs)
        report = engine.last_report
        assert report is not None and report.outcome == "compressed"
        warnings.append([n for n in report.notices if "accuracy may degrade" in n])
        msgs = [*msgs, *chat(8, size=300, system=None, tag=f"R{round_no}")]
    assert warnings[0] == []
    assert len(warnings[1]) == 1 and "2 times" in warnings[1][0] and "/new" in warnings[1][0]
    assert len(warnings[2]) == 1 and "3 times" in warnings[2][0]


async def test_guard_state_survives_a_restart_through_json() -> None:
    now = [5_000.0]
    provider = ScriptedProvider(errors=[RateLimitedError("slow down", status=429)])
    engine = make_engine(8_000, provider, max_output_tokens=256, clock=lambda: now[0])
    msgs = chat(10, size=300)
    await engine.compress(msgs)  # fails: cooldown starts
    out = await engine.compress(msgs, force=True)
    await engine.compress([*out, *chat(8, size=300, system=None, tag="N")], force=True)
    engine.calibrate(10_000, 13_000)
    engine.update_from_response(CanonicalUsage(input_tokens=4_321))
    provider.errors.append(RateLimitedError("again", status=429))
    await engine.compress([*out, *chat(8, size=300, system=None, tag="M")])
    state = json.loads(json.dumps(engine.export_state()))

    restored = make_engine(8_000, ScriptedProvider(), max_output_tokens=256,
                           clock=lambda: now[0])
    restored.restore_state(state)
    assert restored.compression_count == engine.compression_count == 2
    assert restored.last_prompt_tokens == 4_321
    assert restored.previous_summary == engine.previous_summary
    assert restored.get_status() == engine.get_status()
    assert restored.get_status().cooldown_until == now[0] + 60
    assert restored.calibration.ratio == engine.calibration.ratio == 1.3
    assert restored.export_state() == state
    assert not restored.should_compress(7_000)  # still cooling down after the restart


def test_a_stored_summary_with_an_older_prefix_is_upgraded_on_restore() -> None:
    engine = make_engine()
    engine.restore_state({"compression_count": 1,
                          "previous_summary": f"{OLDER_PREFIXES[0]} ## Goal\nship it"})
    assert engine.previous_summary == f"{SUMMARY_PREFIX}\n## Goal\nship it"
