"""The summary's text: prompts, prefix and its upgrade, grounding, validation, chunking."""

from __future__ import annotations

import re

import pytest

from agent.compression.extractive import extractive_summary
from agent.compression.markers import strip_prefix, upgrade_prefix, with_prefix
from agent.compression.prompts import (
    OLDER_PREFIXES,
    SECTIONS,
    SUMMARY_PREFIX,
    base_instructions,
    first_request,
    request_frame,
    update_request,
)
from agent.compression.render import fit_chars, truncate_middle
from agent.compression.summarizer import (
    Summarizer,
    SummaryTooSmallWindow,
    check_reply,
    ground_active_task,
    section_body,
    trim_to,
)
from agent.errors import EmptyReplyError
from agent.tokens import TokenCache, estimate_message
from tests.harness.transcripts import (
    CHECKPOINT,
    ScriptedProvider,
    assistant,
    call,
    result,
    user,
)

ACTIVE = re.compile(r"active task", re.IGNORECASE)


def test_the_prefix_says_background_handled_task_and_whom_to_answer() -> None:
    lower = SUMMARY_PREFIX.lower()
    assert "background" in lower and "not instructions" in lower
    assert "already handled" in lower
    assert "active task" in lower
    assert "latest user message" in lower
    assert "\n" not in SUMMARY_PREFIX  # one marker line


@pytest.mark.parametrize("old", [*OLDER_PREFIXES, "[THREADLINE HANDOFF — an older wording]"])
def test_an_older_prefix_is_replaced_by_the_current_one(old: str) -> None:
    upgraded = upgrade_prefix(f"{old}\n## Goal\nship it")
    assert upgraded == f"{SUMMARY_PREFIX}\n## Goal\nship it"
    assert upgrade_prefix(upgraded) == upgraded
    assert strip_prefix(upgraded) == "## Goal\nship it"


def test_instructions_frame_a_separate_handoff_writer_with_the_sections_in_order() -> None:
    text = base_instructions(3_000)
    lower = text.lower()
    assert "separate assistant" in lower and "handoff checkpoint" in lower
    assert "do not answer" in lower
    assert "no preamble" in lower
    assert "language the user writes in" in lower
    assert "[REDACTED]" in text
    assert "paths, commands, numbers" in lower
    assert "3000 tokens" in text
    positions = [text.index(f"## {name}\n") for name in SECTIONS]
    assert positions == sorted(positions) and len(SECTIONS) == 13


def test_update_prompt_keeps_numbering_and_moves_finished_work() -> None:
    text = update_request("## Goal\nold", "### user\nnew turn", None).lower()
    assert "still true" in text and "continue the numbering" in text
    assert "completed actions" in text and "resolved questions" in text
    assert "old" in text and "new turn" in text
    focused = first_request("turns", "the CI pipeline")
    assert "the CI pipeline" in focused and "two thirds" in focused


@pytest.mark.parametrize("reply", [
    "## Goal\nx\n\n## Active Task\nI will write a poem now.\n\n## Blocked\nNone.",
    "## Goal\nx\n\n**Active Task**\nI will write a poem now.\n\n## Blocked\nNone.",
    "## Goal\nx\n\nActive Task:\nI will write a poem now.\n\n## Blocked\nNone.",
])
def test_grounding_replaces_whatever_the_model_wrote_under_active_task(reply: str) -> None:
    task = "Rename `foo` → `bar` in /src/app.py\nthen run `make test`."
    grounded = ground_active_task(reply, task)
    assert section_body(grounded, ACTIVE) == task
    assert "poem" not in grounded
    assert "## Blocked\nNone." in grounded and "## Goal\nx" in grounded


def test_grounding_puts_the_task_on_top_when_the_reply_has_no_headings() -> None:
    prose = "We looked at the logs and fixed two bugs. " * 3
    grounded = ground_active_task(prose, "fix the login page")
    assert grounded.startswith("## Active Task\nfix the login page\n\n")
    assert prose.strip() in grounded


@pytest.mark.parametrize("reply", ["", "   \n ", "ok", " ".join(["word"] * 19)])
def test_empty_or_near_empty_replies_are_failures(reply: str) -> None:
    with pytest.raises(EmptyReplyError):
        check_reply(reply)


def test_twenty_words_are_enough() -> None:
    assert check_reply(" ".join(["word"] * 20) + "  ") == " ".join(["word"] * 20)


