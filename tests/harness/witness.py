"""LLM fakes that keep the usage they reported, as sent, so a test sums what the service
really said instead of predicting it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.harness.fake_anthropic import FakeAnthropic
from tests.harness.fake_openai import FakeOpenAI
from tests.harness.gateway import is_summary_request


@dataclass(frozen=True)
class Reported:
    """One answered provider request: the model it named and the usage it sent back."""

    model: str
    summary: bool
    usage: dict[str, Any]


class Witness:
    """Mixin for an LLM fake: keeps the usage of every request it answered, as sent, so a
    test sums what the service really said instead of predicting it. A failed request
    (an injected 500) never reaches the route and reports nothing, like the real APIs."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.reported: list[Reported] = []

    def routes(self) -> list[web.RouteDef]:
        return [web.RouteDef(r.method, r.path, self._witnessed(r.handler), r.kwargs)
                for r in super().routes()]  # type: ignore[misc]

    def _witnessed(self, handler: Any) -> Any:
        # The fakes append each answered request's usage (streamed or not) to `usages`;
        # what one request added is what it reported. Tests using a witness send one
        # request at a time, so the slice is never another request's.
        async def witnessed(request: web.Request) -> web.StreamResponse:
            answered = len(self.usages)  # type: ignore[attr-defined]
            response = await handler(request)
            for usage in self.usages[answered:]:  # type: ignore[attr-defined]
                asked = await request.json()
                self.reported.append(
                    Reported(asked["model"], is_summary_request(asked), usage))
            return response
        return witnessed


class WitnessOpenAI(Witness, FakeOpenAI):
    pass


class WitnessAnthropic(Witness, FakeAnthropic):
    pass
