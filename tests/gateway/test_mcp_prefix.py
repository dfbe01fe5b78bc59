"""Requests that offer MCP tools keep a byte-stable prefix from turn to turn, so prompt
caching holds: the tools sorted and unchanged, every request beginning with the one
before it, across tool calls of every kind and across a restart of the server (issue 39,
point 5; bench/mcp_prefix.py measures the same over a long conversation)."""

from __future__ import annotations

import json

from tests.harness.gateway import close, config_for, started_gateway
from tests.harness.mcp import ASK, asking, kill, prefix_kept, read_pid, say_and_wait, stdio_entry
from tests.harness.platform import RecordingPlatform
from tests.harness.waiting import eventually

TURNS = [f"{ASK}test__add {json.dumps({'a': 1, 'b': 2})}", "and now something else",
         f"{ASK}test__long_text {json.dumps({'chars': 120_000})}",
         f"{ASK}test__image {{}}", "thanks", f"{ASK}test__raise {{}}"]


async def test_mcp_tools_keep_the_cached_prefix_across_turns_and_a_restart(
        tmp_path, fake_anthropic):
    fake_anthropic.responder = asking
    fake_anthropic.min_cacheable_tokens = 64  # a short conversation is cached too
    config = config_for(tmp_path, fake_anthropic.url, model={
        "provider": "anthropic", "name": "claude-test-model", "api_key": "test-key",
        "vision": True}, tools={"mcp": {"test": stdio_entry(tmp_path / "mcp.pid",
                                                           chats=["test:*"])}})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    connection = gw.conversations.mcp.connections["test"]  # type: ignore[union-attr]
    try:
        for text in TURNS:
            await say_and_wait(platform, text)
        kill(read_pid(tmp_path / "mcp.pid") or 0)
        await eventually(lambda: connection.starts == 2 and connection.state == "up",
                         timeout=30)
        for text in TURNS[:2]:
            await say_and_wait(platform, text)
    finally:
        await close(gw)

    bodies = [c.json for c in fake_anthropic.calls_to("/v1/messages") if c.json]
    names = [t["name"] for t in bodies[0]["tools"]]
    assert [n for n in names if n.startswith("test__")] == [
        "test__add", "test__image", "test__long_text", "test__raise", "test__sleep",
        "test__weather"] and names == sorted(names)
    assert len({json.dumps(b["tools"]) for b in bodies}) == 1
    kept, pairs = prefix_kept(bodies)
    assert (kept, pairs) == (len(bodies) - 1, len(bodies) - 1)
    # The fake's cache agrees: once the prompt is long enough to be cached, each request
    # reads all that the one before it read and wrote (nothing was ever invalidated).
    usages = fake_anthropic.usages
    first = next(i for i, u in enumerate(usages) if u["cache_creation_input_tokens"])
    assert first < 6 and len(usages) > first + 6
    for before, after in zip(usages[first:], usages[first + 1:], strict=False):
        assert after["cache_read_input_tokens"] >= (
            before["cache_read_input_tokens"] + before["cache_creation_input_tokens"])