def test_trimming_cuts_at_a_section_then_a_paragraph() -> None:
    text = "## Goal\n" + "g" * 50 + "\n\n## Blocked\n" + "b" * 50 + "\n\n## Critical Context\n"
    text += "c" * 500
    cut = trim_to(text, 150)
    assert cut.endswith("b" * 50) and len(cut) <= 150
    paragraphs = "p" * 60 + "\n\n" + "q" * 60 + "\n\n" + "r" * 60
    assert trim_to(paragraphs, 150) == "p" * 60 + "\n\n" + "q" * 60
    assert trim_to("short", 150) == "short"


def test_long_bodies_keep_their_first_4000_and_last_1500_characters() -> None:
    body = "H" * 4_000 + "M" * 10_000 + "T" * 1_500
    cut = truncate_middle(body)
    assert cut.startswith("H" * 4_000) and cut.endswith("T" * 1_500)
    assert "M" not in cut and "10000 characters omitted" in cut
    assert truncate_middle("x" * 5_500) == "x" * 5_500
    assert len(fit_chars("y" * 10_000, 700)) <= 700


async def test_chunks_fit_the_summary_window_and_carry_the_running_summary() -> None:
    provider = ScriptedProvider(lambda req: CHECKPOINT + f"\nchunk {len(provider.requests)}",
                                context_length=2_048)
    budget = 512
    summarizer = Summarizer(provider, window=2_048, budget=budget)
    pieces = [f"### user\nturn {i} " + "z" * 900 for i in range(40)]
    pieces.append("### tool result: huge\n" + "h" * 30_000)  # larger than any chunk
    body, chunks = await summarizer.summarize(pieces, None, "auth")
    assert chunks == len(provider.requests) > 5
    for i, request in enumerate(provider.requests):
        assert sum(estimate_message(m) for m in request) <= 2_048 - budget
        if i:  # every later chunk updates the running summary
            assert f"chunk {i}" in request[1]["content"]
            assert "<checkpoint>" in request[1]["content"]
    assert set(provider.max_tokens) == {budget}
    assert body.endswith(f"chunk {chunks}")
    joined = "".join(r[1]["content"] for r in provider.requests)
    assert all(f"turn {i} " in joined for i in range(40))


async def test_a_window_too_small_for_any_turn_is_a_failure() -> None:
    summarizer = Summarizer(ScriptedProvider(context_length=600), window=600, budget=150)
    with pytest.raises(SummaryTooSmallWindow):
        await summarizer.summarize(["### user\nhello"], None, None)


def test_extractive_fallback_is_short_concrete_and_prefixed() -> None:
    cache = TokenCache()
    span = [user("please fix the build in /srv/app/build.sh")]
    for i in range(60):
        span += [assistant(None, [call(f"c{i}", "run_shell", command=f"make step{i}")]),
                 result(f"c{i}", f"step {i} done\nERROR: missing file src/mod{i}.py\n" + "x" * 9_000)]
    span.append(user("now also update docs/README.md " + "w" * 20_000))
    previous = with_prefix("## Active Task\nold ask\n\n## Goal\nkeep CI green")
    text = extractive_summary(span, cache, task="now also update docs/README.md",
                              previous=previous)
    assert len(text) <= 8_000
    assert text.startswith(SUMMARY_PREFIX)
    assert "## Active Task\nnow also update docs/README.md" in text
    assert "please fix the build" in text  # recent user asks
    assert "run_shell" in text and 'command="make step59"' in text and "step 59 done" in text
    assert "/srv/app/build.sh" in text and "src/mod59.py" in text
    assert "ERROR: missing file src/mod59.py" in text
    assert "keep CI green" in text and "old ask" not in text


@pytest.mark.parametrize("previous", [None, "## Goal\nold", "odd \x00turns\x00 text"])
@pytest.mark.parametrize("focus", [None, "the CI pipeline"])
def test_a_request_built_around_its_turns_is_the_request(previous, focus) -> None:
    # The summarizer joins a request in one go around its frame (summarizer.py); the
    # result must be exactly the request, whatever the previous checkpoint holds.
    turns = "### user\nhello\n\n### assistant\nhi"
    before, after = request_frame(previous, focus)
    expected = (first_request(turns, focus) if previous is None
                else update_request(previous, turns, focus))
    assert before + turns + after == expected
