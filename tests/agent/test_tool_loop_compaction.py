"""Compacting transcripts the real tool loop wrote (spec §5: tool groups are kept whole).

A real Agent with the built-in compressor runs many turns against the fake OpenAI server
through the openai SDK; in each turn the fake model calls one to three real tools (some in
parallel, some one after another, some failing, some with long arguments or outputs big
enough for the output budget) and then answers. The window is small, so the compressor
runs on its own during the turns, and a /compress every ten turns forces it. Every
compaction must pass the invariants of the compressor's property tests, lose no tool
result (each is kept or was shown to the summarizer), and every request the model sees
must pair each tool call with its result.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.agent import Agent, AgentSettings
from agent.compression.prompts import STUB_TOOL_RESULT
from agent.providers.openai_compat import OpenAICompatProvider
from agent.tools.budget import OutputBudget, chat_directory
from agent.tools.registry import Tool
from tests.agent.test_compressor_properties import check_compaction
from tests.harness import FakeOpenAI
from tests.harness.tool_transcripts import (
    ask,
    calling,
    chat_requests,
    make_agent,
    pairing_problems,
    tool_call,
)
from tests.harness.transcripts import CHECKPOINT, assert_valid

Message = dict[str, Any]
Steps = list[list[Message]]  # per step, the parallel calls of one assistant message
WINDOW = 8_000  # tokens: per_result 8,000 characters, so the largest outputs are saved
TURNS = 30
FILE_SIZES = (60, 800, 2_500, 5_000, 9_000, 300)  # by file number; 9,000 goes to a file
RUNS = [(0, 20), (1, 20), (2, 6), (3, 6), (4, 0), (5, 2), (6, 20), (7, 3)]  # (seed, keep)
# The summarizer sees each tool result under a header naming its key arguments.
SUMMARIZED_REF = re.compile(r'^### tool result: .*?ref="([^"]+)"', re.MULTILINE)


async def read_file(arguments: dict[str, Any]) -> str:
    path = str(arguments["path"])
    size = FILE_SIZES[int(path.removesuffix(".py")[-1])]
    return f"{path}:\n" + f"line of {path}\n" * (size // (len(path) + 9))


async def search(arguments: dict[str, Any]) -> str:
    return f"hits for {arguments['query']}: " + "match " * int(arguments["size"])


async def build(arguments: dict[str, Any]) -> str:
    raise RuntimeError(f"cannot build {arguments['path']}")


TOOLS = [Tool("read_file", "read a file", read_file), Tool("search", "search code", search),
         Tool("build", "build a target", build)]


def random_call(rng: random.Random, call_id: str) -> Message:
    kind = rng.choice(("read_file", "read_file", "search", "build", "not_a_tool"))
    if kind == "search":
        return tool_call(call_id, kind, {"query": f"q{rng.randint(0, 3)}", "ref": call_id,
                                         "size": rng.choice((5, 80, 600))})
    # Few distinct files: the same output comes back often (the cheap pass dedups it).
    arguments: dict[str, Any] = {"path": f"/src/mod{rng.randint(0, 5)}.py", "ref": call_id}
    if rng.random() < 0.2:
        arguments["note"] = "why " * 200  # long arguments: the cheap pass shortens them
    return tool_call(call_id, kind, arguments)


def plan(seed: int, turns: int) -> list[Steps]:
    """Per turn, 1-3 tool calls split into steps of parallel calls (seeded)."""
    rng = random.Random(seed)
    ids = itertools.count()
    plans: list[Steps] = []
    for turn in range(turns):
        left, steps = rng.randint(1, 3), []
        while left:
            width = rng.randint(1, left)
            steps.append([random_call(rng, f"t{turn}_{next(ids)}") for _ in range(width)])
            left -= width
        plans.append(steps)
    return plans


class PlannedModel:
    """The fake model: works through this turn's planned steps, then answers; writes the
    checkpoint when asked for a summary (the summarizer offers no tools)."""

    def __init__(self, plans: list[Steps]) -> None:
        self.plans = plans
        self.turn = self.step = 0

    def start(self, turn: int) -> None:
        self.turn, self.step = turn, 0

    def __call__(self, request: dict[str, Any]) -> Message | str:
        if not request.get("tools"):
            return CHECKPOINT
        steps = self.plans[self.turn]
        if self.step < len(steps):
            self.step += 1
            return calling(*steps[self.step - 1])
        return f"answer {self.turn}: done"


class Chat:
    """One agent on the fake, and the checks every compaction of it must pass."""

    def __init__(self, agent: Agent, model: PlannedModel, fake: FakeOpenAI) -> None:
        self.agent, self.model, self.fake = agent, model, fake

    def _summarizer_saw(self, since: int) -> set[str]:
        prompts = [m["content"] for r in chat_requests(self.fake)[since:] if not r.get("tools")
                   for m in r["messages"]]
        return set(SUMMARIZED_REF.findall("\n".join(prompts)))

    def _check(self, before: list[Message], after: list[Message], compacted_before: bool,
               since: int) -> None:
        report = self.agent.engine.last_report
        assert report is not None and report.outcome != "aborted", report
        check_compaction(self.agent.engine, before, after, compacted_before)
        kept = {m["tool_call_id"] for m in after
                if m["role"] == "tool" and m["content"] != STUB_TOOL_RESULT}
        summarized = self._summarizer_saw(since)
        lost = [m["tool_call_id"] for m in before if m["role"] == "tool"
                and m["tool_call_id"] not in kept and m["tool_call_id"] not in summarized]
        assert lost == [], "tool results neither kept nor summarized"

    async def turn(self, turn: int) -> int:
        """Run a turn, check the transcript, and check its compaction if it made one."""
        self.model.start(turn)
        ask(self.agent, f"question {turn}: what does the code do?")
        stored, since = self.agent.messages.as_list(), len(chat_requests(self.fake))
        compacted_before = self.agent.engine.compression_count > 0
        result = await self.agent.run_turn()
        assert result.reply == f"answer {turn}: done"
        assert_valid(self.agent.messages)
        if result.compaction is None:
            return 0
        self._check([*stored, *result.before], list(result.compaction.messages),
                    compacted_before, since)
        return 1

    async def compress(self) -> int:
        """/compress; when there was nothing new to fold in, nothing may change."""
        stored, since = self.agent.messages.as_list(), len(chat_requests(self.fake))
        compacted_before = self.agent.engine.compression_count > 0
        result = await self.agent.compact()
        self._check(stored, list(result.after), compacted_before, since)
        assert list(self.agent.messages) == list(result.after)
        if not result.changed:
            return 0
        assert any(m.get("tool_calls") for m in result.after)  # the latest tool group stayed
        return 1


@pytest.fixture
def provider(autoclose: Callable[[Any], Any]) -> Callable[[FakeOpenAI], OpenAICompatProvider]:
    def make(fake: FakeOpenAI) -> OpenAICompatProvider:
        return autoclose(OpenAICompatProvider(fake.provider_settings(context_length=WINDOW)))

    return make


@pytest.mark.parametrize(("seed", "keep"), RUNS, ids=[f"seed{s}-keep{k}" for s, k in RUNS])
async def test_compacting_a_tool_heavy_chat_keeps_every_call_with_its_result(
        fake_openai: FakeOpenAI, provider: Callable[[FakeOpenAI], OpenAICompatProvider],
        tmp_path: Path, seed: int, keep: int) -> None:
    model = PlannedModel(plan(seed, TURNS + 1))
    fake_openai.responder = model
    budget = OutputBudget(chat_directory(tmp_path, f"telegram:{seed}"), WINDOW)
    agent = make_agent(provider(fake_openai), TOOLS, budget=budget,
                       settings=AgentSettings(max_output_tokens=256, protect_last_n=keep))
    chat = Chat(agent, model, fake_openai)

    automatic = manual = 0
    for turn in range(TURNS):
        automatic += await chat.turn(turn)
        if turn % 10 == 9:
            manual += await chat.compress()
    await chat.turn(TURNS)  # the compacted transcript is a valid history for the model

    assert automatic >= 1  # the small window made the compressor run during the turns
    assert manual >= 1 and agent.engine.compression_count == automatic + manual
    assert any(budget.directory.iterdir())  # some outputs went to files
    tool_requests = [r["messages"] for r in chat_requests(fake_openai) if r.get("tools")]
    assert len(tool_requests) > 2 * TURNS
    for messages in tool_requests:
        assert_valid(messages)
        assert pairing_problems(messages) == []
