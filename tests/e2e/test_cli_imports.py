"""What the `threadline` command loads before it answers (issue 37, point 10): `--help`
needs the standard library alone, and a read of the database needs the config and the
store, never a platform library, a provider SDK or the gateway itself. The speed that
follows is bench/cli_start.py's business; here, only which modules a real run loads."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from storage.sqlite.store import SqliteSessionStore
from tests.harness.cli import cli_env

# Runs `main(ARGV)` the way the console script does and, at exit (after main's
# SystemExit), writes the modules it loaded beyond the probe's own to OUT.
PROBE = """
import atexit, json, sys
out, argv = sys.argv[1], sys.argv[2:]
before = set(sys.modules)
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(set(sys.modules) - before))))
from gateway.cli import main
main(argv)
"""

# What the commands that serve chats load, and nothing that reads or lists may.
PLATFORM_LIBRARIES = {"telegram", "discord", "aiohttp"}
PROVIDER_SDKS = {"openai", "anthropic", "llama_cpp", "httpx"}
ATTACHMENT_READERS = {"pypdf", "PIL"}
SERVING_CODE = ("gateway.service.app", "gateway.wiring", "agent.providers", "platforms")


async def loaded_by(home: Path, *argv: str) -> tuple[int, str, list[str]]:
    """Exit code, stdout and the modules `threadline ARGV` loaded, in a fresh process."""
    out = home / "modules.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PROBE, str(out), *argv, cwd=str(home), env=cli_env(home),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert out.exists(), stderr.decode()
    assert proc.returncode is not None
    return proc.returncode, stdout.decode(), json.loads(out.read_text())


def outside_stdlib(modules: list[str]) -> set[str]:
    return {m for m in modules if m.split(".")[0] not in sys.stdlib_module_names}


async def test_help_loads_the_standard_library_and_its_own_words_only(tmp_path):
    code, out, modules = await loaded_by(tmp_path, "--help")
    assert code == 0 and "usage: threadline" in out
    # Not the config (pydantic, yaml), not the store: none of it is needed to print help.
    assert outside_stdlib(modules) <= {"gateway", "gateway.cli", "gateway.cli.dispatch",
                                      "gateway.cli.help"}


async def test_sessions_list_loads_no_platform_provider_or_serving_code(tmp_path):
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    store = SqliteSessionStore(home / "threadline.db")  # what `run` or `chat` would create
    await store.initialize()
    await store.create_root_session("console:local", model="m", system_prompt="s")
    await store.shutdown()
    code, out, modules = await loaded_by(home, "sessions", "list")
    assert code == 0 and "console:local" in out  # the real path, to the end
    tops = {m.split(".")[0] for m in modules}
    assert tops & (PLATFORM_LIBRARIES | PROVIDER_SDKS | ATTACHMENT_READERS) == set()
    assert [m for m in modules if m.startswith(SERVING_CODE)] == []
    assert "gateway.config" in modules and "storage.sqlite.store" in modules
