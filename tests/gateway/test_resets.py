"""Session resets: idle and daily (in a non-UTC zone, across daylight saving changes), the
engine hearing of the end, a root session next, and the chat told once."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from gateway.turns.resets import NOTICES, ResetPolicy, utc_now
from gateway.wiring import create_gateway
from storage.sqlite import SqliteSessionStore
from tests.harness.engines import RemembersEnds, install_plugin
from tests.harness.gateway import close, config_for
from tests.harness.platform import RecordingPlatform

BERLIN = ZoneInfo("Europe/Berlin")
UTC = dt.UTC
CHAT = "test:1"


def at(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_idle_is_due_exactly_after_the_quiet_spell() -> None:
    policy = ResetPolicy("idle", dt.timedelta(minutes=30))
    last = at("2026-05-01T10:00")
    assert policy.due(last, last + dt.timedelta(minutes=29, seconds=59)) is None
    assert policy.due(last, last + dt.timedelta(minutes=30)) == "idle"


@pytest.mark.parametrize("last, not_yet, due", [
    # Winter: 04:00 in Berlin is 03:00 UTC.
    ("2026-01-14T20:00", "2026-01-15T02:59", "2026-01-15T03:00"),
    # The night clocks go forward (29 March): 04:00 CEST is 02:00 UTC.
    ("2026-03-28T20:00", "2026-03-29T01:59", "2026-03-29T02:00"),
    # The night clocks go back (25 October): 04:00 CET is 03:00 UTC again.
    ("2026-10-24T20:00", "2026-10-25T02:59", "2026-10-25T03:00"),
    # Spoke after the hour: the next reset is the next day's.
    ("2026-06-10T02:30", "2026-06-11T01:59", "2026-06-11T02:00"),
])
def test_daily_is_due_at_the_local_hour_across_daylight_saving(last, not_yet, due) -> None:
    policy = ResetPolicy("daily", at_hour=4, zone=BERLIN)
    assert policy.due(at(last), at(not_yet)) is None
    assert policy.due(at(last), at(due)) == "daily"


def test_a_daily_hour_that_does_not_exist_that_night_fires_when_the_clock_jumps() -> None:
    policy = ResetPolicy("daily", at_hour=2, zone=BERLIN)  # 02:00-03:00 is skipped 29 March
    last = at("2026-03-28T12:00")
    assert policy.due(last, at("2026-03-29T00:59")) is None
    assert policy.due(last, at("2026-03-29T01:00")) == "daily"  # 03:00 CEST


def test_both_resets_whichever_comes_first_and_none_never() -> None:
    both = ResetPolicy("both", dt.timedelta(hours=2), at_hour=4, zone=BERLIN)
    assert both.due(at("2026-01-14T20:00"), at("2026-01-14T22:00")) == "idle"
    assert both.due(at("2026-01-15T02:30"), at("2026-01-15T03:00")) == "daily"
    never = ResetPolicy("none", dt.timedelta(minutes=1))
    assert never.due(at("2020-01-01T00:00"), at("2026-01-01T00:00")) is None


class Clock:
    """Real time plus however far a test has moved it on."""

    def __init__(self) -> None:
        self.ahead = dt.timedelta()

    def __call__(self) -> dt.datetime:
        return utc_now() + self.ahead


async def test_an_idle_chat_is_reset_on_time_and_told_once_with_its_next_answer(
        tmp_path, fake_openai, monkeypatch) -> None:
    install_plugin(tmp_path, "remembers-ends", "RemembersEnds")
    monkeypatch.setenv("THREADLINE_HOME", str(tmp_path))
    RemembersEnds.ended.clear()
    config = config_for(tmp_path, fake_openai.base_url, context={"engine": "remembers-ends"},
                        gateway={"session_reset": {"mode": "idle", "idle_minutes": 30,
                                                   "timezone": "Europe/Berlin"}})
    platform, clock = RecordingPlatform(), Clock()
    gw = create_gateway(config, [platform], clock=clock)
    await gw.initialize()
    await gw.start()
    try:
        await platform.say("hello")
        await platform.wait_delivered(1)
        first = await gw.store.live_session(CHAT)
        clock.ahead = dt.timedelta(minutes=29)
        assert await gw.resets.sweep() == 0
        clock.ahead = dt.timedelta(minutes=31)
        assert await gw.resets.sweep() == 1
        assert await gw.store.live_session(CHAT) is None
        # The store stamps messages with the real time: talk "now" again.
        clock.ahead = dt.timedelta()
        await platform.say("are you there?")
        await platform.say("and now?")
        await platform.wait_delivered(3)
        second = await gw.store.live_session(CHAT)
    finally:
        await close(gw)
    async with SqliteSessionStore(config.db_path) as store:
        ended = await store.get_session(first.id)
    assert ended is not None and ended.end_reason == "idle"
    assert second.kind == "root" and second.parent_session_id is None
    assert RemembersEnds.ended == [(first.id, 3)]  # system, hello, its answer
    assert platform.texts() == ["echo: hello", NOTICES["idle"], "echo: are you there?",
                                "echo: and now?"]


async def test_a_daily_reset_missed_while_down_applies_to_the_next_message(tmp_path,
                                                                          fake_openai) -> None:
    config = config_for(tmp_path, fake_openai.base_url, gateway={"session_reset": {
        "mode": "daily", "at_hour": 4, "timezone": "America/New_York"}})
    first_run = RecordingPlatform()
    gw = create_gateway(config, [first_run])
    await gw.initialize()
    await gw.start()
    try:
        await first_run.say("good night")
        await first_run.wait_delivered(1)
        before = await gw.store.live_session(CHAT)
        # The scheduler fires at the configured local hour.
        policy = ResetPolicy.from_config(config.gateway.session_reset)
        boundary = policy.daily_trigger().get_next_fire_time(None, utc_now())
        assert gw.resets.next_runs() == {"daily-resets": boundary}
        assert boundary.astimezone(ZoneInfo("America/New_York")).hour == 4
    finally:
        await close(gw)
    # Down over the hour (no sweep ran): the next message still starts afresh.
    clock = Clock()
    clock.ahead = boundary - utc_now() + dt.timedelta(minutes=1)
    platform = RecordingPlatform()
    gw = create_gateway(config, [platform], clock=clock)
    await gw.initialize()
    await gw.start()
    try:
        await platform.say("good morning", message_id="after-the-night")
        await platform.wait_delivered(1)
        after = await gw.store.live_session(CHAT)
        ended = await gw.store.get_session(before.id)
    finally:
        await close(gw)
    assert platform.texts() == [NOTICES["daily"], "echo: good morning"]
    assert ended.end_reason == "daily"
    assert after.kind == "root" and after.id != before.id
