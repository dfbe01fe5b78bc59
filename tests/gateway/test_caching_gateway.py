"""Prompt caching end to end: a Claude conversation through the gateway and the real
Anthropic SDK reads its prefix from the fake's honest cache on every turn, compactions
included; other models carry no markers."""

from __future__ import annotations

from tests.harness.gateway import close, config_for, started_gateway, summarizing_responder
from tests.harness.platform import RecordingPlatform
from tests.harness.witness import WitnessAnthropic


def markers(value) -> int:
    if isinstance(value, dict):
        return ("cache_control" in value) + sum(markers(v) for v in value.values())
    if isinstance(value, list):
        return sum(markers(v) for v in value)
    return 0


async def converse(tmp_path, model_name: str, *, ttl: str = "5m"):
    fake = WitnessAnthropic(responder=summarizing_responder, api_key="k",
                            min_cacheable_tokens=64)
    await fake.start()
    config = config_for(tmp_path, fake.url, model={
        "provider": "anthropic", "name": model_name, "api_key": "k", "context_length": 8192},
        compression={"protect_last_n": 4}, prompt_caching={"cache_ttl": ttl})
    platform = RecordingPlatform()
    gw = await started_gateway(config, [platform])
    try:
        said = [f"note {i}: " + "the tide comes in twice a day " * 40 for i in range(8)]
        said += ["/compress"] + [f"after {i}: " + "and the moon pulls it " * 12
                                 for i in range(3)]
        for n, text in enumerate(said, start=1):  # each answered before the next
            await platform.say(text)
            await platform.wait_delivered(n, timeout=30)
    finally:
        await close(gw)
        await fake.stop()
    return fake, platform


async def test_every_claude_turn_reads_the_prefix_it_wrote_even_after_a_compaction(
        tmp_path):
    fake, platform = await converse(tmp_path, "claude-test-model")
    assert any(t.startswith("Compressed:") for t in platform.texts())
    chat_requests = [c.json for c in fake.calls_to("/v1/messages") if c.json and
                     "handoff checkpoint" not in str(c.json.get("system"))]
    assert len(chat_requests) == 11
    assert all(markers(r) == 4 for r in chat_requests[1:])  # system + the last three
    chat = [r.usage for r in fake.reported if not r.summary]
    assert chat[0]["cache_read_input_tokens"] == 0
    # Every later turn reads what the turn before wrote: the prefix is byte-stable, and
    # the compacted transcript (summary included) stays the same from one turn to the next.
    after_compaction = chat[8:]
    assert all(u["cache_read_input_tokens"] > 0 for u in chat[1:8])
    assert all(u["cache_read_input_tokens"] > 0 for u in after_compaction[1:])
    summaries = [c.json for c in fake.calls_to("/v1/messages")
                 if c.json and "handoff checkpoint" in str(c.json.get("system"))]
    assert summaries and all(markers(s) == 0 for s in summaries)  # summaries are not cached


async def test_one_hour_ttl_reaches_the_request(tmp_path):
    fake, _ = await converse(tmp_path, "claude-test-model", ttl="1h")
    request = fake.calls_to("/v1/messages")[-1].json
    assert '"ttl": "1h"' in str(request).replace("'", '"')


async def test_a_model_that_is_not_claude_gets_no_markers(tmp_path):
    fake, platform = await converse(tmp_path, "some-other-model")
    assert platform.texts()[0].startswith("echo:")
    assert all(markers(c.json) == 0 for c in fake.calls_to("/v1/messages") if c.json)
    assert all(r.usage.get("cache_read_input_tokens", 0) == 0 for r in fake.reported)
