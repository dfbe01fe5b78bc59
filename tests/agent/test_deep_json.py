"""JSON nested deeper than the parser goes: every reader of model- or user-made JSON copes.

`json.loads` raises RecursionError, not ValueError, on input nested about a thousand deep.
A model's tool arguments and a user's attached file are both outside our control, and a
message that crashed its reader once would crash every later request of its session.
"""

from __future__ import annotations

from agent.attachments.text import read_text
from agent.compression.cut import lighten_tail
from agent.compression.render import TurnRenderer, key_arguments
from agent.providers.anthropic import to_anthropic
from agent.tokens import TokenCache
from agent.tools.calls import run_calls
from agent.tools.registry import Tool, ToolRegistry
from tests.harness.transcripts import assistant, result, user

TOO_DEEP = "[" * 5_000 + "]" * 5_000
# Parses, but walking it in Python (two frames a level) overflows the interpreter's stack.
DEEP = '{"path": "' + "x" * 600 + '", "nested": ' + "[" * 600 + "]" * 600 + "}"


def calling(arguments: str) -> dict:
    return assistant(None, [{"id": "c1", "type": "function",
                             "function": {"name": "probe", "arguments": arguments}}])


def test_anthropic_conversion_keeps_unparseable_arguments_as_raw_text() -> None:
    _, turns = to_anthropic([user("go"), calling(TOO_DEEP), result("c1", "done")])
    (use,) = [b for b in turns[1]["content"] if b["type"] == "tool_use"]
    assert use["input"] == {"_raw": TOO_DEEP}


async def test_a_tool_call_with_unparseable_arguments_is_answered_not_raised() -> None:
    ran: list[dict] = []
    registry = ToolRegistry([Tool("probe", "test", ran.append)])
    ((_, message),) = await run_calls(registry, calling(TOO_DEEP)["tool_calls"])
    assert "not a JSON object" in message["content"] and ran == []


def test_an_attached_file_of_deep_json_reads_as_text() -> None:
    read = read_text(TOO_DEEP.encode(), "data", None, 100_000)
    assert read.text == TOO_DEEP


def test_compaction_renders_and_lightens_deep_arguments() -> None:
    for arguments in (TOO_DEEP, DEEP):
        msgs = [user("go"), calling(arguments), result("c1", "done"), user("next")]
        assert lighten_tail(msgs, 3)[1] is msgs[1]  # left alone, not shortened
        pieces, _ = TurnRenderer(TokenCache()).render(msgs)
        assert pieces[2].startswith("### tool result: probe")
    assert key_arguments(TOO_DEEP).startswith("[[[")
