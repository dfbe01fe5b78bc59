"""The conversations and what they run on: providers in their fallback chains, each call
metered; the context engine; spending limits; MCP servers; where attachments and saved
tool outputs are kept; group rooms; the transcriber."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from agent.attachments.files import AttachmentFiles
from agent.engines import resolve_engine_factory
from agent.providers.base import Provider
from agent.providers.breaker import Breakers, BreakerSettings
from agent.providers.chain import FallbackPolicy, ModelChain, SummaryChain
from agent.providers.factory import build_provider
from agent.tools.budget import clean_old_outputs
from gateway.auth import Authorizer
from gateway.config import Config
from gateway.metrics import MeteredProvider, Metrics
from gateway.turns.chat_settings import PerChat
from gateway.turns.conversations import Conversations
from gateway.turns.groups import RoomContext, Rooms
from gateway.turns.pricing import Price
from gateway.turns.resets import Clock, utc_now
from gateway.turns.spending import Budgets
from gateway.wiring.settings import (
    agent_settings,
    build_prices,
    fallback_settings,
    main_settings,
    mcp_servers,
    model_settings,
    summary_settings,
)
from storage.base import SessionStore

if TYPE_CHECKING:
    from agent.providers.transcribe import Transcriber
    from gateway.mcp.hub import McpHub

log = logging.getLogger(__name__)


def build_conversations(config: Config, store: SessionStore,
                        metrics: Metrics | None = None, clock: Clock = utc_now
                        ) -> Conversations:
    """Providers (each call counted in `metrics`; each model followed by `model.fallbacks`,
    their breakers timed by `clock`), the context engine (resolved first: an unknown name
    fails at startup before anything else is said)."""
    engine_factory = resolve_engine_factory(config.context.engine, data_dir=config.data_dir)
    metrics = metrics or Metrics()
    chain = model_chains(config, metrics, clock)
    main = build_provider(main_settings(config))
    aux = summary_settings(config)
    provider = chain(main, "chat", ModelChain)
    # The summarizer gets a meter of its own even when it is the main model, so calls are
    # counted by purpose; as the main model it falls back like a turn does.
    summary_provider = (MeteredProvider(build_provider(aux), metrics, "summary")
                        if aux is not None else chain(main, "summary", SummaryChain))
    prices = build_prices(config)
    chats = PerChat(config.chats)
    providers = {name: chain(build_provider(main_settings(config, name)), "chat", ModelChain)
                 for name in chats.models()}
    files = attachment_files(config, store)
    return Conversations(store, provider=provider, summary_provider=summary_provider,
                         engine_factory=engine_factory, system_prompt=config.system_prompt,
                         settings=agent_settings(config), prices=prices, metrics=metrics,
                         max_agents=config.gateway.cached_agents,
                         tool_dir=tool_outputs(config), files=files,
                         mcp=build_mcp(config, files, metrics),
                         room=RoomContext(store, build_rooms(config, chats)), chats=chats,
                         providers=providers,
                         budgets=build_budgets(config, store, prices, metrics, clock))


def build_budgets(config: Config, store: SessionStore, prices: dict[str, Price],
                  metrics: Metrics, clock: Clock) -> Budgets:
    """Spending limits (docs/budgets.md); spend is counted whether or not any is set."""
    entry = config.budgets.fallback_model
    fallback = (MeteredProvider(build_provider(model_settings(config, entry)), metrics, "chat")
                if entry is not None and config.budgets.on_limit == "fallback" else None)
    return Budgets(config.budgets, store, prices, clock, fallback)


def model_chains(config: Config, metrics: Metrics, clock: Clock
                 ) -> Callable[[Provider, str, type[ModelChain]], ModelChain]:
    """What makes a model and `model.fallbacks` one chain, metered for a purpose; every
    chain shares the fallbacks and one breaker per model (docs/fallbacks.md)."""
    m = config.model
    breakers = Breakers(BreakerSettings(m.breaker.failures, m.breaker.cooldown_s),
                        clock=lambda: clock().timestamp())
    policy = FallbackPolicy(max_wait_s=m.max_wait_s, announce=m.announce_fallback)
    fallbacks = [build_provider(settings) for settings in fallback_settings(config)]
    metrics.watch_counters(
        "threadline_model_calls", "Model calls in the fallback chain, by outcome: ok, failed, "
        "fell_back (failed, so the next model was tried), skipped (its breaker was open)",
        ("model", "outcome"), breakers.outcomes)
    metrics.watch_levels("threadline_model_breaker",
                         "Each model's breaker: 0 closed, 1 open, 2 half-open", "model",
                         breakers.states)

    def chain(head: Provider, purpose: str, kind: type[ModelChain]) -> ModelChain:
        return kind([MeteredProvider(model, metrics, purpose) for model in (head, *fallbacks)],
                    breakers=breakers, policy=policy)

    return chain


def build_rooms(config: Config, chats: PerChat) -> Rooms:
    """What each platform's group settings and each chat's own say: wake words,
    free-response chats, room context (docs/groups.md)."""
    return Rooms({"telegram": config.platforms.telegram, "discord": config.platforms.discord},
                 chats)


def attachment_files(config: Config, store: SessionStore) -> AttachmentFiles:
    """Where attachments are kept (beside the database, and on the store's shelf when
    several processes share it); files unused past the retention period are removed here."""
    retention_s = config.attachments.retention_days * 86_400
    files = AttachmentFiles(config.db_path.parent / "attachments",
                            store.shelf("attachments", retention_s))
    removed = files.sweep(retention_s)
    if removed:
        log.info("removed %d attachment file(s) unused for %g days", removed,
                 config.attachments.retention_days)
    return files


def build_mcp(config: Config, files: AttachmentFiles | None, metrics: Metrics
              ) -> McpHub | None:
    """The MCP servers, their tools offered where `chats`, `allow` and `deny` say; None
    when none is enabled (the SDK is not even loaded then). Nothing starts here."""
    servers = mcp_servers(config)
    if not servers:
        return None
    from gateway.mcp.access import McpAccess
    from gateway.mcp.hub import McpHub, McpMetrics
    from gateway.mcp.pictures import ToolPictures
    from gateway.offload import WorkerPool

    a = config.attachments
    pool = WorkerPool("mcp-pictures", size=1, memory_mb=a.reader_memory_mb,
                      preload=("agent.attachments.images",))
    return McpHub(servers, McpAccess(config.tools.mcp, Authorizer(config).configured_admin),
                  pictures=ToolPictures(files, pool, a.read_timeout_s) if files else None,
                  metrics=McpMetrics(metrics.registry))


def build_transcriber(config: Config) -> Transcriber | None:
    t = config.transcription
    if not t.model:
        return None
    from agent.providers.transcribe import Transcriber, TranscriptionSettings

    return Transcriber(TranscriptionSettings(model=t.model, base_url=t.base_url,
                                             api_key=t.api_key, timeout_s=t.timeout_s))


def tool_outputs(config: Config) -> Path:
    """Where tool outputs too long for the context are kept; old ones are removed here."""
    root = config.db_path.parent / "tool_outputs"  # beside the database: one state dir
    removed = clean_old_outputs(root)
    if removed:
        log.info("removed %d tool output file(s) past their retention", removed)
    return root
