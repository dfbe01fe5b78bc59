"""Shared, stdlib-only pieces of the side-by-side benchmark (run.py beside this file).

Both workers (sbs_hermes_worker.py, sbs_threadline_worker.py) import this module; each runs
under its own interpreter because Hermes and Threadline both own the top-level names `agent`
and `gateway`.

Protocol: the orchestrator writes one JSON object per line to the worker's stdin
(``{"op": ..., ...}``); the worker answers one JSON line on a private copy of its original
stdout, so that anything the code under test prints goes to stderr and
cannot corrupt the channel.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

# The summariser stub's reply, identical on both sides.
FIXED_SUMMARY = "\n\n".join([
    "## Historical Task Snapshot\nUser asked: 'make the benchmark pass and report the numbers'",
    "## Goal\nKeep the synthetic service working while refactoring the cache layer.",
    "## Constraints & Preferences\n- Python 3.11\n- no new dependencies\n- keep public API stable",
    "## Completed Actions\n" + "\n".join(
        f"{i}. PATCH src/core/module_{i}.py:{10 * i} — renamed timeout to timeout_s [tool: patch]"
        for i in range(1, 41)
    ),
    "## Active State\n- cwd /workspace/project, branch feature/cache\n- tests 212/215 passing",
    "## Historical In-Progress State\nRe-running the integration suite after the last patch.",
    "## Blocked\nNone.",
    "## Key Decisions\n- Chose LRU over TTL eviction because entries are small and hot.",
    "## Resolved Questions\n- Q: does the queue retry? A: yes, 3 attempts with jitter.",
    "## Historical Pending User Asks\nNone.",
    "## Relevant Files\n" + "\n".join(f"- src/app/file_{i}.py — touched" for i in range(20)),
    "## Historical Remaining Work\nVerify the flaky test and update the changelog.",
    "## Critical Context\nError seen once: `TimeoutError: read timed out after 30s` in worker_7.",
])

CONTEXT_LENGTH = 200_000  # the main model's window on both sides
N_TOOLS = 40  # synthetic tool schemas sent with every request (transcript.tool_schemas)


def transcript_digest(messages: list[dict[str, Any]]) -> str:
    blob = json.dumps(messages, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()


def output_chars(messages: Any) -> int:
    """Neutral size of a compressor's output: content (text parts) + tool-call argument chars."""
    total = 0
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            total += len(c)
        elif isinstance(c, list):
            for part in c:
                if isinstance(part, dict):
                    total += len(part.get("text") or "")
                elif isinstance(part, str):
                    total += len(part)
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") if isinstance(tc, dict) else None
            if isinstance(fn, dict):
                total += len(fn.get("arguments") or "")
    return total


def timed(fn: Callable[[], Any]) -> dict[str, float]:
    """One call of ``fn`` after a full collection: wall and process-CPU seconds."""
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}


def per_call(fn: Callable[[], Any], loops: int) -> dict[str, float]:
    """Mean seconds per call over ``loops`` back-to-back calls (one sample)."""
    gc.collect()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(loops):
        fn()
    return {"wall_s": (time.perf_counter() - t0) / loops,
            "cpu_s": (time.process_time() - c0) / loops, "loops": loops}


def serve(handlers: dict[str, Callable[..., dict[str, Any]]]) -> None:
    """Answer requests until stdin closes."""
    reply_fd = os.dup(1)
    os.dup2(2, 1)  # anything printed by the code under test goes to stderr
    sys.stdout = sys.stderr
    out = os.fdopen(reply_fd, "w", buffering=1, encoding="utf-8")
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        try:
            handler = handlers[req.pop("op")]
            reply = {"ok": True, "result": handler(**req)}
        except Exception as exc:  # report, keep serving
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                     "traceback": traceback.format_exc()}
        out.write(json.dumps(reply, default=str) + "\n")
