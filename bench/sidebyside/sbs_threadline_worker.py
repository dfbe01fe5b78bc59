#!/usr/bin/env python3
"""Threadline side of run.py (run with the project's venv interpreter).

    SBS_THREADLINE_SRC=PROJECT_ROOT .venv/bin/python sbs_threadline_worker.py

Construction as in bench/compress.py: ContextCompressor with EngineSettings for a 200K window
and the shipped defaults (threshold 0.50, target_ratio 0.20, protect_last_n 20,
max_output_tokens 1024 = gateway config default), an instant Provider standing in for the
summary model (the gateway's `auxiliary.compression.provider: auto` means the main provider,
so its 200K window is the summary window). The system prompt is the first message of the
list, as the gateway stores and holds it. The store is SqliteSessionStore on a temp file,
used through its public methods only; "SQL alone" runs `queries.TIP` on a plain sqlite3
connection to the same file.
"""

from __future__ import annotations

import asyncio
import copy
import gc
import os
import shutil
import sqlite3
import sys
import tempfile
import time
from typing import Any

_HERE = os.path.dirname(os.path.abspath(__file__))
_SRC = os.path.abspath(os.environ.get("SBS_THREADLINE_SRC",
                                      os.path.join(_HERE, os.pardir, os.pardir)))
sys.path.insert(0, _SRC)
sys.path.insert(0, _HERE)

import logging  # noqa: E402

import sbs_proto as P  # noqa: E402
import sbs_transcript as T  # noqa: E402

import agent.compression.compressor as cc  # noqa: E402
from agent.compression import render  # noqa: E402
from agent.context_engine import EngineSettings  # noqa: E402
from agent.providers import anthropic as tl_anthropic  # noqa: E402
from agent.providers.base import Completion, Provider, ProviderSettings  # noqa: E402
from agent.tokens import TokenCache  # noqa: E402
from agent.usage import CanonicalUsage  # noqa: E402
from storage.models import Compaction, NewMessage, TurnRecord  # noqa: E402
from storage.sqlite import SqliteSessionStore, queries  # noqa: E402

logging.disable(logging.WARNING)

MAX_OUTPUT_TOKENS = 1024  # gateway config: ModelConfig.max_output_tokens default

_CALLS: list[dict[str, int]] = []


class InstantProvider(Provider):
    """Answers every summary request at once with the shared fixed summary."""

    kind = "openai"

    def __init__(self) -> None:
        super().__init__(ProviderSettings(provider="openai", model="instant",
                                          context_length=P.CONTEXT_LENGTH,
                                          max_output_tokens=MAX_OUTPUT_TOKENS))

    async def complete(self, messages: list[dict[str, Any]], *, tools: Any = None,
                       max_tokens: int | None = None, temperature: float | None = None,
                       on_text: Any = None) -> Completion:
        sizes = [len(m.get("content") or "") for m in messages]
        user = [len(m.get("content") or "") for m in messages if m.get("role") == "user"]
        _CALLS.append({"prompt_chars": max(user or [0]), "request_chars": sum(sizes)})
        return Completion({"role": "assistant", "content": P.FIXED_SUMMARY},
                          CanonicalUsage(input_tokens=1, output_tokens=1), self.model)


def _engine() -> cc.ContextCompressor:
    provider = InstantProvider()
    return cc.ContextCompressor(EngineSettings(context_length=P.CONTEXT_LENGTH,
                                               max_output_tokens=MAX_OUTPUT_TOKENS,
                                               summary_provider=provider,
                                               main_provider=provider))


_LOOP = asyncio.new_event_loop()
asyncio.set_event_loop(_LOOP)
_DATA: dict[int, dict[str, Any]] = {}
_TOOLS = T.tool_schemas(P.N_TOOLS, T.DEFAULT_SEED)
_DB: dict[Any, Any] = {}


def _run(coro: Any) -> Any:
    return _LOOP.run_until_complete(coro)


