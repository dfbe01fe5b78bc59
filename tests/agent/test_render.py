"""What the summarizer reads of each turn (agent/compression/render.py): redacted as it is
rendered, cut only after redaction, and the same whether warmed at ingest or rendered cold."""

from __future__ import annotations

import copy
import importlib.machinery
import json
import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.compression import render
from agent.compression.render import (
    BODY_LIMIT,
    HEAD_KEEP,
    KEY_ARG_CHARS,
    TurnRenderer,
    key_arguments,
    truncate_middle,
)
from agent.redact import REDACTED
from agent.tokens import IMAGE_TOKENS, Message, TokenCache, estimate_message
from tests.harness.transcripts import assistant, call, result, user

KEY = "sk-" + "AbCdEfGhIjKlMnOpQrStUvWx0123456789abcdefghijkl"
GITHUB = "ghp_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"


def cold(msgs: list[Message]) -> list[str]:
    pieces, tokens = TurnRenderer(TokenCache()).render(msgs)
    assert tokens == TokenCache().total(msgs)  # counted while rendered
    return pieces


def warm(msgs: list[Message]) -> list[str]:
    cache = TokenCache()
    renderer = TurnRenderer(cache)
    cache.warmers.append(renderer.warm)
    for msg in msgs:
        cache.ingest(msg)
    assert all(cache.is_warm(m, "piece") for m in msgs)  # nothing left for render to do
    pieces, tokens = renderer.render(msgs)
    assert tokens is None  # counted when they were cached: nothing to count again
    return pieces


def straddling(at: int, total: int, prefix: str = "") -> str:
    """A `total`-character text whose cut at `at` characters would keep 5 of the key's."""
    head = prefix + "x" * (at - 6 - len(prefix)) + " "
    return head + KEY + " " + "y" * (total - len(head) - len(KEY) - 1)


def test_a_secret_across_a_cut_is_redacted_before_the_cut() -> None:
    long = straddling(HEAD_KEEP, BODY_LIMIT + 2_000)
    odd = straddling(KEY_ARG_CHARS - 20, 400, "not json ")  # cut for the result's header
    msgs = [user(long),
            assistant(None, [{"id": "c1", "type": "function",
                              "function": {"name": "run", "arguments": odd}},
                             {"id": "c2", "type": "function",
                              "function": {"name": "write", "arguments": long}}]),
            result("c1", long)]
    pieces = cold(msgs)
    assert all("omitted" in p for p in pieces)  # every one of them was cut
    assert [p for p in pieces if "sk-Ab" in p] == []


def test_a_secret_spelled_in_json_escapes_is_redacted_where_the_header_decodes_it() -> None:
    escaped = KEY.replace("s", "\\u0073", 1)  # the raw arguments never spell "sk-"
    args = '{"cmd": "export OPENAI=' + escaped + '"}'
    msgs = [assistant(None, [{"id": "c1", "type": "function",
                              "function": {"name": "shell", "arguments": args}}]),
            result("c1", "done")]
    header = cold(msgs)[1].splitlines()[0]
    assert header.startswith('### tool result: shell (cmd="export OPENAI=')
    assert KEY not in header and REDACTED in header


def test_warmed_and_cold_renderings_are_the_same_text() -> None:
    msgs = [user(f"my key is {KEY}, keep it"),
            assistant("checking", [call("c1", "fetch", url="https://h/x", token=GITHUB),
                                   call("c2", "read_file", path="/etc/app.conf")]),
            result("c1", f"Authorization: Bearer {GITHUB}\nok"),
            result("c2", "password = hunter2\n" + "z" * (BODY_LIMIT + 50) + " " + KEY),
            assistant("plain answer, nothing secret"),
            user([{"type": "text", "text": "a part with --password s3cret"}])]
    assert warm(copy.deepcopy(msgs)) == cold(copy.deepcopy(msgs))
    pieces = cold(msgs)
    assert all(KEY not in p and GITHUB not in p and "hunter2" not in p for p in pieces)
    assert "s3cret" not in pieces[-1]


@pytest.mark.parametrize("raw", [
    '{"path": "/a", "n": 2}', ' \n{"path": "/a"} \t', '{"path": "/a"} x', '{"path": "/a"}{"b": 1}',
    "[1, 2]", "not json", "", '"just text"', '{"path": NaN}', '{"a": 1', " ",
    # Where orjson and json part: integers past 64 bits (orjson reads a float), floats
    # past the range, lone surrogate escapes, nesting past orjson's depth or json's.
    '{"n": 123456789012345678901234567890}', '{"n": -9223372036854775809, "m": 1}',
    '{"x": 1e400}', '{"x": 1.5, "y": 2, "z": -0.0}', '{"s": "\\ud800"}',
    '{"a": "\\u00e9\\"", "b": true, "c": null, "d": 1}', "[" * 1_500 + "]" * 1_500,
    "[" * 5_000 + "]" * 5_000])
