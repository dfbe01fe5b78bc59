"""Tool calls and the tool-output budget (docs/architecture.md, "Tools"; spec §11).

A real Agent talks to the fake OpenAI server through the real openai SDK and runs real
tools from a ToolRegistry; saved outputs are real files under tmp_path. Whatever a tool
does, the next request must pair every tool call with exactly one result, in order, right
after the assistant message, and the model's final answer must reach the user.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.agent import MAX_TOOL_STEPS, NO_TOOLS_REPLY, TOOL_LIMIT_REPLY
from agent.providers.openai_compat import OpenAICompatProvider
from agent.tools.budget import (
    PREVIEW_CHARS,
    READ_LIMIT,
    OutputBudget,
    chat_directory,
    clean_old_outputs,
)
from agent.tools.calls import run_calls
from agent.tools.registry import Tool, ToolRegistry
from tests.harness import FakeOpenAI
from tests.harness.tool_transcripts import (
    ask,
    calling,
    chat_requests,
    make_agent,
    numbered,
    pairing_problems,
    tool_call,
    tool_messages,
)

Message = dict[str, Any]
Make = Callable[..., OpenAICompatProvider]
WINDOW = 20_000  # tokens: per_result 12,000 characters, per_turn 24,000
FILE_ID = re.compile(r"File ([0-9a-f]{32}\.txt);")


@pytest.fixture
def provider(autoclose: Callable[[Any], Any]) -> Make:
    def make(fake: FakeOpenAI) -> OpenAICompatProvider:
        # A large window: no compaction gets in the way of the tool loop here.
        return autoclose(OpenAICompatProvider(fake.provider_settings(context_length=200_000)))

    return make


def result(call_id: str, text: str) -> Message:
    return {"role": "tool", "tool_call_id": call_id, "content": text}


def saved_id(content: str) -> str:
    found = FILE_ID.search(content)
    assert found, f"no saved-output block in {content[:200]!r}"
    return found.group(1)


def echo_tool(name: str, ran: list[dict[str, Any]] | None = None) -> Tool:
    async def run(arguments: dict[str, Any]) -> str:
        if ran is not None:
            ran.append(arguments)
        return f"{name} ok: {arguments}"

    return Tool(name, f"the {name} tool", run)


def answer_with_results(request: dict[str, Any]) -> str:
    """The fake model's final answer quotes the tool results it was sent."""
    return "answer: " + " | ".join(m["content"] for m in tool_messages(request["messages"]))


