"""Building real gateways for tests: real config file, real store, real providers."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import yaml

from gateway.config import Config, load_config
from gateway.service.app import Gateway
from gateway.wiring import create_gateway
from platforms.base import PlatformFactory
from tests.harness.platform import RecordingPlatform


def write_config(tmp_path: Path, *, model: dict[str, Any] | None = None,
                 **sections: Any) -> Path:
    data: dict[str, Any] = {
        "model": {"provider": "openai", "name": "fake-model", "api_key": "test-key",
                  "max_retries": 0, "timeout_s": 5, **(model or {})},
        "storage": {"path": str(tmp_path / "threadline.db")},
        "gateway": {"open": True, "coalesce_ms": 0},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def telegram_run_config(tmp_path: Path, fake_telegram: Any, model_url: str) -> str:
    """A config for `threadline run` with the fake Telegram as its only platform."""
    platforms = {"console": {"enabled": False},
                 "telegram": {"enabled": True, "token": fake_telegram.token,
                              "base_url": fake_telegram.base_url,
                              "base_file_url": fake_telegram.base_file_url}}
    return str(write_config(tmp_path, model={"base_url": model_url}, platforms=platforms))


def config_for(tmp_path: Path, base_url: str, **kw: Any) -> Config:
    model = {"base_url": base_url, **kw.pop("model", {})}
    return load_config(write_config(tmp_path, model=model, **kw))


async def started_gateway(config: Config, platforms: list[PlatformFactory]) -> Gateway:
    gateway = create_gateway(config, platforms)
    await gateway.initialize()
    await gateway.start()
    return gateway


async def cluster_member(home: Path, base_url: str, db_url: str, **sections: Any
                         ) -> tuple[Gateway, RecordingPlatform]:
    """A started gateway on a shared PostgreSQL database, as one of several processes
    (leases, fenced writes, notices), on a recording platform of its own; `home` is made."""
    await asyncio.to_thread(home.mkdir)
    config = config_for(home, base_url, storage={"url": db_url}, streaming={"enabled": False},
                        gateway={"open": True, "coalesce_ms": 0, "lease_seconds": 30},
                        **sections)
    platform = RecordingPlatform()
    return await started_gateway(config, [platform]), platform


async def after_restart(config: Config, deliveries: int, *, settle: float = 0.0
                        ) -> RecordingPlatform:
    """Start a new gateway on the same store, let it recover until `deliveries` inbound
    messages were answered (or `settle` seconds passed), close it; return what it sent."""
    platform = RecordingPlatform()
    gateway = await started_gateway(config, [platform])
    try:
        if deliveries:
            await platform.wait_delivered(deliveries)
        await asyncio.sleep(settle)
    finally:
        await close(gateway)
    return platform


async def close(gateway: Gateway) -> None:
    await gateway.stop(drain_timeout=5)
    await gateway.shutdown()


def is_summary_request(body: dict[str, Any]) -> bool:
    messages = body.get("messages") or []
    system = body.get("system") or (messages[0].get("content") if messages and
                                    messages[0].get("role") == "system" else "")
    return "handoff checkpoint" in str(system)


def summarizing_responder(body: dict[str, Any]) -> str:
    """Chat turns are echoed; summarizer calls get a well-formed checkpoint."""
    from tests.harness.base import echo_responder

    if not is_summary_request(body):
        return echo_responder(body)
    return ("## Active Task\nKeep chatting.\n## Goal\nA long conversation used in tests, "
            "kept short by compaction.\n## Completed Actions\n1. Exchanged numbered test "
            "messages with the user, all answered by echo.\n## Critical Context\nNothing "
            "secret was discussed; the numbers counted upward.")
