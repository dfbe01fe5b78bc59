"""README.md stays true to the product (issue 37, point 8): every command the CLI parser
has, with its options, and every config key the config model has are documented; the
quick start is the two commands that set everything up; every doc it points to exists."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from pydantic import BaseModel

from gateway.cli.dispatch import _parser
from gateway.config import Config

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


def readme() -> str:
    return README.read_text(encoding="utf-8")


def commands(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()
             ) -> list[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    """Every command of the real parser, nested ones included: (("sessions", "list"), p)."""
    found = []
    # argparse has no public way to list subcommands; cli_help.py reads them the same way.
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.append(((*words, name), sub))
                found += commands(sub, (*words, name))
    return found


def options(parser: argparse.ArgumentParser) -> list[str]:
    """A command's own long options; --help and --config, which every command has, aside."""
    return [flag for action in parser._actions for flag in action.option_strings
            if flag.startswith("--") and flag not in ("--help", "--config")]


def config_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    """Every key of the config, dotted: `model`, `model.provider`, ... (sections recursed)."""
    keys = []
    for name, field in model.model_fields.items():
        keys.append(prefix + name)
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            keys += config_keys(field.annotation, f"{prefix}{name}.")
    return keys


def section(text: str, title: str) -> str:
    """The body of the `## title` section."""
    found = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert found, f"README.md has no '## {title}' section"
    return found.group(1)


def test_the_parser_walk_finds_nested_commands_and_options():
    # Guards the walk itself: an empty walk would make the next test pass on anything.
    found = {words: options(p) for words, p in commands(_parser())}
    assert ("run",) in found and ("sessions", "list") in found
    assert ("trajectories", "compress") in found
    assert found[("web",)] == ["--port", "--new-token"]


def test_every_command_has_a_line_with_its_options():
    text = section(readme(), "Commands")
    missing = []
    for words, parser in commands(_parser()):
        name = "threadline " + " ".join(words)
        lines = [line for line in text.splitlines()
                 if re.search(rf"{re.escape(name)}(?![\w-])", line)]
        flags = options(parser)
        if not any(all(flag in line for flag in flags) for line in lines):
            missing.append(f"`{name}`" + (f" with {', '.join(flags)}" if flags else ""))
    assert not missing, ("README.md's command table lacks: "
                         + "; ".join(missing))


def test_every_config_key_is_documented():
    keys = config_keys(Config)
    assert {"model", "metrics.port", "platforms.telegram.webhook.port"} <= set(keys)
    text = readme()
    missing = [key for key in keys if not re.search(rf"`{re.escape(key)}[`.]", text)]
    assert not missing, "README.md does not mention these config keys: " + ", ".join(missing)


def test_every_top_level_key_has_its_table():
    text = readme()
    missing = [key for key in Config.model_fields
               if not re.search(rf"^\| `{re.escape(key)}[`.]", text, re.M)]
    assert not missing, "no table row for: " + ", ".join(missing)


def test_the_quick_start_is_make_run_and_make_test():
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```", section(readme(), "Quick start"),
                        re.M | re.S)
    lines = [line.strip() for block in blocks for line in block.splitlines() if line.strip()]
    assert lines == ["make run", "make test"]


def test_every_doc_exists_and_is_linked():
    text = readme()
    named = set(re.findall(r"docs/[\w./-]+?\.md", text))
    assert named, "README.md links to no docs/"
    assert not [doc for doc in named if not (ROOT / doc).is_file()], "dead links"
    unlinked = [doc.relative_to(ROOT).as_posix() for doc in sorted((ROOT / "docs").glob("*.md"))
                if doc.relative_to(ROOT).as_posix() not in named]
    assert not unlinked, "README.md does not point to: " + ", ".join(unlinked)