# --- A. tool calls ----------------------------------------------------------------------
async def test_parallel_calls_run_concurrently_and_both_results_reach_the_model(
        fake_openai: FakeOpenAI, provider: Make) -> None:
    left_started, right_started = asyncio.Event(), asyncio.Event()

    async def left(arguments: dict[str, Any]) -> str:
        left_started.set()
        await asyncio.wait_for(right_started.wait(), 1.0)  # only if both run at once
        return f"left read {arguments['path']}"

    async def right(arguments: dict[str, Any]) -> str:
        right_started.set()
        await asyncio.wait_for(left_started.wait(), 1.0)
        return f"right read {arguments['path']}"

    fake_openai.queue_reply(calling(tool_call("call_l", "left", {"path": "/a"}),
                                    tool_call("call_r", "right", {"path": "/b"})))
    fake_openai.responder = answer_with_results
    agent = make_agent(provider(fake_openai), [Tool("right", "r", right), Tool("left", "l", left)])
    ask(agent, "read both files")

    turn = await agent.run_turn()

    first, second = chat_requests(fake_openai)
    assert [t["function"]["name"] for t in first["tools"]] == ["left", "right"]
    sent = second["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "tool"]
    assert pairing_problems(sent) == []
    assert [m["content"] for m in sent[3:]] == ["left read /a", "right read /b"]
    assert turn.reply == "answer: left read /a | right read /b"
    assert [m["role"] for m in turn.after] == ["assistant", "tool", "tool", "assistant"]


@pytest.mark.parametrize(("bad_call", "says"), [
    (tool_call("c_bad", "explode", {"path": "/x"}), "Error: explode failed: disk on fire"),
    (tool_call("c_bad", "no_such_tool", {"path": "/x"}), "Error: there is no tool named "
                                                        "'no_such_tool'."),
    (tool_call("c_bad", "lookup", '{"path": "/x"'), "Error: the arguments for lookup were "
                                                   "not a JSON object"),
    (tool_call("c_bad", "lookup", '["/x"]'), "Error: the arguments for lookup were not a "
                                            "JSON object"),
], ids=["raises", "unknown-name", "malformed-json", "json-not-an-object"])
async def test_a_failing_call_is_answered_in_words_and_the_turn_still_ends_in_an_answer(
        fake_openai: FakeOpenAI, provider: Make, bad_call: Message, says: str) -> None:
    ran: list[dict[str, Any]] = []

    async def explode(arguments: dict[str, Any]) -> str:
        raise OSError("disk on fire")

    fake_openai.queue_reply(calling(bad_call, tool_call("c_good", "lookup", {"path": "/ok"})))
    fake_openai.responder = answer_with_results
    agent = make_agent(provider(fake_openai), [echo_tool("lookup", ran),
                                               Tool("explode", "fails", explode)])
    ask(agent, "look things up")

    turn = await agent.run_turn()

    sent = chat_requests(fake_openai)[1]["messages"]
    assert pairing_problems(sent) == []
    bad, good = tool_messages(sent)
    assert bad["tool_call_id"] == "c_bad" and bad["content"].startswith(says)
    assert good == result("c_good", "lookup ok: {'path': '/ok'}")
    assert ran == [{"path": "/ok"}]  # malformed arguments never reach the tool
    assert turn.reply == f"answer: {bad['content']} | {good['content']}"


async def test_a_model_that_never_stops_calling_tools_gets_the_step_limit_reply(
        fake_openai: FakeOpenAI, provider: Make) -> None:
    ran: list[dict[str, Any]] = []
    step = iter(range(100))

    def keep_calling(request: dict[str, Any]) -> Message:
        n = next(step)
        return calling(tool_call(f"call_{n}", "lookup", {"n": n}))

    fake_openai.responder = keep_calling
    agent = make_agent(provider(fake_openai), [echo_tool("lookup", ran)])
    ask(agent, "dig forever")

    turn = await agent.run_turn()

    assert turn.reply == TOOL_LIMIT_REPLY
    requests = chat_requests(fake_openai)
    assert len(requests) == MAX_TOOL_STEPS + 1
    assert len(ran) == MAX_TOOL_STEPS  # the last call is answered but never run
    for request in requests:
        assert pairing_problems(request["messages"]) == []
    assert pairing_problems(agent.messages) == []
    assert turn.after[-1]["content"] == TOOL_LIMIT_REPLY
    assert turn.after[-2]["tool_call_id"] == f"call_{MAX_TOOL_STEPS}"
    # The next turn sends that history as it stands, and the model can answer again.
    fake_openai.responder = lambda request: "fine, here is what I found"
    ask(agent, "ok, just summarise")
    assert (await agent.run_turn()).reply == "fine, here is what I found"
    assert pairing_problems(chat_requests(fake_openai)[-1]["messages"]) == []


async def test_a_model_without_tools_that_calls_one_gets_a_plain_answer(
        fake_openai: FakeOpenAI, provider: Make) -> None:
    fake_openai.queue_reply(calling(tool_call("call_1", "lookup", {"q": "x"})))
    agent = make_agent(provider(fake_openai), [])  # no tools offered, as on the local model

    ask(agent, "look it up")

    turn = await agent.run_turn()

    assert turn.reply == NO_TOOLS_REPLY
    assert "tools" not in chat_requests(fake_openai)[-1]
    assert len(chat_requests(fake_openai)) == 1
    assert pairing_problems(agent.messages) == []


# --- B. the output budget -----------------------------------------------------------------
def budget_in(tmp_path: Path, chat_key: str = "telegram:42") -> OutputBudget:
    return OutputBudget(chat_directory(tmp_path / "tool-outputs", chat_key), WINDOW)


def test_a_result_over_per_result_goes_to_a_file_and_leaves_a_preview(tmp_path: Path) -> None:
    budget = budget_in(tmp_path)
    assert (budget.per_result, budget.per_turn) == (12_000, 24_000)
    big, at_limit = numbered(budget.per_result + 1), numbered(budget.per_result)
    tool = echo_tool("dump")

    out = budget.apply([(tool, result("c1", big)), (tool, result("c2", at_limit))])

    assert out[1] == result("c2", at_limit)  # at the limit is not over it
    saved = out[0]
    assert (saved["role"], saved["tool_call_id"]) == ("tool", "c1")
    content = saved["content"]
    file_id = saved_id(content)
    assert content.startswith("[Saved output: 12,001 characters")
    assert f'read_saved_output(file="{file_id}", offset=0, limit={READ_LIMIT})' in content
    assert content.endswith("\n" + big[:PREVIEW_CHARS])
    assert len(content) < PREVIEW_CHARS + 300
    assert (budget.directory / file_id).read_text(encoding="utf-8") == big
    assert [p.name for p in budget.directory.iterdir()] == [file_id]


async def test_read_saved_output_returns_exactly_the_slice_asked_for(tmp_path: Path) -> None:
    budget = budget_in(tmp_path)
    text = numbered(30_000)
    file_id = saved_id(budget.apply([(None, result("c0", text))])[0]["content"])
    slices = [(0, 100), (1_499, 2), (12_345, 6_789), (29_990, 100), (30_000, 10),
              (31_000, 5)]
    calls = [tool_call(f"r{i}", "read_saved_output",
                       {"file": file_id, "offset": offset, "limit": limit})
             for i, (offset, limit) in enumerate(slices)]
    calls.append(tool_call("r_default", "read_saved_output", {"file": file_id}))

    results = await run_calls(ToolRegistry([budget.reader()]), calls)

    got = [message["content"] for _, message in results]
    wanted = [text[offset:offset + limit] for offset, limit in slices]
    assert got == [*wanted, text[:READ_LIMIT]]
    assert got[3:6] == [text[29_990:], "", ""]  # the end, and past it
    assert [message["tool_call_id"] for _, message in results] == [c["id"] for c in calls]


def test_a_turn_over_per_turn_saves_the_largest_results_until_it_fits(tmp_path: Path) -> None:
    budget = budget_in(tmp_path)
    sizes = {"c1": 11_000, "c2": 9_000, "c3": 10_500, "c4": 10_000}  # each under per_result
    texts = {cid: numbered(size) for cid, size in sizes.items()}
    tool = echo_tool("dump")

    out = budget.apply([(tool, result(cid, text)) for cid, text in texts.items()])

    assert [m["tool_call_id"] for m in out] == list(sizes)
    saved = {m["tool_call_id"] for m in out if m["content"].startswith("[Saved output")}
    assert saved == {"c1", "c3"}  # the two largest; after them the turn fits
    assert out[1] == result("c2", texts["c2"]) and out[3] == result("c4", texts["c4"])
    assert sum(len(m["content"]) for m in out) <= budget.per_turn
    for message in out:
        if message["tool_call_id"] in saved:
            stored = budget.directory / saved_id(message["content"])
            assert stored.read_text(encoding="utf-8") == texts[message["tool_call_id"]]


def test_a_per_turn_save_never_makes_a_small_result_longer(tmp_path: Path) -> None:
    budget = budget_in(tmp_path)
    small = "3 matches: foo.py"

    out = budget.apply([(budget.reader(), result("c1", numbered(30_000))),
                        (echo_tool("search"), result("c2", small))])

    assert out[1] == result("c2", small)  # not "17 characters, too long to keep here"


def test_the_read_tools_own_output_is_never_saved(tmp_path: Path) -> None:
    budget = budget_in(tmp_path)
    huge = numbered(50_000)  # over per_result and per_turn on its own
    other = numbered(10_000)

    out = budget.apply([(budget.reader(), result("c1", huge)),
                        (echo_tool("dump"), result("c2", other))])

    assert out[0] == result("c1", huge)
    assert out[1]["content"].startswith("[Saved output: 10,000 characters")
    assert len(list(budget.directory.iterdir())) == 1


async def test_the_agent_saves_a_huge_result_and_the_model_reads_it_back(
        fake_openai: FakeOpenAI, provider: Make, tmp_path: Path) -> None:
    text = numbered(60_000)
    budget = budget_in(tmp_path)

    async def dump(arguments: dict[str, Any]) -> str:
        return text

    def model(request: dict[str, Any]) -> Message | str:
        last = request["messages"][-1]
        if last["role"] == "tool" and last["tool_call_id"] == "c_dump":
            file_id = saved_id(last["content"])  # what a model reads in its context
            return calling(
                tool_call("c_head", "read_saved_output",
                          {"file": file_id, "offset": 0, "limit": 50_000}),
                tool_call("c_tail", "read_saved_output",
                          {"file": file_id, "offset": 59_990, "limit": 100}))
        head, tail = request["messages"][-2:]
        return f"read {len(head['content']):,} characters; the table ends {tail['content']}"

    fake_openai.queue_reply(calling(tool_call("c_dump", "dump", {"table": "events"})))
    fake_openai.responder = model
    agent = make_agent(provider(fake_openai), [Tool("dump", "dump a table", dump),
                                               budget.reader()], budget=budget)
    ask(agent, "what is at the end of the events table?")

    turn = await agent.run_turn()

    requests = chat_requests(fake_openai)
    assert len(requests) == 3
    preview = requests[1]["messages"][-1]["content"]
    assert preview.startswith("[Saved output: 60,000 characters")
    assert preview.endswith(text[:PREVIEW_CHARS]) and len(preview) < 2_000
    head, tail = requests[2]["messages"][-2:]
    assert head == result("c_head", text[:50_000])  # the reader's output stays whole
    assert tail == result("c_tail", text[59_990:])
    for request in requests:
        assert pairing_problems(request["messages"]) == []
    assert turn.reply == f"read 50,000 characters; the table ends {text[59_990:]}"
    assert len(list(budget.directory.iterdir())) == 1


def test_file_ids_with_path_tricks_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "tool-outputs"
    mine, theirs = budget_in(tmp_path, "telegram:1"), budget_in(tmp_path, "telegram:2")
    their_id = saved_id(theirs.apply([(None, result("c", "THEIR SECRET " * 1_000))])[0]
                        ["content"])
    mine.directory.mkdir(parents=True)
    (root / "x.txt").write_text("ROOT SECRET", encoding="utf-8")
    (tmp_path / "abs.txt").write_text("ABSOLUTE SECRET", encoding="utf-8")

    tricks = ["../x.txt", str(tmp_path / "abs.txt"), str(theirs.directory / their_id),
              f"../{theirs.directory.name}/{their_id}", "", "x.txt", their_id.upper(),
              their_id]
    for trick in tricks:
        answer = mine.read(trick)
        assert answer.startswith("Error:"), trick
        assert "SECRET" not in answer, trick
    assert theirs.read(their_id, 0, 12) == "THEIR SECRET"


def test_saved_outputs_live_in_one_directory_per_chat(tmp_path: Path) -> None:
    root = tmp_path / "tool-outputs"
    one, two = chat_directory(root, "telegram:1"), chat_directory(root, "telegram:2")
    assert one != two
    assert one.parent == root and two.parent == root
    assert chat_directory(root, "telegram:1") == one  # stable across restarts
    assert "telegram" not in one.name and "/" not in one.name
    budget = OutputBudget(one, WINDOW)
    budget.apply([(None, result("c", numbered(13_000)))])
    assert len(list(one.iterdir())) == 1 and not two.exists()


def test_clean_old_outputs_removes_only_files_past_the_retention(tmp_path: Path) -> None:
    root = tmp_path / "tool-outputs"
    now = time.time()
    ages = {("telegram:1", "old"): 3_700, ("telegram:1", "new"): 3_500,
            ("discord:9", "old"): 90_000, ("discord:9", "new"): 10}
    paths = {}
    for (chat_key, label), age in ages.items():
        budget = OutputBudget(chat_directory(root, chat_key), WINDOW)
        saved = budget.apply([(None, result("c", f"{label} " + "o" * 13_000))])[0]
        path = budget.directory / saved_id(saved["content"])
        os.utime(path, (now - age, now - age))
        paths[(chat_key, label)] = path

    assert clean_old_outputs(root, retention_s=3_600) == 2

    assert {key for key, path in paths.items() if path.exists()} == {
        ("telegram:1", "new"), ("discord:9", "new")}
    assert clean_old_outputs(tmp_path / "nothing-here") == 0


def test_the_default_retention_keeps_thirty_days_of_outputs(tmp_path: Path) -> None:
    root = tmp_path / "tool-outputs"
    budget = OutputBudget(chat_directory(root, "telegram:1"), WINDOW)
    now, day = time.time(), 24 * 3_600
    paths = []
    for age in (29.9 * day, 30.1 * day):  # docs/architecture.md: "30 days"
        saved = budget.apply([(None, result("c", "x" * 13_000))])[0]
        paths.append(budget.directory / saved_id(saved["content"]))
        os.utime(paths[-1], (now - age, now - age))

    assert clean_old_outputs(root) == 1
    assert [path.exists() for path in paths] == [True, False]


async def test_the_context_engines_own_tools_are_offered_and_answered_by_it(
        fake_openai: FakeOpenAI, provider: Make) -> None:
    from agent.agent import Agent, AgentSettings
    from agent.tools.registry import engine_tools
    from tests.harness.engines import DropOldest

    class WithNotes(DropOldest):
        def get_tool_schemas(self) -> list[dict[str, Any]]:
            return [{"type": "function", "function": {
                "name": "engine_notes", "description": "what the engine remembers",
                "parameters": {"type": "object", "properties": {}}}}]

        def handle_tool_call(self, name: str, args: dict[str, Any], **kwargs: Any) -> str:
            return f"{name}: the engine remembers the blue door"

    fake_openai.queue_reply(calling(tool_call("call_1", "engine_notes")), "noted")
    agent = Agent.create(provider(fake_openai), WithNotes, AgentSettings(),
                         tools=lambda engine: ToolRegistry(engine_tools(engine)))
    ask(agent, "what do you remember?")

    turn = await agent.run_turn()

    first, second = chat_requests(fake_openai)
    assert [t["function"]["name"] for t in first["tools"]] == ["engine_notes"]
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_1",
                                      "content": "engine_notes: the engine remembers the blue door"}
    assert turn.reply == "noted"
