"""`history_search`: the chat's own history, compacted originals included.

Nothing is deleted by a compaction: the original turns stay in the store. This tool lets
the model find them again. The host hands in a search function already scoped to the
chat, so one chat can never read another's history.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from agent.tools.registry import Tool

SNIPPETS = 8


@dataclass(frozen=True)
class Found:
    """One hit: where it came from, and a short piece of text around the match."""

    session_id: str
    seq: int
    role: str
    snippet: str
    at: float


Search = Callable[[str, int], Awaitable[Sequence[Found]]]


def history_search(search: Search) -> Tool:
    async def run(arguments: dict[str, Any]) -> str:
        query = str(arguments.get("query") or "").strip()
        if not query:
            return "Error: give the words to search for in `query`."
        limit = min(max(int(arguments.get("limit") or SNIPPETS), 1), 20)
        hits = await search(query, limit)
        if not hits:
            return f"Nothing in this chat's history matches {query!r}."
        lines = [f"{len(hits)} match(es) for {query!r} in this chat's history:"]
        for hit in hits:
            when = datetime.fromtimestamp(hit.at, UTC).strftime("%Y-%m-%d %H:%M")
            lines.append(f"- {hit.role}, {when} UTC (session {hit.session_id}, message "
                         f"{hit.seq}): {hit.snippet}")
        return "\n".join(lines)

    return Tool("history_search", "Search this conversation's full history, including "
                "earlier turns that were condensed into a summary, and return short "
                "snippets with where they came from. Use it when a detail from earlier is "
                "missing.", run, {
                    "type": "object", "required": ["query"], "properties": {
                        "query": {"type": "string", "description": "words to look for"},
                        "limit": {"type": "integer", "minimum": 1, "maximum": 20,
                                  "description": "how many snippets (default 8)"}}})
