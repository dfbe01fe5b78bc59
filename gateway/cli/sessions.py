"""`threadline sessions ...`: read-only views of the store, as text or JSON."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from agent.attachments.files import AttachmentFiles
from agent.attachments.parts import attachments_in
from agent.messages import content_text
from gateway.config import Config
from storage.base import SessionStore
from storage.models import SessionRecord, UsageTotals


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ts)) if ts else "-"


def _session_dict(s: SessionRecord, usage: UsageTotals) -> dict[str, Any]:
    """One session and the tokens spent in it (its own calls, not its chain's)."""
    return {
        "id": s.id, "chat_key": s.chat_key, "parent_session_id": s.parent_session_id,
        "kind": s.kind, "end_reason": s.end_reason, "started_at": s.started_at,
        "ended_at": s.ended_at, "message_count": s.message_count,
        "compression_count": s.compression_count, "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens, "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "reasoning_tokens": usage.reasoning_tokens, "calls": usage.calls, "model": s.model,
    }


def _dump(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def _attached(content: Any, files: AttachmentFiles | None) -> list[dict[str, Any]]:
    """Each attachment of a message with the file it is kept in (None once removed)."""
    out = []
    for part in attachments_in(content):
        path = files.path(str(part.get("file") or "")) if files else None
        out.append({"kind": part.get("kind"), "name": part.get("name"),
                    "mime": part.get("mime"), "bytes": part.get("bytes"),
                    "path": str(path) if path is not None and path.is_file() else None})
    return out


async def main(args: argparse.Namespace, config: Config) -> int:
    """Open the store read-only (a read never changes the file, nor upgrades it)."""
    from gateway.store_open import build_store

    store = build_store(config, "read")
    await store.initialize()
    try:
        return await run(store, args, AttachmentFiles(config.db_path.parent / "attachments"))
    finally:
        await store.shutdown()


async def run(store: SessionStore, args: argparse.Namespace,
              files: AttachmentFiles | None = None) -> int:
    action = args.action
    if action == "list":
        sessions = await store.list_sessions(args.chat_key)
        if args.json:
            usage = await store.usage_by_session([s.id for s in sessions])
            _dump([_session_dict(s, usage.get(s.id, UsageTotals())) for s in sessions])
            return 0
        print(f"{'id':34} {'chat':20} {'kind':11} {'ended':11} {'msgs':>5} {'in':>8} "
              f"{'out':>7}  started / parent")
        for s in sessions:
            print(f"{s.id:34} {s.chat_key:20} {s.kind:11} {s.end_reason or 'live':11} "
                  f"{s.message_count:>5} {s.input_tokens:>8} {s.output_tokens:>7}  "
                  f"{_when(s.started_at)}" + (f" <- {s.parent_session_id}"
                                              if s.parent_session_id else ""))
        return 0
    if action == "tip":
        if await store.get_session(args.session_id) is None:
            print(f"threadline: no session {args.session_id}", file=sys.stderr)
            return 1
        print(await store.get_compression_tip(args.session_id))
        return 0
    if action == "show":
        if await store.get_session(args.session_id) is None:
            print(f"threadline: no session {args.session_id}", file=sys.stderr)
            return 1
        history = await store.load_history(args.session_id)
        # A reply whose chunks have not all reached the platform yet.
        undelivered = await store.undelivered(
            [m.id for m in history if m.message.get("role") == "assistant"])
        if args.json:
            _dump([{"seq": m.seq, **m.message, "tokens": m.tokens, "answered": m.answered,
                    "undelivered": m.id in undelivered, "created_at": m.created_at,
                    "attached": _attached(m.message.get("content"), files)}
                   for m in history])
            return 0
        for m in history:
            role = m.message.get("role", "?")
            who = f" ({m.sender_name})" if m.sender_name and role == "user" else ""
            flag = " [unanswered]" if m.answered is False else ""
            flag += " [undelivered]" if m.id in undelivered else ""
            print(f"[{m.seq}] {role}{who}{flag}: {content_text(m.message.get('content'))}")
            for a in _attached(m.message.get("content"), files):
                kept = a["path"] or "(file no longer kept)"
                print(f"    attached {a['kind']}: {a['name']} ({a['mime']}, "
                      f"{a['bytes'] or 0:,} bytes) {kept}")
        return 0
    hits = await store.search(args.query, args.chat_key)
    for hit in hits:
        print(f"{hit.session_id} #{hit.seq} {hit.role} ({hit.chat_key}): {hit.snippet}")
    if not hits:
        print("no matches")
    return 0
