"""Fitting a turn to the model that runs it (docs/fallbacks.md).

A fallback (or a budget's fallback model) may have a smaller window than the agent's own
model. The context engine works to one window at a time, so before a call goes to a model
the engine is told that model's window; the agent compacts when the transcript no longer
fits it. After the turn the agent's own model's window applies again.
"""

from __future__ import annotations

import logging

from agent.context_engine import ContextEngine
from agent.providers.base import Provider
from agent.turns import ModelLimits

log = logging.getLogger(__name__)


class Windows:
    """Which window the engine works to. The agent's own model (`home`) keeps the window
    the engine was built with, as lowered by what providers revealed; any other model its
    configured window, as lowered the same way (`ModelLimits`, shared by every chat)."""

    def __init__(self, engine: ContextEngine, limits: ModelLimits, home: Provider) -> None:
        self.engine = engine
        self.limits = limits
        self.home = home
        remembered = limits.windows.get(home.model)
        if remembered and remembered < engine.context_length:
            engine.update_model(home.model, remembered)
        self._home_window = engine.context_length

    def of(self, model: Provider) -> int:
        if model is self.home:
            return self._home_window
        return min(model.context_length, self.limits.windows.get(model.model, model.context_length))

    def use(self, model: Provider) -> bool:
        """Tell the engine `model`'s window; True when that window is smaller than the one
        it worked to (the transcript may no longer fit)."""
        window, before = self.of(model), self.engine.context_length
        if window != before:
            self.engine.update_model(model.model, window)
        return window < before

    def learn(self, model: Provider, limit: int) -> None:
        """A provider stated `model`'s window: remember it when smaller than we thought."""
        if limit >= self.engine.context_length:
            return
        log.warning("model %s has a %d-token window, not %d; remembering it", model.model,
                    limit, self.engine.context_length)
        self.limits.remember(model.model, limit)
        if model is self.home:
            self._home_window = min(self._home_window, limit)
        self.engine.update_model(model.model, limit)
