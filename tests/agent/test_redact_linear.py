"""A stranger's text cannot stall the bot in redaction: every shape that once took a pattern
quadratic time is redacted at 100,000 characters in a fraction of a second, and secrets
inside such text are still found (docs/architecture.md, "Secrets")."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings

from agent.redact import REDACTED, redact
from tests.harness.hostile_text import SHAPES, Repeated, hostile_shapes

SIZE = 100_000  # the largest document a chat hands to redaction
BUDGET = 0.5  # CPU seconds; a quadratic pattern takes seconds to hours at this size
# A lone surrogate: RE2 cannot read it, so the screen gives way and every pattern runs.
UNSCREENED = "\ud800"
SECRETS = ("hunter2x", "ghp_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
           "sk-" + "AbCdEfGhIjKlMnOpQrStUvWx0123456789abcdefghijkl")


def _cpu_seconds(redactor: Callable[[str], str], text: str) -> float:
    # The calling thread's CPU time: a busy machine slows the wall clock, not this. The
    # collector waits: a full collection of the test run's heap is not redaction's cost.
    gc.disable()
    try:
        start = time.thread_time()
        redactor(text)
        return time.thread_time() - start
    finally:
        gc.enable()


def _assert_fast(shape: Callable[[int], str]) -> None:
    # A tenth of the size first, on a quarter of the budget: a quadratic pattern fails there
    # in a second or two instead of running into the test timeout.
    for size, budget in ((SIZE // 10, BUDGET / 4), (SIZE, BUDGET)):
        text = shape(size)
        assert size * 0.9 <= len(text) <= size * 1.1
        for variant in (text, text + UNSCREENED):
            seconds = _cpu_seconds(redact, variant)
            assert seconds < budget, f"{seconds:.2f} s of CPU for {len(variant):,} characters"


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_hostile_shape_is_redacted_in_a_fraction_of_a_second(name: str) -> None:
    _assert_fast(SHAPES[name])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_shapes())
def test_texts_of_repeated_trigger_fragments_are_redacted_fast(shape: Repeated) -> None:
    _assert_fast(shape)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_redacting_a_hostile_shape_twice_changes_nothing_more(name: str) -> None:
    once = redact(SHAPES[name](2_000))
    assert redact(once) == once


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_secrets_between_hostile_runs_are_still_replaced(name: str) -> None:
    hostile = SHAPES[name](SIZE // 2)
    line = f"export DB_PASSWORD={SECRETS[0]} and keys {SECRETS[1]} {SECRETS[2]}"
    out = redact(f"{hostile}\n{line}\n{hostile}")
    for secret in SECRETS:
        assert secret not in out
    assert REDACTED in out


@pytest.mark.parametrize(("name", "key", "secret"), [("key_word_run", "token=", "1"),
                                                     ("flag_run", "--password ", "hunter2"),
                                                     ("mysql_words", "-p", "S3cret")])
def test_the_secret_that_ends_a_reported_shape_is_replaced(name: str, key: str,
                                                           secret: str) -> None:
    text = SHAPES[name](SIZE)
    assert text.endswith(key + secret)
    assert redact(text).endswith(key + REDACTED)
