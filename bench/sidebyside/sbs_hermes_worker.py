#!/usr/bin/env python3
"""Hermes Agent 0.19.0 side of run.py (run with the Hermes venv's interpreter).

    HERMES_VENV/bin/python sbs_hermes_worker.py   # then JSON requests on stdin (sbs_proto)

ContextCompressor for a 200K window with DEFAULT_CONFIG["compression"] values, the
summariser seam ``agent.context_compressor.call_llm`` replaced by an instant stub, the
system prompt kept outside the message list (the agent prepends it at request time).
Compression chains are built through Hermes' own API: the gateway's SessionStore opens the
chat's root session (as for a first message), then SessionDB ends each session with
end_reason "compression" and creates its continuation, as the agent does when it compresses.
HERMES_HOME points at a temporary directory, removed at exit.
"""

from __future__ import annotations

import copy
import gc
import os
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

_HOME = tempfile.mkdtemp(prefix="sbs-hermes-home-")
os.environ["HERMES_HOME"] = _HOME
os.environ.setdefault("HERMES_REDACT_SECRETS", "true")  # Hermes default: on
import atexit  # noqa: E402

atexit.register(shutil.rmtree, _HOME, True)

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

import logging  # noqa: E402

import sbs_proto as P  # noqa: E402
import sbs_transcript as T  # noqa: E402

# Hermes' own top-level `agent` and `gateway`, not the project's (kept out of isort).
# isort: off
import agent.context_compressor as cc  # noqa: E402
from agent.model_metadata import estimate_request_tokens_rough  # noqa: E402
from agent.prompt_caching import apply_anthropic_cache_control  # noqa: E402
from gateway.config import GatewayConfig, Platform  # noqa: E402
from gateway.session import SessionSource, SessionStore  # noqa: E402
from hermes_state import SessionDB  # noqa: E402
# isort: on

logging.disable(logging.WARNING)

_CALLS: list[dict[str, int]] = []


def _fake_call_llm(**kwargs: Any) -> Any:
    msgs = kwargs.get("messages") or []
    sizes = [len(m.get("content") or "") for m in msgs]
    _CALLS.append({"prompt_chars": max(sizes or [0]), "request_chars": sum(sizes)})
    message = types.SimpleNamespace(content=P.FIXED_SUMMARY, role="assistant")
    return types.SimpleNamespace(choices=[types.SimpleNamespace(message=message)])


cc.call_llm = _fake_call_llm

_DATA: dict[int, dict[str, Any]] = {}
_TOOLS = T.tool_schemas(P.N_TOOLS, T.DEFAULT_SEED)
_DB: dict[Any, Any] = {}


def _new_compressor() -> cc.ContextCompressor:
    return cc.ContextCompressor(
        model="anthropic/claude-sonnet-4.6", threshold_percent=0.50, protect_first_n=3,
        protect_last_n=20, summary_target_ratio=0.20, quiet_mode=True,
        config_context_length=P.CONTEXT_LENGTH, provider="anthropic",
        abort_on_summary_failure=False)


def info() -> dict[str, Any]:
    import importlib.metadata as md
    import platform
    probe = _new_compressor()
    return {"side": "hermes", "version": md.version("hermes-agent"),
            "python": platform.python_version(), "module": cc.__file__,
            "threshold_percent_effective": probe.threshold_percent,
            "threshold_tokens": probe.threshold_tokens,
            "tail_token_budget": probe.tail_token_budget,
            "max_summary_tokens": probe.max_summary_tokens,
            "protect_first_n": probe.protect_first_n, "protect_last_n": probe.protect_last_n}