def test_key_arguments_read_exactly_what_json_accepts(raw: str) -> None:
    try:
        parsed = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON: the header shows the raw text, cut short
        expected = truncate_middle(raw, KEY_ARG_CHARS, KEY_ARG_CHARS - 20, 20)
    else:
        expected = key_arguments(parsed) if isinstance(parsed, dict) else ""
    assert key_arguments(raw) == expected
    if raw.startswith('{"n": 1234'):
        assert expected == "n=123456789012345678901234567890"


_TEXT = st.sampled_from(["", "hi", "x" * 37, "z" * (BODY_LIMIT + 3)])
_PART = st.one_of(
    _TEXT, st.none(), st.integers(0, 9),
    st.builds(lambda t: {"type": "text", "text": t}, _TEXT),
    st.just({"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}),
    st.just({"type": "attachment", "kind": "file", "name": "notes.txt", "text": "abc" * 9}),
    st.builds(lambda t: {"type": "tool_result", "content": t}, _TEXT),
    st.builds(lambda t: {"type": "tool_use", "input": {"q": t}}, _TEXT))
_CALL = st.one_of(
    st.builds(lambda i, name, args: {"id": i, "type": "function",
                                     "function": {"name": name, "arguments": args}},
              st.sampled_from(["c1", "", None]), st.sampled_from(["run", "", None]),
              st.one_of(st.sampled_from(['{"path": "/a"}', "", "not json", '{"k": "v"' * 900]),
                        st.none(), st.just({"path": "/a", "n": 3}))),
    st.just({"id": "c2"}), st.just("not a call"), st.just({"function": "not a dict"}))
_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "tool", "system", None, "developer"])},
    optional={"content": st.one_of(_TEXT, st.none(), st.lists(_PART, max_size=4)),
              "tool_calls": st.one_of(st.none(), st.lists(_CALL, max_size=3)),
              "tool_call_id": st.sampled_from(["c1", "call_000123", ""])})


@settings(max_examples=300, deadline=None)
@given(st.lists(_MESSAGE, min_size=1, max_size=6), st.sampled_from([IMAGE_TOKENS, 765, 20]))
def test_a_cold_span_is_counted_as_each_message_is_estimated(msgs: list[Message],
                                                             image_cost: int) -> None:
    # A cold span's count comes from the renderer's own reading of each message
    # (raw_pieces), not from estimate_message: the two must never part.
    cache = TokenCache(image_cost=image_cost)
    pieces, tokens = TurnRenderer(cache).render(msgs)
    assert tokens == sum(estimate_message(m, image_cost) for m in msgs)
    assert len(pieces) == len(msgs)


def _render_source() -> types.ModuleType:
    """render.py run as plain Python, whatever setup.py compiled from it."""
    loader = importlib.machinery.SourceFileLoader(
        "render_source", str(Path(render.__file__ or "").with_name("render.py")))
    module = types.ModuleType(loader.name)
    loader.exec_module(module)
    return module


_SOURCE = _render_source()
_ARGUMENTS = st.one_of(
    st.text(max_size=40), st.none(), st.integers(),
    st.dictionaries(st.text(max_size=5), st.one_of(
        st.text(max_size=130), st.integers(), st.floats(), st.booleans(), st.none(),
        st.lists(st.integers(), max_size=2)), max_size=5).map(json.dumps))


@settings(max_examples=300, deadline=None)
@given(st.lists(_MESSAGE, min_size=1, max_size=6), st.sampled_from([IMAGE_TOKENS, 765, 0]),
       st.lists(_ARGUMENTS, max_size=4))
def test_the_compiled_render_loop_renders_as_its_source_does(
        msgs: list[Message], image_cost: int, arguments: list[object]) -> None:
    # setup.py compiles render.py with C types from render.pxd (docs/architecture.md,
    # "Compiled modules"); the plain source is the reference for what the loop means.
    calls: dict[str, str] = {}
    source_calls: dict[str, str] = {}
    assert render.raw_pieces(msgs, calls, image_cost) == _SOURCE.raw_pieces(
        msgs, source_calls, image_cost)
    assert calls == source_calls
    for raw in arguments:
        assert render.key_arguments(raw) == _SOURCE.key_arguments(raw)
