"""`Agent.run_turn(models=...)`: one turn on another model (a budget's fallback model),
fitted to that model's window like a fallback; the agent's own model and window apply
again on the next turn. Real agent, real compressor, the openai SDK against two fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from agent.agent import Agent, AgentSettings
from agent.compression.compressor import ContextCompressor
from agent.providers.chain import ModelChain
from agent.providers.openai_compat import OpenAICompatProvider
from tests.harness.fake_openai import FakeOpenAI
from tests.harness.gateway import is_summary_request, summarizing_responder


@pytest.fixture
async def cheap() -> AsyncIterator[FakeOpenAI]:
    server = FakeOpenAI(responder=summarizing_responder, context_limit=4000)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


def chat_calls(fake: FakeOpenAI) -> list:
    return [c for c in fake.calls_to("/chat/completions") if not is_summary_request(c.json)]


async def test_a_turn_on_a_smaller_model_is_fitted_to_it_and_then_home_again(
        autoclose, fake_openai, cheap):
    fake_openai.responder = summarizing_responder
    own = autoclose(OpenAICompatProvider(fake_openai.provider_settings(
        model="own", context_length=32_000)))
    small = autoclose(OpenAICompatProvider(cheap.provider_settings(
        model="small", context_length=4000, max_output_tokens=256)))
    agent = Agent.create(own, ContextCompressor, AgentSettings(protect_last_n=4))
    history = [{"role": "system", "content": "Be brief."}]
    for i in range(30):  # ~6,500 tokens: at home in 32K, far too long for 4K
        history += [{"role": "user", "content": f"question {i} " + "q" * 400},
                    {"role": "assistant", "content": f"answer {i} " + "a" * 400}]
    agent.load(history)
    agent.append([{"role": "user", "content": "on the cheap one"}])
    result = await agent.run_turn(models=small)
    assert result.reply == "echo: on the cheap one" and result.compaction is not None
    [answered] = chat_calls(cheap)  # the only one: it fitted at once
    assert cheap.prompt_tokens(answered.json) <= 4000
    assert answered.json["max_tokens"] == 256  # the small model's own cap
    assert {u.model for u in result.usage if u.purpose == "chat"} == {"small"}
    assert result.notices == () or all("Answered by" not in n for n in result.notices)
    assert agent.window == 32_000  # its own window again
    agent.append([{"role": "user", "content": "back home"}])
    result = await agent.run_turn()
    assert result.reply == "echo: back home"
    assert chat_calls(fake_openai) and len(chat_calls(cheap)) == 1


class Shown:
    """A live reply (a `ReplyStream`): what is on screen after the pieces and retractions."""

    def __init__(self) -> None:
        self.screen = ""
        self.retracted = 0

    def text(self, piece: str) -> None:
        self.screen += piece

    def retract(self) -> None:
        self.screen, self.retracted = "", self.retracted + 1


@pytest.mark.parametrize("how", ["drop", "error"])
async def test_a_model_breaking_off_mid_stream_is_replaced_on_screen_by_the_fallback(
        autoclose, fake_openai, cheap, how):
    fake_openai.responder = lambda body: "the primary starts a long answer " * 5
    fake_openai.stream_chunk_chars = 8
    fake_openai.break_stream_next(after_chars=40, how=how)
    chain = autoclose(ModelChain([
        OpenAICompatProvider(fake_openai.provider_settings(model="own")),
        OpenAICompatProvider(cheap.provider_settings(model="small"))]))
    agent = Agent.create(chain, ContextCompressor, AgentSettings())
    agent.load([{"role": "system", "content": "Be brief."}])
    agent.append([{"role": "user", "content": "tell me"}])
    shown = Shown()
    result = await agent.run_turn(shown)
    assert result.reply == shown.screen == "echo: tell me"
    assert shown.retracted == 1  # the primary's half answer went away
    assert {u.model for u in result.usage} == {"small"}
