"""Prompt-caching breakpoints: where they go, how many, and what they never touch."""

from __future__ import annotations

import copy

import pytest

from agent.caching import applies, mark
from agent.providers.anthropic import to_anthropic

TAG = {"type": "ephemeral"}


def history(n: int) -> list[dict]:
    messages = [{"role": "system", "content": "You are helpful."}]
    for i in range(n):
        messages.append({"role": "user", "content": f"question {i}"})
        messages.append({"role": "assistant", "content": f"answer {i}"})
    return messages


def markers_in(value) -> int:
    if isinstance(value, dict):
        return ("cache_control" in value) + sum(markers_in(v) for v in value.values())
    if isinstance(value, list):
        return sum(markers_in(v) for v in value)
    return 0


def test_the_system_prompt_and_the_last_three_messages_are_marked_and_nothing_else() -> None:
    messages = history(5)
    original = copy.deepcopy(messages)
    marked = mark(messages)
    assert markers_in(marked) == 4
    assert marked[0]["content"] == [{"type": "text", "text": "You are helpful.",
                                     "cache_control": TAG}]
    assert [i for i, m in enumerate(marked) if markers_in(m)] == [0, 8, 9, 10]
    assert messages == original  # the history itself is untouched
    assert all(marked[i] is messages[i] for i in range(1, 8))  # unmarked: not copied


@pytest.mark.parametrize("count", [0, 1, 2, 3, 50])
def test_never_more_than_four_breakpoints_however_long_or_short(count: int) -> None:
    marked = mark(history(count))
    assert markers_in(marked) == min(4, 1 + 2 * count)
    system, turns = to_anthropic(marked)
    assert markers_in(system) + markers_in(turns) == min(4, 1 + 2 * count)


def test_placement_by_content_type() -> None:
    messages = [
        {"role": "system", "content": "rules"},
        {"role": "user", "content": [{"type": "text", "text": "a"},
                                     {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]
    marked = mark(messages)
    assert "cache_control" not in marked[1]["content"][0]
    assert marked[1]["content"][1]["cache_control"] == TAG  # a list: its last block
    assert marked[2]["cache_control"] == TAG  # empty content: on the message
    assert marked[3]["cache_control"] == TAG and marked[3]["content"] == "42"  # tool result
    system, turns = to_anthropic(marked)
    assert system[-1]["cache_control"] == TAG
    tool_use_turn, result_turn = turns[-2], turns[-1]
    assert tool_use_turn["content"][-1]["cache_control"] == TAG
    assert result_turn["content"][0]["type"] == "tool_result"
    assert result_turn["content"][0]["cache_control"] == TAG


def test_one_hour_ttl_is_said_and_five_minutes_is_the_default() -> None:
    assert mark(history(1), "1h")[0]["content"][0]["cache_control"] == {
        "type": "ephemeral", "ttl": "1h"}
    assert mark(history(1), "5m")[0]["content"][0]["cache_control"] == TAG
    with pytest.raises(ValueError):
        mark(history(1), "10m")


def test_the_openai_style_keeps_markers_inside_content_parts() -> None:
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": None, "tool_calls": []},
                {"role": "tool", "tool_call_id": "c1", "content": "42"}]
    marked = mark(messages, style="openai")
    assert all("cache_control" not in m for m in marked)
    assert marked[3]["content"] == [{"type": "text", "text": "42", "cache_control": TAG}]
    assert marked[2] is messages[2]  # nothing to carry a marker: left as it was


@pytest.mark.parametrize("provider, model, cached", [
    ("anthropic", "claude-sonnet-4-5", True),
    ("openai", "anthropic/claude-3.7-sonnet", True),  # OpenRouter, LiteLLM
    ("openai", "gpt-4o", False),
    ("anthropic", "some-other-model", False),
    ("local", "claude-lookalike", False),
])
def test_caching_applies_to_claude_models_only(provider, model, cached) -> None:
    assert applies(provider, model) is cached