def info() -> dict[str, Any]:
    import importlib.metadata as md
    import platform
    eng = _engine()
    try:
        version = md.version("threadline")
    except md.PackageNotFoundError:
        version = None
    return {"side": "threadline", "src": _SRC, "version": version,
            "python": platform.python_version(), "module": cc.__file__,
            "render_loop": render.__file__,  # compiled by setup.py, or the plain source
            "threshold_percent": eng.threshold_percent, "threshold_tokens": eng.threshold_tokens,
            "tail_token_budget": eng.tail_token_budget, "effective_window": eng.effective_window,
            "max_output_tokens": MAX_OUTPUT_TOKENS, "protect_first_n": eng.protect_first_n,
            "protect_last_n": eng.protect_last_n, "has_cache_marker_placement": False}


def prepare(n: int, seed: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    msgs = T.generate_transcript(n, None, seed)
    gen_s = time.perf_counter() - t0
    eng = _engine()
    live = eng.new_transcript(msgs, tools=_TOOLS)
    _DATA[n] = {"msgs": msgs, "eng": eng, "live": live}
    return {"digest": P.transcript_digest(msgs), "generate_s": gen_s,
            "request_estimate_tokens": eng.estimate_request(live)}


def drop(n: int) -> dict[str, Any]:
    _DATA.pop(n, None)
    gc.collect()
    return {}


async def _timed_await(coro_fn: Any) -> dict[str, Any]:
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    out = await coro_fn()
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "out": out}


def compress(n: int, variant: str) -> dict[str, Any]:
    msgs = _DATA[n]["msgs"]
    eng = _engine()
    data = copy.deepcopy(msgs)
    res: dict[str, Any] = {}
    if variant == "warm":  # as the gateway holds it: ingested into the engine's Transcript
        # Estimate + redaction alone (no summarizer rendering), on a copy and a bare cache.
        plain, bare = copy.deepcopy(msgs), TokenCache()
        res["estimate_redact_wall_s"] = P.timed(
            lambda: [bare.ingest(m) for m in plain])["wall_s"]
        box: dict[str, Any] = {}
        ing = P.timed(lambda: box.__setitem__("live", eng.new_transcript(data)))
        res["ingest_wall_s"], res["ingest_cpu_s"] = ing["wall_s"], ing["cpu_s"]
        data = box["live"]
    elif variant != "cold":  # plain dicts, empty caches
        raise ValueError(variant)
    _CALLS.clear()
    t = _run(_timed_await(lambda: eng.compress(data)))
    out = t.pop("out")
    report = eng.last_report
    assert report is not None and report.outcome == "compressed", report
    res.update(t)
    res["result"] = {
        "messages_in": len(msgs), "messages_after": len(out),
        "summary_calls": len(_CALLS), "report_chunks": report.summary_chunks,
        "largest_prompt_chars": max((c["prompt_chars"] for c in _CALLS), default=0),
        "largest_request_chars": max((c["request_chars"] for c in _CALLS), default=0),
        "total_request_chars": sum(c["request_chars"] for c in _CALLS),
        "outcome": report.outcome, "tokens_before": report.tokens_before,
        "tokens_after": report.tokens_after, "chars_after": P.output_chars(out),
    }
    return res


def fit(n: int, variant: str, loops: int) -> dict[str, Any]:
    d = _DATA[n]
    eng, live, msgs = d["eng"], d["live"], d["msgs"]
    if variant == "transcript":  # the live path: O(1) running total on the Transcript
        return P.per_call(lambda: eng.fits(live), loops)
    if variant == "preflight":  # what the agent calls before every model call
        return P.per_call(lambda: eng.should_compress_preflight(live), loops)
    if variant == "list_warm":  # a plain list, per-message estimates already cached
        return P.per_call(lambda: eng.fits(msgs, _TOOLS), loops)
    if variant == "list_cold":  # a plain list, fresh engine: every message estimated
        samples = []
        for _ in range(loops):
            e = _engine()
            e.token_cache.tools_tokens(_TOOLS)  # tool-schema estimate cached, like Hermes' warm
            samples.append(P.timed(lambda e=e: e.fits(msgs, _TOOLS)))
        return {"wall_s": sum(s["wall_s"] for s in samples) / loops,
                "cpu_s": sum(s["cpu_s"] for s in samples) / loops, "loops": loops}
    raise ValueError(variant)


