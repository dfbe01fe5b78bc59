"""When the summary model fails, nothing is lost (docs/architecture.md, "When the summary fails", "Secrets").

Each failure comes from the fake OpenAI server through the real SDK: auth errors abort,
transient ones start a cooldown and either skip (the request still fits) or fall back to
the deterministic extract (it does not).
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable
from typing import Any

import pytest

from agent.compression.compressor import ContextCompressor
from agent.compression.prompts import SUMMARY_PREFIX
from agent.context_engine import CompressionReport
from agent.providers.openai_compat import OpenAICompatProvider
from agent.usage import CanonicalUsage
from tests.harness import FakeOpenAI
from tests.harness.transcripts import CHECKPOINT, assert_valid, chat, make_engine, text_of

Message = dict[str, Any]
Make = Callable[..., OpenAICompatProvider]
KEY = "sk-" + "LeakedKeyInAnErrorMessage0123456789abcdef"
DOES_NOT_FIT = 50_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def provider(autoclose: Callable[[Any], Any]) -> Make:
    def make(fake: FakeOpenAI, **overrides: Any) -> OpenAICompatProvider:
        return autoclose(OpenAICompatProvider(fake.provider_settings(**overrides)))

    return make


@pytest.fixture
def clock() -> Clock:
    return Clock()


def engine_on(summary: OpenAICompatProvider, clock: Clock, **kw: Any) -> ContextCompressor:
    return make_engine(8_000, summary, max_output_tokens=256, clock=clock, **kw)


def transcript() -> list[Message]:
    return chat(12, size=300)


async def compress(engine: ContextCompressor, msgs: list[Message], **kw: Any
                   ) -> tuple[list[Message], CompressionReport]:
    """Compress and check the invariants every outcome shares: input untouched, output valid."""
    frozen = copy.deepcopy(msgs)
    out = await engine.compress(msgs, **kw)
    assert msgs == frozen
    assert_valid(out)
    report = engine.last_report
    assert report is not None
    if not report.changed:
        assert out == msgs  # skipped or aborted: the transcript is exactly what it was
    else:  # the newest turn survives verbatim behind the summary
        assert out[-4:] == msgs[-4:] and out[0]["content"].startswith(msgs[0]["content"])
    return out, report


def chat_calls(fake: FakeOpenAI) -> int:
    return len(fake.calls_to("/chat/completions"))


async def test_auth_error_aborts_changes_nothing_and_says_so(
        fake_openai: FakeOpenAI, provider: Make, clock: Clock,
        caplog: pytest.LogCaptureFixture) -> None:
    fake_openai.fail_next(401, {"error": {"message": f"Incorrect API key provided: {KEY}",
                                          "type": "invalid_request_error",
                                          "code": "invalid_api_key"}})
    engine = engine_on(provider(fake_openai), clock)
    with caplog.at_level(logging.WARNING, logger="agent.compression.compressor"):
        _, report = await compress(engine, transcript(), current_tokens=DOES_NOT_FIT)
    assert report.outcome == "aborted"
    assert report.error and KEY not in report.error
    assert any("credentials" in n and "API key" in n for n in report.notices)
    assert all(KEY not in n for n in report.notices)
    assert engine.compression_count == 0
    assert "aborted" in caplog.text and KEY not in caplog.text
    assert engine.get_status().cooldown_until is None  # not transient: no cooldown
    assert engine.should_compress(7_000)


async def test_rate_limit_skips_while_it_fits_and_cools_down(
        fake_openai: FakeOpenAI, provider: Make, clock: Clock) -> None:
    fake_openai.fail_next(429)
    engine = engine_on(provider(fake_openai), clock)
    msgs = transcript()
    _, report = await compress(engine, msgs)
    assert report.outcome == "skipped" and report.error
    assert any("skipped" in n and "1 min" in n for n in report.notices)
    assert engine.get_status().cooldown_until == clock.now + 60
    assert not engine.should_compress(7_000)
    # Automatic compaction during the cooldown does not call the model at all.
    _, again = await compress(engine, msgs)
    assert again.outcome == "skipped" and chat_calls(fake_openai) == 1
    clock.now += 61
    assert engine.should_compress(7_000)


async def test_server_error_when_it_no_longer_fits_uses_the_extract(
        fake_openai: FakeOpenAI, provider: Make, clock: Clock) -> None:
    fake_openai.fail_next(500)
    engine = engine_on(provider(fake_openai), clock)
    msgs = transcript()
    out, report = await compress(engine, msgs, current_tokens=DOES_NOT_FIT)
    assert report.outcome == "fallback_used"
    assert any("without it" in n for n in report.notices)
    assert report.tokens_after < report.tokens_before and engine.compression_count == 1
    summary = next(text_of(m["content"]) for m in out if SUMMARY_PREFIX in text_of(m["content"]))
    assert len(summary) <= 8_000 + 200  # the extract, plus the merge markers at most
    assert "Condensed without the summary model" in summary
    compacted = [m for m in msgs if not any(m is o for o in out)]
    newest_ask = [m for m in compacted if m["role"] == "user"][-1]["content"]
    assert f"## Active Task\n{newest_ask}" in summary
    assert "/src/t" in summary  # paths of the compacted tool calls
    assert engine.get_status().cooldown_until == clock.now + 60


async def test_timeout_when_it_no_longer_fits_uses_the_extract(
        fake_openai: FakeOpenAI, provider: Make, clock: Clock) -> None:
    fake_openai.delay_next(5.0)
    engine = engine_on(provider(fake_openai, timeout_s=0.2), clock)
    _, report = await compress(engine, transcript(), current_tokens=DOES_NOT_FIT)
    assert report.outcome == "fallback_used"
    assert report.error and "0.2" in report.error
    assert engine.get_status().cooldown_until == clock.now + 60


@pytest.mark.parametrize("reply", ["", "Sure, here is the summary."])
async def test_empty_or_near_empty_reply_skips_with_a_cooldown(
        fake_openai: FakeOpenAI, provider: Make, clock: Clock, reply: str) -> None:
    fake_openai.queue_reply(reply)
    engine = engine_on(provider(fake_openai), clock)
    _, report = await compress(engine, transcript())
    assert report.outcome == "skipped"
    assert engine.get_status().cooldown_until == clock.now + 60
    assert engine.compression_count == 0


async def test_reply_without_sections_is_kept_under_the_grounded_task(
        fake_openai: FakeOpenAI, provider: Make, clock: Clock) -> None:
    prose = "We went through the parser, fixed the two failing tests and pushed the branch. " * 2
    fake_openai.queue_reply(prose)
    engine = engine_on(provider(fake_openai), clock)
    msgs = transcript()
    out, report = await compress(engine, msgs)
    assert report.outcome == "compressed"
    summary = next(text_of(m["content"]) for m in out if SUMMARY_PREFIX in text_of(m["content"]))
    body = summary.split("\n", 1)[1]
    assert body.startswith("## Active Task\n")
    assert prose.strip() in body


async def test_cooldowns_grow_then_reset_after_a_success(
        fake_openai: FakeOpenAI, provider: Make, clock: Clock) -> None:
    engine = engine_on(provider(fake_openai), clock)
    fake_openai.responder = lambda req: CHECKPOINT
    msgs = transcript()
    for expected in (60, 300, 900, 900):
        fake_openai.fail_next(503)
        _, report = await compress(engine, msgs)
        assert report.outcome == "skipped"
        assert engine.get_status().cooldown_until == clock.now + expected
        clock.now += expected + 1
    _, report = await compress(engine, msgs)
    assert report.outcome == "compressed"
    assert engine.get_status().cooldown_until is None
    fake_openai.fail_next(503)
    await compress(engine, msgs)
    assert engine.get_status().cooldown_until == clock.now + 60


async def test_during_a_cooldown_a_request_that_no_longer_fits_gets_the_extract(
        fake_openai: FakeOpenAI, provider: Make, clock: Clock) -> None:
    fake_openai.fail_next(429)
    engine = engine_on(provider(fake_openai), clock)
    msgs = transcript()
    await compress(engine, msgs)
    _, report = await compress(engine, msgs, current_tokens=DOES_NOT_FIT)
    assert report.outcome == "fallback_used"
    assert chat_calls(fake_openai) == 1  # the resting model was not called again
    assert engine.get_status().cooldown_until == clock.now + 60  # and the cooldown is as it was


async def test_manual_compaction_bypasses_the_cooldown(
        fake_openai: FakeOpenAI, provider: Make, clock: Clock) -> None:
    fake_openai.responder = lambda req: CHECKPOINT
    fake_openai.fail_next(429)
    engine = engine_on(provider(fake_openai), clock)
    msgs = transcript()
    await compress(engine, msgs)
    _, report = await compress(engine, msgs, force=True)
    assert report.outcome == "compressed" and chat_calls(fake_openai) == 2


@pytest.mark.parametrize("failure", [404, 500])
async def test_a_failing_separate_summary_model_is_retried_once_on_the_main_model(
        fake_openai: FakeOpenAI, provider: Make, clock: Clock, failure: int) -> None:
    fake_openai.models = ["main-model"]
    fake_openai.responder = lambda req: CHECKPOINT
    if failure != 404:
        fake_openai.fail_next(failure)
        fake_openai.models = None
    used: list[tuple[str, str, CanonicalUsage]] = []
    main = provider(fake_openai, model="main-model")
    engine = engine_on(provider(fake_openai, model="gone-model"), clock, main_provider=main,
                       usage_sink=lambda model, purpose, usage: used.append(
                           (model, purpose, usage)))
    _, report = await compress(engine, transcript())
    assert report.outcome == "compressed"
    models = [c.json["model"] for c in fake_openai.calls_to("/chat/completions")]
    assert models == ["gone-model", "main-model"]
    assert any("gone-model" in n and "main model" in n for n in report.notices)
    assert [(m, p) for m, p, _ in used] == [("main-model", "summary")]
    assert used[0][2].prompt_tokens > 0


async def test_every_summarizer_call_is_reported_to_the_usage_sink(
        fake_openai: FakeOpenAI, provider: Make, clock: Clock) -> None:
    fake_openai.responder = lambda req: CHECKPOINT
    used: list[tuple[str, str, CanonicalUsage]] = []
    engine = engine_on(provider(fake_openai, context_length=2_048), clock,
                       usage_sink=lambda *entry: used.append(entry))
    _, report = await compress(engine, chat(20, size=1_500), force=True)
    assert report.summary_chunks == chat_calls(fake_openai) == len(used) > 1
    assert {(m, p) for m, p, _ in used} == {("fake-model", "summary")}


@pytest.mark.parametrize("window", [200_000, 8_000])
async def test_without_a_summary_model_it_says_so_and_never_renders(
        window: int, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(window, summary_provider=None, max_output_tokens=256)
    rendered: list[int] = []
    monkeypatch.setattr(engine.renderer, "render", lambda turns: rendered.append(len(turns)))
    msgs = chat(300, size=400)  # fits 200K (a middle to fold); 8K must shrink, by extraction
    out = await engine.compress(copy.deepcopy(msgs))
    report = engine.last_report
    assert report is not None and report.error == "no summary model is configured"
    assert rendered == []
    if window == 8_000:
        assert report.outcome == "fallback_used" and len(out) < len(msgs)
        assert_valid(out)
    else:
        assert report.outcome == "skipped" and out == msgs
