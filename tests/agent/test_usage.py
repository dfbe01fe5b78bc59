"""Usage normalization: three wire shapes, one CanonicalUsage, nothing counted twice."""

from __future__ import annotations

from typing import Any

import anthropic.types
import openai.types
import openai.types.responses
import pytest

from agent.usage import (
    CanonicalUsage,
    from_anthropic,
    from_openai_chat,
    from_openai_responses,
)

# Each case: the usage as the service reports it, what it normalizes to, and the totals the
# service itself states (prompt = everything read, total = prompt + output).
ANTHROPIC = [
    pytest.param({"input_tokens": 120, "output_tokens": 30},
                 CanonicalUsage(input_tokens=120, output_tokens=30), 120, 150, id="plain"),
    pytest.param({"input_tokens": 20, "output_tokens": 80, "cache_read_input_tokens": 1000,
                  "cache_creation_input_tokens": 300,
                  "output_tokens_details": {"thinking_tokens": 50}},
                 CanonicalUsage(input_tokens=20, output_tokens=80, cache_read_tokens=1000,
                                cache_write_tokens=300, reasoning_tokens=50),
                 1320, 1400, id="cache-and-thinking"),
    pytest.param({"input_tokens": 7, "output_tokens": 3, "cache_read_input_tokens": None,
                  "cache_creation_input_tokens": None, "output_tokens_details": None},
                 CanonicalUsage(input_tokens=7, output_tokens=3), 7, 10, id="nulls"),
]
CHAT = [
    pytest.param({"prompt_tokens": 500, "completion_tokens": 40, "total_tokens": 540},
                 CanonicalUsage(input_tokens=500, output_tokens=40), 500, 540, id="plain"),
    pytest.param({"prompt_tokens": 1500, "completion_tokens": 300, "total_tokens": 1800,
                  "prompt_tokens_details": {"cached_tokens": 1000, "cache_write_tokens": 200},
                  "completion_tokens_details": {"reasoning_tokens": 250}},
                 CanonicalUsage(input_tokens=300, output_tokens=300, cache_read_tokens=1000,
                                cache_write_tokens=200, reasoning_tokens=250),
                 1500, 1800, id="cache-and-reasoning"),
    # OpenRouter-style: the cache write beside the totals rather than in the details.
    pytest.param({"prompt_tokens": 900, "completion_tokens": 10, "total_tokens": 910,
                  "cache_write_tokens": 400, "prompt_tokens_details": {"cached_tokens": 0}},
                 CanonicalUsage(input_tokens=500, output_tokens=10, cache_write_tokens=400),
                 900, 910, id="top-level-cache-write"),
    pytest.param({"prompt_tokens": 64, "completion_tokens": 8, "total_tokens": 72,
                  "prompt_tokens_details": None, "completion_tokens_details": None},
                 CanonicalUsage(input_tokens=64, output_tokens=8), 64, 72, id="null-details"),
]
RESPONSES = [
    pytest.param({"input_tokens": 800, "output_tokens": 60, "total_tokens": 860},
                 CanonicalUsage(input_tokens=800, output_tokens=60), 800, 860, id="plain"),
    pytest.param({"input_tokens": 2000, "output_tokens": 500, "total_tokens": 2500,
                  "input_tokens_details": {"cached_tokens": 1500, "cache_creation_tokens": 100},
                  "output_tokens_details": {"reasoning_tokens": 400}},
                 CanonicalUsage(input_tokens=400, output_tokens=500, cache_read_tokens=1500,
                                cache_write_tokens=100, reasoning_tokens=400),
                 2000, 2500, id="cache-and-reasoning"),
    pytest.param({"input_tokens": 300, "output_tokens": 20, "total_tokens": 320,
                  "input_tokens_details": {"cached_tokens": 256},
                  "output_tokens_details": {"reasoning_tokens": 0}},
                 CanonicalUsage(input_tokens=44, output_tokens=20, cache_read_tokens=256),
                 300, 320, id="cache-read-only"),
    pytest.param({"input_tokens": 12, "output_tokens": 4, "total_tokens": 16,
                  "input_tokens_details": None, "output_tokens_details": None},
                 CanonicalUsage(input_tokens=12, output_tokens=4), 12, 16, id="null-details"),
]


