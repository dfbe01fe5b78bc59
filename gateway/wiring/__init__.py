"""The one place where objects are built from config: settings.py (the config read as
each part's settings), conversations.py (providers, fallback chains, the context engine,
budgets, MCP and the conversations), platforms.py (the adapters' factories) and
gateway.py (the gateway's parts, each handed what it needs, and the Gateway itself).

May import: service/ and everything below it; never cli/ or web/.
"""

from gateway.store_open import build_store
from gateway.wiring.conversations import build_conversations, build_mcp
from gateway.wiring.gateway import build_gateway, create_gateway
from gateway.wiring.platforms import (
    console_platform,
    discord_settings,
    platform_factories,
    telegram_settings,
)
from gateway.wiring.settings import (
    build_prices,
    fallback_settings,
    main_settings,
    mcp_servers,
    model_settings,
    require_local_model,
    summary_settings,
)

__all__ = [
    "build_conversations",
    "build_gateway",
    "build_mcp",
    "build_prices",
    "build_store",
    "console_platform",
    "create_gateway",
    "discord_settings",
    "fallback_settings",
    "main_settings",
    "mcp_servers",
    "model_settings",
    "platform_factories",
    "require_local_model",
    "summary_settings",
    "telegram_settings",
]
