"""`threadline doctor`: one line per check of a setup, exit 1 if any fails.

The doctor only looks. It opens the database read-only and never creates, migrates or
rewrites it; it makes one free authenticated call per provider and platform; no secret
reaches its output (errors go through `plain_error` with the secret as `known`).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Sequence
from pathlib import Path
from typing import Any

from agent.errors import ProviderError, plain_error
from agent.providers.base import ProviderSettings
from agent.providers.classify import extract_info
from gateway.cli.doctor.result import NETWORK_TIMEOUT_S, Result, network_reason
from gateway.config import Config, ConfigError, require_platforms, resolve_config
from gateway.config.groups import GroupSettings

GGUF_MAGIC = b"GGUF"


async def run(config_path: str | None) -> int:
    """Check config, database, providers and platforms; print one line each; 0 if all pass."""
    try:
        config = resolve_config(config_path)
    except ConfigError as exc:  # nothing else can be checked without a config
        return _finish([Result("config", False, str(exc))])
    source = str(config.source.absolute()) if config.source else \
        "built-in defaults (no config file found)"
    from gateway.cli.doctor.storage import check_storage

    results = [Result("config", True, source), await check_storage(config)]
    pulse = await asyncio.to_thread(check_loop, config)
    if pulse is not None:
        results.append(pulse)
    try:
        require_platforms(config)  # `run` refuses to start without one
    except ConfigError as exc:
        results.append(Result("platforms", False, str(exc)))
    for result in results:
        print(result.line(), flush=True)
    # The network checks are independent: run them together so the slowest bounds the wait.
    remote = await asyncio.gather(*(_guarded(name, check, secret)
                                    for name, check, secret in _network_checks(config)))
    return _finish(remote, already=results)


def _finish(results: Sequence[Result], already: Sequence[Result] = ()) -> int:
    for result in results:
        print(result.line(), flush=True)
    problems = sum(not r.ok for r in [*already, *results])
    print("all good" if not problems else f"{problems} problem{'s' if problems > 1 else ''}")
    return 1 if problems else 0


def _network_checks(config: Config) -> list[tuple[str, Awaitable[Result], str | None]]:
    """(check name, the check, the secret it uses) for each provider and enabled platform."""
    from gateway.wiring.settings import (
        fallback_settings,
        main_settings,
        model_settings,
        summary_settings,
    )

    checks: list[tuple[str, Awaitable[Result], str | None]] = []
    main = main_settings(config)
    checks.append(("provider", check_provider("provider", main), main.api_key))
    for i, fallback in enumerate(fallback_settings(config)):  # each checked like the main one
        check = f"fallback {i + 1}"
        checks.append((check, check_provider(check, fallback, f"model.fallbacks[{i}].api_key"),
                       fallback.api_key))
    summary = summary_settings(config)
    if summary is not None:
        checks.append(("summary", check_provider("summary", summary), summary.api_key))
    spare = config.budgets.fallback_model
    if spare is not None and config.budgets.on_limit == "fallback":
        settings = model_settings(config, spare)
        checks.append(("budget", check_provider(
            "budget", settings, "budgets.fallback_model.api_key"), settings.api_key))
    tg, dc = config.platforms.telegram, config.platforms.discord
    if tg.enabled:
        checks.append(("telegram", check_telegram(config), tg.token))
    if dc.enabled:
        checks.append(("discord", check_discord(config), dc.token))
    if any(server.enabled for server in config.tools.mcp.values()):
        from gateway.cli.doctor.mcp import mcp_checks  # the MCP SDK loads only when needed

        checks.extend(mcp_checks(config))
    return checks


async def _guarded(check: str, work: Awaitable[Result], secret: str | None) -> Result:
    """A check that breaks in a way we did not foresee still becomes one redacted line."""
    try:
        return await work
    except Exception as exc:
        return Result(check, False, plain_error(exc, with_type=True, known=secret))


# --- the service's pulse ---------------------------------------------------------------


LOOP_STALE_S = 300.0  # a figure older than this is from a service that is not running
LOOP_BAD_S = 10.0  # a stall this long: a few more and systemd's watchdog kills the service


def check_loop(config: Config) -> Result | None:
    """The running service's pulse: the largest event loop stall of its last minute, which
    it keeps in the database (gateway/service/loopwatch.py). None when there is nothing to say."""
    from gateway.service.loopwatch import SETTING, Minute

    db = config.db_path
    if config.storage.url or not db.exists():
        return None
    try:
        uri = f"{db.absolute().as_uri()}?mode=ro"
        if not Path(f"{db}-wal").exists():
            uri += "&immutable=1"  # nobody has it open: read without creating -wal/-shm
        conn = sqlite3.connect(uri, uri=True, timeout=2)
        try:
            row = conn.execute("SELECT value FROM settings WHERE key = ?", (SETTING,)).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None  # an old schema, or a file the database check already judged
    minute = Minute.from_json(row[0]) if row else None
    if minute is None or time.time() - minute.ended_at > LOOP_STALE_S:
        return Result("event loop", True, "no recent figure (the service is not running)")
    detail = (f"largest stall {minute.largest_s * 1000:,.0f} ms in the minute to "
              f"{time.strftime('%H:%M', time.localtime(minute.ended_at))}")
    if minute.largest_s >= LOOP_BAD_S:
        return Result("event loop", False, f"{detail}: something blocks the service; see its "
                                           "log for 'event loop: stalled'")
    return Result("event loop", True, detail)


# --- providers ---------------------------------------------------------------------------


async def check_provider(check: str, settings: ProviderSettings,
                         key: str | None = None) -> Result:
    """Local: the model file is there. Remote: list the models, which costs nothing.
    `key`: the config key of its API key, named when the key is refused."""
    label = f"{settings.provider} {settings.model}"
    if settings.provider == "local":
        ok, detail = await asyncio.to_thread(_local_model, settings)
        return Result(check, ok, f"{label}: {detail}")
    if settings.provider == "openai":
        import openai as sdk

        client: Any = sdk.AsyncOpenAI(base_url=settings.base_url,
                                      api_key=settings.api_key or "not-needed",
                                      timeout=NETWORK_TIMEOUT_S, max_retries=0)
    elif settings.provider == "anthropic":
        import anthropic as sdk  # type: ignore[no-redef]

        client = sdk.AsyncAnthropic(base_url=settings.base_url, api_key=settings.api_key,
                                    timeout=NETWORK_TIMEOUT_S, max_retries=0)
    else:
        return Result(check, False, f"{label}: unknown provider")
    where = f"{label} at {str(client.base_url).rstrip('/')}"
    try:
        await client.models.list()
    except sdk.APIStatusError as exc:
        refusal = _refusal(key or _KEYS.get(check, ""), exc.status_code, exc.body,
                           settings.api_key)
        return Result(check, False, f"{where}: {refusal}")
    except sdk.APIConnectionError as exc:
        return Result(check, False, f"{where}: unreachable ({network_reason(exc)})")
    finally:
        await client.close()
    return Result(check, True, where)


_KEYS = {"provider": "model.api_key", "summary": "auxiliary.compression.api_key"}


def _refusal(key: str, status: int, body: Any, api_key: str | None) -> str:
    if status in (401, 403):
        return f"the API key was refused ({status}); check {key}"
    message = plain_error(extract_info(status, body).message, limit=160, known=api_key)
    return f"HTTP {status}" + (f": {message}" if message else "")


def _local_model(settings: ProviderSettings) -> tuple[bool, str]:
    """The GGUF file exists and starts like one; loading it would take seconds and memory."""
    from agent.providers.local import llama_cpp_problem, resolve_model_path

    problem = llama_cpp_problem()  # the same words `run` and `chat` refuse to start with
    if problem is not None:
        return False, problem
    try:
        path = resolve_model_path(settings)
        with path.open("rb") as f:
            magic = f.read(len(GGUF_MAGIC))
    except ProviderError as exc:
        return False, str(exc).removeprefix("local: ")
    except OSError as exc:
        return False, f"cannot read the model file ({(exc.strerror or '').lower()})"
    if magic != GGUF_MAGIC:
        return False, f"{path} is not a GGUF model file"
    return True, str(path)


# --- platforms ---------------------------------------------------------------------------


async def check_telegram(config: Config) -> Result:
    """getMe through python-telegram-bot, at the configured Bot API server."""
    from telegram import Bot
    from telegram.error import InvalidToken, NetworkError, TelegramError, TimedOut
    from telegram.request import HTTPXRequest

    tg = config.platforms.telegram
    assert tg.token is not None  # validated: an enabled Telegram has a token
    where = tg.base_url or "api.telegram.org"
    requests = [HTTPXRequest(connect_timeout=NETWORK_TIMEOUT_S, read_timeout=NETWORK_TIMEOUT_S)
                for _ in range(2)]
    bot = Bot(tg.token, request=requests[0], get_updates_request=requests[1],
              **({"base_url": tg.base_url} if tg.base_url else {}))
    try:
        await bot.initialize()  # calls getMe
    except InvalidToken:  # its message quotes the token: never show it
        return Result("telegram", False, f"token refused by {where}; "
                                         "check platforms.telegram.token")
    except TimedOut:
        return Result("telegram", False, f"{where} unreachable "
                                         f"(no answer within {NETWORK_TIMEOUT_S:g} s)")
    except NetworkError as exc:
        return Result("telegram", False, f"{where} unreachable ({network_reason(exc)})")
    except TelegramError as exc:
        return Result("telegram", False, f"{where}: {plain_error(exc, known=tg.token)}")
    finally:
        await bot.shutdown()
    if reads_the_room(tg) and not bot.can_read_all_group_messages:
        return Result("telegram", False, f"@{bot.username} has privacy mode on, so it never "
                      "sees unaddressed group messages (group_context, wake_words, "
                      "free_response): turn it off with @BotFather's /setprivacy, then add "
                      "the bot to its groups again")
    return Result("telegram", True, f"@{bot.username} via {where}")


def reads_the_room(settings: GroupSettings) -> bool:
    """Whether the bot needs every group message, not only those addressed to it."""
    return bool(settings.group_context.enabled or settings.wake_words
                or settings.free_response)


# The application's flags for the Message Content intent: approved (verified apps) or the
# developer portal's toggle (apps in under 100 servers).
MESSAGE_CONTENT_FLAGS = 1 << 18 | 1 << 19
MESSAGE_CONTENT_OFF = (
    "the Message Content intent is off for this application: Discord refuses the bot's "
    "connection (close code 4014), so it reads nothing, not even DMs or mentions; turn it "
    "on in the developer portal, Bot > Privileged Gateway Intents")


async def check_discord(config: Config) -> Result:
    """GET /users/@me and the application's flags through discord.py, at the configured
    REST base."""
    import aiohttp
    import discord
    from discord.http import HTTPClient, Route

    dc = config.platforms.discord
    assert dc.token is not None  # validated: an enabled Discord has a token
    http = HTTPClient(asyncio.get_running_loop())
    old_base = Route.BASE
    # discord.py has no per-client option; the class attribute is its only knob. Nothing
    # else in this process uses discord.py while the doctor runs.
    if dc.api_base:
        Route.BASE = dc.api_base.rstrip("/")
    where = Route.BASE
    try:
        async with asyncio.timeout(NETWORK_TIMEOUT_S):  # discord.py retries 5xx for ~25 s
            user = await http.static_login(dc.token)
            flags = int((await http.application_info()).get("flags") or 0)
    except discord.LoginFailure:
        return Result("discord", False, f"token refused by {where}; "
                                        "check platforms.discord.token")
    except (TimeoutError, aiohttp.ClientConnectionError, OSError) as exc:
        return Result("discord", False, f"{where} unreachable ({network_reason(exc)})")
    except discord.HTTPException as exc:
        text = plain_error(exc.text or "", limit=160, known=dc.token)
        return Result("discord", False, f"{where}: HTTP {exc.status}"
                                        + (f": {text}" if text else ""))
    finally:
        Route.BASE = old_base
        await http.close()
    if not flags & MESSAGE_CONTENT_FLAGS:
        return Result("discord", False, MESSAGE_CONTENT_OFF)
    return Result("discord", True, f"{user['username']} via {where}")
