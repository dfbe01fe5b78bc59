"""The real `threadline` command: piped chats, session inspection, configuration errors."""

from __future__ import annotations

import json

import pytest

from storage.sqlite import SqliteSessionStore
from tests.harness.cli import cli_env, threadline
from tests.harness.gateway import write_config

TWO_LINES = "hello\nwhat did I just say?\n"


async def _two_turn_chat(tmp_path, model: dict) -> tuple[list[str], list[dict]]:
    config = str(write_config(tmp_path, model=model))
    ran = await threadline("chat", "--config", config, stdin=TWO_LINES, home=tmp_path)
    assert ran.code == 0, ran.err
    listed = await threadline("sessions", "list", "--json", "--config", config, home=tmp_path)
    [session] = json.loads(listed.out)
    shown = await threadline("sessions", "show", session["id"], "--json", "--config", config,
                             home=tmp_path)
    return ran.out.splitlines(), json.loads(shown.out)


async def test_piped_chat_against_openai_compatible_server(tmp_path, fake_openai):
    lines, stored = await _two_turn_chat(tmp_path, {"base_url": fake_openai.base_url})
    assert lines == ["echo: hello", "echo: what did I just say?"]
    second = fake_openai.calls_to("/chat/completions")[1].json["messages"]
    assert [m["content"] for m in second if m["role"] != "system"] == [
        "hello", "echo: hello", "what did I just say?"]
    convo = [(m["role"], m["content"]) for m in stored if m["role"] != "system"]
    assert convo == [("user", "hello"), ("assistant", "echo: hello"),
                     ("user", "what did I just say?"),
                     ("assistant", "echo: what did I just say?")]


async def test_piped_chat_against_anthropic_endpoint(tmp_path, fake_anthropic):
    model = {"provider": "anthropic", "name": "claude-test", "base_url": fake_anthropic.url}
    lines, stored = await _two_turn_chat(tmp_path, model)
    assert lines == ["echo: hello", "echo: what did I just say?"]
    second = fake_anthropic.calls_to("/v1/messages")[1].json
    assert "Threadline" in str(second["system"])
    texts = [m["content"] if isinstance(m["content"], str) else m["content"][0]["text"]
             for m in second["messages"]]
    assert texts == ["hello", "echo: hello", "what did I just say?"]
    assert [m["role"] for m in stored] == ["system", "user", "assistant", "user", "assistant"]


async def test_sessions_tip_and_search_from_the_shell(tmp_path, fake_openai):
    config = str(write_config(tmp_path, model={"base_url": fake_openai.base_url}))
    await threadline("chat", "--config", config, stdin="the code is PELICAN-7731\n",
                     home=tmp_path)
    listed = json.loads((await threadline("sessions", "list", "--json", "--config", config,
                                          home=tmp_path)).out)
    root = listed[0]["id"]
    tip = await threadline("sessions", "tip", root, "--config", config, home=tmp_path)
    assert tip.out.strip() == root
    found = await threadline("sessions", "search", "PELICAN-7731", "--config", config,
                             home=tmp_path)
    assert root in found.out and found.code == 0


# Python decodes stdin strictly under a locale like en_US.UTF-8 but with surrogateescape
# under C or C.UTF-8; PYTHONIOENCODING pins the strict case so both are covered here.
@pytest.mark.parametrize("io_env", [{}, {"PYTHONIOENCODING": "utf-8:strict"}],
                         ids=["default", "strict"])
async def test_piped_line_with_invalid_utf8_is_still_answered(tmp_path, fake_openai, io_env):
    config = str(write_config(tmp_path, model={"base_url": fake_openai.base_url}))
    ran = await threadline("chat", "--config", config, stdin=b"caf\xe9 au lait\nnext\n",
                           home=tmp_path, env=cli_env(tmp_path, **io_env))
    assert ran.code == 0, ran.err
    assert "Traceback" not in ran.err
    assert ran.out.splitlines() == ["echo: caf\ufffd au lait", "echo: next"]


@pytest.mark.parametrize("action", ["tip", "show"])
async def test_unknown_session_is_reported_on_stderr(tmp_path, action):
    config = str(write_config(tmp_path))
    async with SqliteSessionStore(tmp_path / "threadline.db"):
        pass  # the database exists, without that session
    ran = await threadline("sessions", action, "no-such-id", "--config", config, home=tmp_path)
    assert ran.code == 1
    assert ran.out == ""
    assert "threadline: no session no-such-id" in ran.err.splitlines()


BAD_CONFIGS = {
    "bad_yaml": ("model: {provider: openai\n", "invalid YAML"),
    "unknown_key": ("modle: {}\n", "modle"),
    "wrong_type": ("model: {context_length: big}\n", "model.context_length"),
    "unset_variable": ("model: {provider: openai, api_key: '${TL_TEST_UNSET_KEY}'}\n",
                       "TL_TEST_UNSET_KEY"),
    "unknown_provider": ("model: {provider: gemini}\n", "model.provider"),
    "unwritable_storage": ("storage: {path: /proc/threadline/t.db}\n", "storage.path"),
}