def cache_marker(n: int, variant: str, loops: int) -> dict[str, Any]:
    msgs = _DATA[n]["msgs"]
    if variant == "to_anthropic":  # NOT marker placement: the whole format conversion
        return P.per_call(lambda: tl_anthropic.to_anthropic(msgs), loops)
    raise ValueError(variant)


def _store() -> SqliteSessionStore:
    if "store" not in _DB:
        tmp = tempfile.mkdtemp(prefix="sbs-threadline-store-")
        _DB["tmp"] = tmp
        store = SqliteSessionStore(os.path.join(tmp, "bench.db"))
        _run(store.initialize())
        _DB["store"] = store
        _DB["sync"] = sqlite3.connect(os.path.join(tmp, "bench.db"))
    return _DB["store"]


def _chat_key(depth: int) -> str:
    return f"bench:{depth}"


def tip_build(depth: int, msgs: int) -> dict[str, Any]:
    store = _store()

    def batch(tag: str) -> list[NewMessage]:
        out = []
        for i in range(msgs):
            text = f"message {i} of {tag} " * 5
            out.append(NewMessage({"role": "user" if i % 2 == 0 else "assistant",
                                   "content": text}, tokens=len(text) // 4))
        return out

    async def build() -> list[str]:
        root = await store.create_root_session(_chat_key(depth), model="m", system_prompt="s")
        await store.append_messages(root.id, batch(f"s{depth}_0000"))
        ids = [root.id]
        for k in range(1, depth):
            rec = await store.record_turn(ids[-1], TurnRecord(
                compaction=Compaction(messages=tuple(batch(f"s{depth}_{k:04d}")))))
            ids.append(rec.id)
        assert await store.get_compression_tip(ids[0]) == ids[-1]
        live = await store.live_session(_chat_key(depth))
        assert live is not None and live.id == ids[-1], (live, ids[-1])
        return ids

    t0 = time.perf_counter()
    ids = _run(build())
    _DB[depth] = ids
    jm = _DB["sync"].execute("PRAGMA journal_mode").fetchone()[0]
    return {"build_s": time.perf_counter() - t0, "sessions": depth, "journal_mode": jm}


def tip(depth: int, variant: str, calls: int) -> dict[str, Any]:
    """``calls`` individually timed calls; returns their wall times (seconds)."""
    store = _store()
    root = _DB[depth][0]
    pc = time.perf_counter
    if variant == "tip_sql":  # the store's recursive SQL alone, on a plain sqlite3 connection
        sync, params = _DB["sync"], queries.chain_params(root)
        assert sync.execute(queries.TIP, params).fetchone()[0] == _DB[depth][-1]
        gc.collect()
        times = []
        for _ in range(calls):
            t0 = pc()
            sync.execute(queries.TIP, params).fetchone()
            times.append(pc() - t0)
        return {"times": times}
    if variant == "tip":
        def fn() -> Any:
            return store.get_compression_tip(root)
    elif variant == "live":  # the chat's live session, as the gateway reads it every turn
        chat_key = _chat_key(depth)

        def fn() -> Any:
            return store.live_session(chat_key)
        assert _run(fn()).id == _DB[depth][-1]  # warm: any in-process cache is filled
    else:
        raise ValueError(variant)

    async def run() -> list[float]:
        gc.collect()
        times = []
        for _ in range(calls):
            t0 = pc()
            await fn()
            times.append(pc() - t0)
        return times

    return {"times": _run(run())}


def _close() -> None:
    """Shut the store down (its connection thread must end), then remove the temp files."""
    store = _DB.pop("store", None)
    if store is not None:
        _run(store.shutdown())
        _DB.pop("sync").close()
    _LOOP.close()
    if "tmp" in _DB:
        shutil.rmtree(_DB["tmp"], ignore_errors=True)


if __name__ == "__main__":
    try:
        P.serve({"info": info, "prepare": prepare, "drop": drop, "compress": compress,
                 "fit": fit, "cache_marker": cache_marker, "tip_build": tip_build, "tip": tip})
    finally:
        _close()
