"""`threadline doctor` as a real process: one line per check, against the fake services."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from storage.sqlite import SqliteSessionStore
from storage.sqlite.schema import SCHEMA_VERSION
from tests.harness.cli import Ran, threadline
from tests.harness.fixtures import free_port
from tests.harness.gateway import write_config

API_KEY = "sk-doctor-right-key-0123456789"
WRONG_KEY = "sk-doctor-wrong-key-9876543210"
WRONG_TELEGRAM = "999999:AAwrongDoctorTelegramToken0000000"
WRONG_DISCORD = "MTk5OTk5.GwRoNg.wrong-doctor-discord-token"
ANTHROPIC_KEY = "sk-ant-doctor-key-0123456789"


@dataclass
class Setup:
    """A healthy configuration against the fakes; a test breaks one part of it."""

    tmp_path: Path
    model: dict[str, Any]
    telegram: dict[str, Any]
    discord: dict[str, Any]
    sections: dict[str, Any] = field(default_factory=dict)
    secrets: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.db.parent.mkdir()
        self.sections["storage"] = {"path": str(self.db)}

    def write(self) -> str:
        platforms = {"console": {"enabled": False}, "telegram": self.telegram,
                     "discord": self.discord}
        return str(write_config(self.tmp_path, model=self.model, platforms=platforms,
                                **self.sections))

    @property
    def db(self) -> Path:
        """In a directory of its own, so a test can see every file the doctor leaves."""
        return self.tmp_path / "data" / "threadline.db"


@pytest.fixture
def setup(tmp_path, fake_openai, fake_telegram, fake_discord) -> Setup:
    fake_openai.api_key = API_KEY  # a wrong key now gets 401, as from the real API
    return Setup(
        tmp_path,
        model={"base_url": fake_openai.base_url, "api_key": API_KEY},
        telegram={"enabled": True, "token": fake_telegram.token,
                  "base_url": fake_telegram.base_url},
        discord={"enabled": True, "token": fake_discord.token,
                 "api_base": fake_discord.api_base},
        secrets=[API_KEY, fake_telegram.token, fake_telegram.token.split(":")[1],
                 fake_discord.token, WRONG_KEY, WRONG_TELEGRAM, WRONG_DISCORD, ANTHROPIC_KEY])


async def doctor(setup: Setup) -> Ran:
    ran = await threadline("doctor", "--config", setup.write(), home=setup.tmp_path,
                           timeout=60)
    assert "Traceback" not in ran.err, ran.err
    for secret in setup.secrets:
        assert secret not in ran.out + ran.err
    return ran


def lines(ran: Ran) -> dict[str, str]:
    """Check name -> its whole line; 'end' -> the closing line."""
    out = ran.out.strip().splitlines()
    found = {line[6:18].strip(): line for line in out[:-1]}
    assert len(found) == len(out) - 1, ran.out  # one line per check
    return {**found, "end": out[-1]}


async def test_a_healthy_setup_is_all_good_and_creates_nothing(setup, fake_openai,
                                                               fake_telegram, fake_discord):
    ran = await doctor(setup)
    assert ran.code == 0, ran.out
    found = lines(ran)
    assert list(found) == ["config", "database", "provider", "telegram", "discord", "end"]
    assert all(line.startswith("ok    ") for check, line in found.items() if check != "end")
    assert found["end"] == "all good"
    assert fake_openai.base_url in found["provider"]
    assert "@threadline_bot" in found["telegram"] and fake_telegram.base_url in found["telegram"]
    assert fake_discord.api_base in found["discord"]
    assert "will be created" in found["database"] and not setup.db.exists()
    [models] = fake_openai.calls_to("/v1/models")
    assert models.method == "GET" and models.headers["authorization"] == f"Bearer {API_KEY}"
    assert fake_telegram.calls_to("/getMe") and fake_discord.calls_to("/users/@me")
    assert not fake_openai.calls_to("/chat/completions")  # a check must cost nothing


def _unreachable_model(s: Setup) -> None:
    s.model["base_url"] = f"http://127.0.0.1:{free_port()}/v1"


def _unreachable_telegram(s: Setup) -> None:
    s.telegram["base_url"] = f"http://127.0.0.1:{free_port()}/bot"


def _unreachable_discord(s: Setup) -> None:
    s.discord["api_base"] = f"http://127.0.0.1:{free_port()}/api/v10"


def _db_under_a_file(s: Setup) -> None:
    (s.tmp_path / "state").write_text("a file where a directory belongs")
    s.sections["storage"] = {"path": str(s.tmp_path / "state" / "threadline.db")}


BREAKS: dict[str, tuple[Callable[[Setup], None], str, str]] = {
    "unreachable provider": (_unreachable_model, "provider", "unreachable (connection refused)"),
    "wrong API key": (lambda s: s.model.update(api_key=WRONG_KEY), "provider",
                      "the API key was refused (401)"),
    "wrong Telegram token": (lambda s: s.telegram.update(token=WRONG_TELEGRAM), "telegram",
                             "token refused"),
    "wrong Discord token": (lambda s: s.discord.update(token=WRONG_DISCORD), "discord",
                            "token refused"),
    "database directory is a file": (_db_under_a_file, "database", "is not a directory"),
    # Not writable even for root, so the test means the same under any user.
    "database directory unwritable": (
        lambda s: s.sections.update(storage={"path": "/sys/threadline/threadline.db"}),
        "database", "cannot write /sys/threadline/threadline.db"),
}


@pytest.mark.parametrize("name", list(BREAKS))
async def test_each_problem_is_one_line_and_the_others_still_run(setup, name):
    break_it, check, says = BREAKS[name]
    break_it(setup)
    ran = await doctor(setup)
    found = lines(ran)
    assert ran.code == 1
    assert found[check].startswith(f"FAIL  {check}") and says in found[check], ran.out
    others = [line for c, line in found.items() if c not in (check, "end")]
    assert len(others) == 4 and all(line.startswith("ok    ") for line in others), ran.out
    assert found["end"] == "1 problem"


async def test_when_everything_is_down_every_check_still_reports(setup):
    for break_it in (_unreachable_model, _unreachable_telegram, _unreachable_discord):
        break_it(setup)
    setup.sections["storage"] = {"path": "/sys/threadline/threadline.db"}
    ran = await doctor(setup)
    found = lines(ran)
    assert ran.code == 1 and found["end"] == "4 problems", ran.out
    assert found["config"].startswith("ok    config")
    for check in ("provider", "telegram", "discord"):
        assert found[check].startswith(f"FAIL  {check}"), ran.out
        assert "unreachable (connection refused)" in found[check], ran.out
    assert found["database"].startswith("FAIL  database")


async def test_a_service_that_never_answers_times_out_in_seconds(setup, fake_openai,
                                                                 fake_telegram, fake_discord):
    for fake in (fake_openai, fake_telegram, fake_discord):
        fake.delay_next(30)
    started = time.monotonic()
    ran = await doctor(setup)
    elapsed = time.monotonic() - started
    found = lines(ran)
    assert ran.code == 1 and found["end"] == "3 problems", ran.out
    for check in ("provider", "telegram", "discord"):
        assert "unreachable (no answer within 5 s)" in found[check], ran.out
    # The checks run side by side, each tried once (no SDK retries): every service was
    # asked before any check's 5 s were up. The wall clock also holds the process's start,
    # which a busy machine stretches: it only bounds the whole loosely.
    asked = [fake.calls[0].at for fake in (fake_openai, fake_telegram, fake_discord)]
    assert max(asked) - min(asked) < 4, asked
    assert elapsed < 30
    assert len(fake_openai.calls_to("/v1/models")) == 1


async def _real_database(path: Path) -> None:
    store = SqliteSessionStore(path)
    await store.initialize()
    await store.shutdown()


def _random_bytes(path: Path) -> None:
    path.write_bytes(os.urandom(64 * 1024))


def _truncate(path: Path, size: int) -> None:
    path.write_bytes(path.read_bytes()[:size])


@pytest.mark.parametrize("damage", ["random bytes", "truncated"])
async def test_a_damaged_database_fails_and_is_left_untouched(setup, damage):
    if damage == "random bytes":
        _random_bytes(setup.db)
    else:
        await _real_database(setup.db)
        _truncate(setup.db, 8192)  # a copy cut short: pages the header promises are gone
    before, listing = setup.db.read_bytes(), sorted(os.listdir(setup.db.parent))
    ran = await doctor(setup)
    found = lines(ran)
    assert ran.code == 1 and found["end"] == "1 problem"
    assert found["database"].startswith("FAIL  database") and str(setup.db) in found["database"]
    assert setup.db.read_bytes() == before
    assert sorted(os.listdir(setup.db.parent)) == listing  # no -wal, -shm or journal either


def _with_version(path: Path, version: int) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (x)")
        db.execute(f"PRAGMA user_version = {version}")
    db.close()


@pytest.mark.parametrize(("version", "code", "says"), [
    (SCHEMA_VERSION, 0, f"schema v{SCHEMA_VERSION}"),
    (1, 0, f"schema v1: this database needs an upgrade to v{SCHEMA_VERSION}"),
    (SCHEMA_VERSION + 1, 1, "newer than this Threadline understands"),
], ids=["current", "older", "newer"])
async def test_an_existing_database_is_read_but_never_migrated(setup, version, code, says):
    if version == SCHEMA_VERSION:
        await _real_database(setup.db)  # the store's own file, in WAL mode
    else:
        _with_version(setup.db, version)
    before, listing = setup.db.read_bytes(), sorted(os.listdir(setup.db.parent))
    ran = await doctor(setup)
    assert ran.code == code, ran.out
    assert says in lines(ran)["database"]
    assert setup.db.read_bytes() == before
    assert sorted(os.listdir(setup.db.parent)) == listing


@pytest.mark.parametrize(("text", "says"), [
    ("model: {provider: openai\n", "invalid YAML"),
    ("model: {provdier: openai}\n", "unknown key 'provdier'"),
], ids=["bad YAML", "unknown key"])
async def test_a_broken_config_is_the_only_line(tmp_path, text, says):
    config = tmp_path / "config.yaml"
    config.write_text(text)
    ran = await threadline("doctor", "--config", str(config), home=tmp_path, timeout=60)
    assert ran.code == 1 and "Traceback" not in ran.err
    [line, end] = ran.out.strip().splitlines()
    assert line.startswith(f"FAIL  config      {config}") and says in line
    assert end == "1 problem"


@pytest.mark.parametrize("key", [ANTHROPIC_KEY, WRONG_KEY], ids=["right key", "wrong key"])
async def test_a_separate_summary_model_is_checked_too(setup, fake_anthropic, key):
    fake_anthropic.api_key = ANTHROPIC_KEY
    setup.sections["auxiliary"] = {"compression": {
        "provider": "anthropic", "model": "claude-fake", "base_url": fake_anthropic.url,
        "api_key": key}}
    ran = await doctor(setup)
    summary = lines(ran)["summary"]
    assert f"anthropic claude-fake at {fake_anthropic.url}" in summary
    if key == ANTHROPIC_KEY:
        assert ran.code == 0 and summary.startswith("ok    summary"), ran.out
        [models] = fake_anthropic.calls_to("/v1/models")
        sent = models.headers.get("x-api-key") or models.headers.get("authorization", "")
        assert sent.removeprefix("Bearer ") == key
    else:
        assert ran.code == 1 and summary.startswith("FAIL  summary")
        assert "the API key was refused (401)" in summary


async def test_every_fallback_model_is_checked_like_the_main_one(setup, fake_openai,
                                                                 fake_anthropic):
    fake_anthropic.api_key = ANTHROPIC_KEY
    setup.model["fallbacks"] = [
        {"provider": "openai", "name": "fake-fallback", "base_url": fake_openai.base_url,
         "api_key": API_KEY},
        {"provider": "anthropic", "name": "claude-fake", "base_url": fake_anthropic.url,
         "api_key": WRONG_KEY}]
    ran = await doctor(setup)
    found = lines(ran)
    assert ran.code == 1 and found["end"] == "1 problem", ran.out
    assert found["fallback 1"].startswith("ok    fallback 1  openai fake-fallback at "
                                          f"{fake_openai.base_url}"), ran.out
    assert found["fallback 2"].startswith("FAIL  fallback 2  anthropic claude-fake at "
                                          f"{fake_anthropic.url}"), ran.out
    assert "the API key was refused (401); check model.fallbacks[1].api_key" \
        in found["fallback 2"]
    assert len(fake_openai.calls_to("/v1/models")) == 2  # the main model's and the first's
    assert not fake_openai.calls_to("/chat/completions")


async def test_the_budgets_fallback_model_is_checked_too(setup, fake_anthropic):
    fake_anthropic.api_key = ANTHROPIC_KEY
    setup.sections["budgets"] = {
        "user": {"day": {"usd": 1}}, "on_limit": "fallback",
        "fallback_model": {"provider": "anthropic", "name": "claude-fake",
                           "base_url": fake_anthropic.url, "api_key": WRONG_KEY}}
    ran = await doctor(setup)
    found = lines(ran)
    assert ran.code == 1 and found["end"] == "1 problem", ran.out
    assert found["budget"].startswith("FAIL  budget      anthropic claude-fake at "
                                            f"{fake_anthropic.url}"), ran.out
    assert "check budgets.fallback_model.api_key" in found["budget"]


async def test_the_local_model_is_found_without_loading_it(setup):
    setup.model = {"provider": "local", "name": "SmolLM2-135M-Instruct"}
    ran = await doctor(setup)
    assert ran.code == 0, ran.out
    provider = lines(ran)["provider"]
    assert provider.startswith("ok    provider    local SmolLM2") and provider.endswith(".gguf")


async def test_no_enabled_platform_is_a_problem_for_run(setup):
    setup.telegram["enabled"] = setup.discord["enabled"] = False
    ran = await doctor(setup)
    found = lines(ran)
    assert ran.code == 1 and found["end"] == "1 problem", ran.out
    assert found["platforms"].startswith("FAIL  platforms   ")
    assert "no platform is enabled" in found["platforms"]
    assert "telegram" not in found and "discord" not in found


async def _with_pulse(path: Path, largest_s: float, age_s: float) -> None:
    from gateway.service.loopwatch import SETTING, Minute

    store = SqliteSessionStore(path)
    await store.initialize()
    await store.put_setting(SETTING, Minute(largest_s, time.time() - age_s).as_json())
    await store.shutdown()


@pytest.mark.parametrize(("largest_s", "age_s", "code", "says"), [
    (0.012, 30, 0, "ok    event loop  largest stall 12 ms in the minute to"),
    (14.0, 30, 1, "FAIL  event loop  largest stall 14,000 ms"),
    (14.0, 3600, 0, "ok    event loop  no recent figure (the service is not running)"),
])
async def test_the_running_services_pulse_is_reported(setup, largest_s, age_s, code, says):
    await _with_pulse(setup.db, largest_s, age_s)
    ran = await doctor(setup)
    assert ran.code == code, ran.out
    assert lines(ran)["event loop"].startswith(says)


async def test_reading_the_room_needs_privacy_mode_off(setup, fake_telegram):
    setup.telegram["group_context"] = {"enabled": True}
    refused = await doctor(setup)
    assert refused.code == 1 and "/setprivacy" in lines(refused)["telegram"]
    fake_telegram.privacy_off = True
    assert (await doctor(setup)).code == 0