def _check(got: CanonicalUsage, want: CanonicalUsage, prompt: int, total: int) -> None:
    assert got == want
    assert got.prompt_tokens == prompt
    # The service's own total: reasoning is inside output, so adding it would overshoot.
    assert got.total_tokens == total


@pytest.mark.parametrize(("wire", "want", "prompt", "total"), ANTHROPIC)
def test_anthropic_usage(wire: dict[str, Any], want: CanonicalUsage, prompt: int,
                         total: int) -> None:
    _check(from_anthropic(wire), want, prompt, total)


@pytest.mark.parametrize(("wire", "want", "prompt", "total"), CHAT)
def test_chat_completions_usage(wire: dict[str, Any], want: CanonicalUsage, prompt: int,
                                total: int) -> None:
    _check(from_openai_chat(wire), want, prompt, total)


@pytest.mark.parametrize(("wire", "want", "prompt", "total"), RESPONSES)
def test_responses_usage(wire: dict[str, Any], want: CanonicalUsage, prompt: int,
                         total: int) -> None:
    _check(from_openai_responses(wire), want, prompt, total)


def test_the_sdks_own_usage_objects_read_like_the_wire_dicts() -> None:
    """The providers hand over SDK objects (attributes), not dicts."""
    claude = anthropic.types.Usage(
        input_tokens=20, output_tokens=80, cache_read_input_tokens=1000,
        cache_creation_input_tokens=300,
        output_tokens_details={"thinking_tokens": 50})  # type: ignore[arg-type]
    chat = openai.types.CompletionUsage(
        prompt_tokens=1500, completion_tokens=300, total_tokens=1800,
        prompt_tokens_details={"cached_tokens": 1000,  # type: ignore[arg-type]
                               "cache_write_tokens": 200},
        completion_tokens_details={"reasoning_tokens": 250})  # type: ignore[arg-type]
    responses = openai.types.responses.ResponseUsage(
        input_tokens=2000, output_tokens=500, total_tokens=2500,
        input_tokens_details={"cached_tokens": 1500,  # type: ignore[arg-type]
                              "cache_write_tokens": 100},
        output_tokens_details={"reasoning_tokens": 400})  # type: ignore[arg-type]
    assert from_anthropic(claude) == CanonicalUsage(20, 80, 1000, 300, 50)
    assert from_openai_chat(chat) == CanonicalUsage(300, 300, 1000, 200, 250)
    assert from_openai_responses(responses) == CanonicalUsage(400, 500, 1500, 100, 400)


@pytest.mark.parametrize("normalize", [from_anthropic, from_openai_chat, from_openai_responses])
def test_no_usage_at_all_is_zero(normalize: Any) -> None:
    """Some local servers send no usage: nothing is invented."""
    assert normalize(None) == CanonicalUsage()
    assert normalize({}) == CanonicalUsage()


def test_reasoning_never_changes_output_or_totals() -> None:
    chat = {"prompt_tokens": 100, "completion_tokens": 90}
    responses = {"input_tokens": 100, "output_tokens": 90}
    claude = {"input_tokens": 100, "output_tokens": 90}
    for normalize, plain, reasoning in (
            (from_openai_chat, chat, {"completion_tokens_details": {"reasoning_tokens": 70}}),
            (from_openai_responses, responses,
             {"output_tokens_details": {"reasoning_tokens": 70}}),
            (from_anthropic, claude, {"output_tokens_details": {"thinking_tokens": 70}})):
        without, with_ = normalize(plain), normalize({**plain, **reasoning})
        assert with_.reasoning_tokens == 70 and without.reasoning_tokens == 0
        assert (with_.output_tokens, with_.total_tokens) == (90, 190)
        assert (without.output_tokens, without.total_tokens) == (90, 190)
