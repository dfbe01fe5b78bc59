"""The tools a chat's model may call (docs/architecture.md, "Tools")."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agent.context_engine import ContextEngine
from agent.tools.budget import OutputBudget
from agent.tools.builtin import Found, history_search
from agent.tools.registry import Tool, ToolRegistry, ToolSource, engine_tools
from storage.base import SessionStore


def chat_tools(store: SessionStore, chat_key: str, engine: ContextEngine,
               budget: OutputBudget | None, plugins: Sequence[Tool],
               sources: Iterable[ToolSource] = ()) -> ToolRegistry:
    """History search over this chat only, reading saved outputs back, the engine's own
    tools and installed plugins; and what `sources` offer at each request (MCP servers'
    tools, while they are connected)."""

    async def search(query: str, limit: int) -> list[Found]:
        # Earlier tool results would echo old searches back, and a message carried
        # verbatim into a continuation is stored twice: keep one of each text.
        hits = await store.search(query, chat_key=chat_key, limit=limit * 4)
        found, seen = [], set()
        for h in hits:
            if h.role != "tool" and h.snippet not in seen:
                seen.add(h.snippet)
                found.append(Found(h.session_id, h.seq, h.role, h.snippet, h.created_at))
        return found[:limit]

    tools = [history_search(search), *engine_tools(engine), *plugins]
    if budget is not None:
        tools.append(budget.reader())
    return ToolRegistry(tools, sources)