def prepare(n: int, seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    msgs = T.generate_transcript(n, None, seed)
    gen_s = time.perf_counter() - t0
    conv = msgs[1:]
    sp = msgs[0]["content"]
    est = estimate_request_tokens_rough(conv, system_prompt=sp, tools=_TOOLS)
    _DATA[n] = {"msgs": msgs, "conv": conv, "sp": sp, "est": est}
    return {"digest": P.transcript_digest(msgs), "generate_s": gen_s,
            "stats": T.transcript_stats(msgs), "request_estimate_tokens": est}


def drop(n: int) -> dict[str, Any]:
    _DATA.pop(n, None)
    gc.collect()
    return {}


def compress(n: int, variant: str = "default") -> dict[str, Any]:
    d = _DATA[n]
    comp = _new_compressor()
    data = copy.deepcopy(d["conv"])
    _CALLS.clear()
    box: dict[str, Any] = {}
    t = P.timed(lambda: box.__setitem__("out", comp.compress(data, current_tokens=d["est"])))
    out = box["out"]
    t["result"] = {
        "messages_in": len(d["conv"]) + 1, "messages_after": len(out) + 1,  # + system prompt
        "summary_calls": len(_CALLS),
        "largest_prompt_chars": max((c["prompt_chars"] for c in _CALLS), default=0),
        "total_request_chars": sum(c["request_chars"] for c in _CALLS),
        "fallback_used": comp._last_summary_fallback_used,
        "aborted": comp._last_compress_aborted,
        # + the system prompt, which Hermes keeps outside the list
        "chars_after": P.output_chars(out) + len(d["sp"]),
    }
    return t


def fit(n: int, variant: str, loops: int) -> dict[str, Any]:
    d = _DATA[n]
    comp = _new_compressor()
    conv, sp = d["conv"], d["sp"]
    if variant == "request":  # the preflight: full request estimate, then the threshold test
        return P.per_call(lambda: comp.should_compress(
            estimate_request_tokens_rough(conv, system_prompt=sp, tools=_TOOLS)), loops)
    raise ValueError(variant)


def cache_marker(n: int, variant: str, loops: int) -> dict[str, Any]:
    d = _DATA[n]
    api = [{"role": "system", "content": d["sp"]}] + d["conv"]
    native = {"native": True, "envelope": False}[variant]
    return P.per_call(lambda: apply_anthropic_cache_control(api, cache_ttl="5m",
                                                            native_anthropic=native), loops)


def _source(depth: int) -> SessionSource:
    return SessionSource(platform=Platform.TELEGRAM, chat_id=f"bench{depth}", chat_type="dm",
                         user_id="7")


def tip_build(depth: int, msgs: int) -> dict[str, Any]:
    if "db" not in _DB:
        _DB["db"] = SessionDB(Path(_HOME) / "state.db")
        _DB["gw"] = SessionStore(Path(_HOME) / "sessions", GatewayConfig())
    db, gw = _DB["db"], _DB["gw"]
    t0 = time.perf_counter()
    ids = [gw.get_or_create_session(_source(depth)).session_id]  # the chat's root session
    for k in range(depth):
        sid = ids[-1]
        for i in range(msgs):
            db.append_message(sid, "user" if i % 2 == 0 else "assistant",
                              f"message {i} of s{depth}_{k:04d} " * 5)
        if k < depth - 1:
            db.end_session(sid, "compression")
            ids.append(f"s{depth}_{k + 1:04d}")
            db.create_session(ids[-1], "telegram", parent_session_id=sid)
    assert db.get_compression_tip(ids[0]) == ids[-1], (db.get_compression_tip(ids[0]), ids[-1])
    _DB[depth] = ids
    return {"build_s": time.perf_counter() - t0, "sessions": depth}


def tip(depth: int, variant: str, calls: int) -> dict[str, Any]:
    """``calls`` individually timed calls; returns their wall times (seconds)."""
    db, gw = _DB["db"], _DB["gw"]
    ids = _DB[depth]
    if variant == "tip":
        def fn() -> Any:
            return db.get_compression_tip(ids[0])
    elif variant == "live":  # the gateway's per-message lookup of the chat's live session
        source = _source(depth)

        def fn() -> Any:
            return gw.get_or_create_session(source)
        assert fn().session_id == ids[-1]  # warm: the routing entry now names the tip
    else:
        raise ValueError(variant)
    gc.collect()
    times = []
    pc = time.perf_counter
    for _ in range(calls):
        t0 = pc()
        fn()
        times.append(pc() - t0)
    return {"times": times}


if __name__ == "__main__":
    P.serve({"info": info, "prepare": prepare, "drop": drop, "compress": compress, "fit": fit,
             "cache_marker": cache_marker, "tip_build": tip_build, "tip": tip})
