"""Building real gateways for tests: real config file, real store, real providers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gateway.app import Gateway, create_gateway
from gateway.config import Config, load_config
from platforms.base import PlatformAdapter


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


def config_for(tmp_path: Path, base_url: str, **kw: Any) -> Config:
    model = {"base_url": base_url, **kw.pop("model", {})}
    return load_config(write_config(tmp_path, model=model, **kw))


async def started_gateway(config: Config, adapters: list[PlatformAdapter]) -> Gateway:
    gateway = create_gateway(config, adapters)
    await gateway.initialize()
    await gateway.start()
    return gateway


async def close(gateway: Gateway) -> None:
    await gateway.stop(drain_timeout=5)
    await gateway.shutdown()
