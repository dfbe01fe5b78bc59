"""`threadline --help` and every command's `--help` say what it does and show an example
(issue 37: "`--help` pages are terse")."""

from __future__ import annotations

import re

from tests.harness.cli import threadline


async def help_page(tmp_path, *command: str) -> str:
    ran = await threadline(*command, "--help", home=tmp_path)
    assert ran.code == 0, ran.err
    return ran.out


def choices(page: str) -> list[str]:
    """The commands a help page lists in its usage line: `{run,chat,...}`."""
    found = re.search(r"\{([a-z,]+)\}", page)
    assert found, page
    return found.group(1).split(",")


async def test_top_level_help_names_the_exit_codes_and_shows_examples(tmp_path):
    page = await help_page(tmp_path)
    assert "A chat gateway that never loses the thread" in page
    # The exit codes a service manager or a script acts on, as written (not re-wrapped).
    for line in ("  0    done", "  1    the command failed", "  78   fix something first",
                 "  threadline COMMAND --help"):
        assert f"\n{line}" in page, line


async def test_every_command_says_what_it_does_with_an_example(tmp_path):
    top = choices(await help_page(tmp_path))
    assert {"run", "chat", "sessions", "backup", "doctor"} <= set(top)
    commands = [[name] for name in top]
    for group in ("sessions", "trajectories"):
        commands += [[group, name] for name in choices(await help_page(tmp_path, group))]
    for command in commands:
        page = await help_page(tmp_path, *command)
        _, _, rest = page.partition("\n\n")
        description = rest.split("\n\n")[0]
        # A sentence or more before the arguments, not just the usage line.
        assert not description.startswith(("positional arguments", "options")), command
        assert len(description.split()) >= 8, (command, description)
        # An example of this very command, laid out as written.
        example = rf"\nexamples?:\n  threadline {' '.join(command)}\b"
        assert re.search(example, page), (command, page)