@pytest.mark.parametrize("case", sorted(BAD_CONFIGS))
async def test_bad_configuration_exits_78_with_one_line(tmp_path, case):
    text, names = BAD_CONFIGS[case]
    path = tmp_path / "config.yaml"
    path.write_text(text)
    ran = await threadline("run", "--config", str(path), home=tmp_path, timeout=60)
    assert ran.code == 78, ran
    assert ran.out == ""
    assert len(ran.err.strip().splitlines()) == 1, ran.err
    assert "Traceback" not in ran.err
    assert names in ran.err


@pytest.mark.parametrize("where", ["config.yaml", "home/.config/threadline/config.yaml"])
async def test_config_path_in_the_lookup_that_is_a_directory_is_an_error(tmp_path, where):
    (tmp_path / where).mkdir(parents=True)
    env = cli_env(tmp_path, HOME=str(tmp_path / "home"))
    ran = await threadline("sessions", "list", home=tmp_path, env=env, timeout=60)
    assert ran.code == 78, ran
    assert len(ran.err.strip().splitlines()) == 1, ran.err
    assert "Traceback" not in ran.err
    assert where in ran.err and "not a regular file" in ran.err


async def test_run_with_no_platform_is_a_configuration_error(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("platforms: {console: {enabled: false}}\n")
    ran = await threadline("run", "--config", str(path), home=tmp_path, timeout=60)
    assert ran.code == 78 and len(ran.err.strip().splitlines()) == 1


async def test_unknown_context_engine_is_a_clear_startup_error(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("context: {engine: nosuchengine}\n")
    ran = await threadline("chat", "--config", str(path), stdin="hi\n", home=tmp_path,
                           timeout=60)
    assert ran.code == 78
    assert "nosuchengine" in ran.err and "compressor" in ran.err
    assert "Traceback" not in ran.err and len(ran.err.strip().splitlines()) == 1


async def test_a_plugin_engine_from_the_data_dir_is_used_when_config_names_it(tmp_path,
                                                                             fake_openai):
    plugin = tmp_path / "plugins" / "context_engine" / "keeper"
    plugin.mkdir(parents=True)
    (plugin / "__init__.py").write_text(
        "from agent.compression.compressor import ContextCompressor\n\n"
        "class Keeper(ContextCompressor):\n"
        "    @property\n"
        "    def name(self):\n"
        "        return 'keeper'\n")
    config = str(write_config(tmp_path, model={"base_url": fake_openai.base_url},
                              context={"engine": "keeper"}))
    ran = await threadline("chat", "--config", config, stdin="hi\n", home=tmp_path)
    assert ran.code == 0 and ran.out.strip() == "echo: hi", ran.err


async def test_run_with_an_unreachable_platform_says_so_and_keeps_trying(tmp_path):
    import asyncio
    import signal

    from tests.harness.cli import THREADLINE, cli_env
    from tests.harness.fixtures import free_port

    port = free_port()  # nothing listens there
    token = "MTIzNDU2Nzg5MDEyMzQ1Njc4.Gx1y2z.ABCdefGHIjklMNOpqrSTUvwxYZ123456"
    path = tmp_path / "config.yaml"
    path.write_text("platforms:\n  console: {enabled: false}\n"
                    f"  discord: {{enabled: true, token: '{token}', "
                    f"api_base: 'http://127.0.0.1:{port}/api/v10', "
                    f"gateway_url: 'ws://127.0.0.1:{port}/gateway'}}\n")
    proc = await asyncio.create_subprocess_exec(
        THREADLINE, "run", "--config", str(path), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(tmp_path),
        env=cli_env(tmp_path))
    assert proc.stderr is not None
    try:
        line = await asyncio.wait_for(proc.stderr.readline(), 30)
        while line and b"cannot connect" not in line:
            line = await asyncio.wait_for(proc.stderr.readline(), 30)
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
    rest = (await proc.stderr.read()).decode()
    assert b"discord: cannot connect" in line
    assert proc.returncode == 0, rest
    assert "ABCdefGHI" not in line.decode() + rest  # the token never reaches the output


async def test_sigterm_lets_the_running_turn_finish_then_exits_cleanly(tmp_path, fake_openai):
    import asyncio
    import signal

    from tests.harness.cli import THREADLINE, cli_env

    config = str(write_config(tmp_path, model={"base_url": fake_openai.base_url}))
    fake_openai.delay_next(1.0)
    proc = await asyncio.create_subprocess_exec(
        THREADLINE, "chat", "--config", config, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=str(tmp_path),
        env=cli_env(tmp_path))
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"slow question\n")
    await proc.stdin.drain()
    await fake_openai.wait_for_call("/chat/completions", timeout=30)
    proc.send_signal(signal.SIGTERM)  # stdin stays open: only the signal ends it
    await asyncio.wait_for(proc.wait(), 30)
    assert proc.stderr is not None
    out, err = await proc.stdout.read(), await proc.stderr.read()
    assert proc.returncode == 0, err
    assert out.decode().strip() == "echo: slow question"
    assert b"Traceback" not in err
