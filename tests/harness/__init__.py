"""Local fake servers for the services Threadline talks to (see shared/HARNESS.md)."""

from tests.harness.base import FakeServer, RecordedCall, echo_responder, tool_call_reply
from tests.harness.fake_anthropic import FakeAnthropic
from tests.harness.fake_openai import FakeOpenAI

__all__ = ["FakeAnthropic", "FakeOpenAI", "FakeServer", "RecordedCall", "echo_responder",
           "tool_call_reply"]
