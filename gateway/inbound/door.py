"""The door every message comes in by: the handler adapters are built with.

Adapters have to exist before the parts that send through them, and the intake is one
of those parts, so the door is made first and opened onto the intake once it exists
(gateway/wiring/gateway.py). Nothing knocks before the gateway starts."""

from __future__ import annotations

from gateway.inbound.intake import Intake
from platforms.base import InboundMessage


class Door:
    def __init__(self) -> None:
        self._intake: Intake | None = None

    def open(self, intake: Intake) -> None:
        self._intake = intake

    def _inside(self) -> Intake:
        if self._intake is None:
            raise RuntimeError("a message came in before the gateway was assembled")
        return self._intake

    async def handle(self, msg: InboundMessage) -> bool:
        """The adapters' handler (Intake.handle)."""
        return await self._inside().handle(msg)
