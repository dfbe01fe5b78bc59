"""One fixed-shape redaction rule: a pattern, the cheap checks before it, and its screen.

`agent.redact` runs the rules in order; `agent.redact_vendors` and `agent.redact_blocks`
hold most of them (docs/architecture.md, "Secrets").
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Sequence

import re2

from agent.redact_values import REDACTED

Replace = str | Callable[[re.Match[str]], str]

# Characters that continue a token: a key match preceded by one is inside a longer word.
WORD = frozenset(string.ascii_letters + string.digits + "_-")


class Rule:
    """One pattern plus the cheap checks that must pass before it is worth running.

    Patterns start with a literal where possible: the regex engine then scans with a fast
    prefix search, which a leading look-behind would disable. The "not inside a word" check
    that a look-behind would do runs in Python, only on actual matches; an escape before a
    token (`%3D`, a JSON `\\n`) does not count as a word.

    Every pattern runs in linear time (docs/architecture.md, "Secrets"). One whose literal
    starts a run of characters it reads (`eyJ` in a token, `mysql` in a word) has an
    alternative named `skip`, matched with the whole run when no secret follows it, which
    leaves the text as it was: the engine resumes after the run, where it would otherwise
    retry from every later literal inside it, each bound to reach the same run end and fail.
    """

    __slots__ = ("pattern", "replace", "triggers", "lowered", "quick", "not_after", "screen",
                 "skips")

    def __init__(self, pattern: str, replace: Replace, triggers: tuple[str, ...], *,
                 screen: str, lowered: bool = False,
                 quick: str | None = None, not_after: frozenset[str] = frozenset()) -> None:
        self.pattern = re.compile(pattern)
        self.replace = replace
        self.triggers = triggers
        self.lowered = lowered  # triggers are matched against the lower-cased text
        self.quick = re.compile(quick) if quick else None  # a must-match literal-led precheck
        self.not_after = not_after
        # For agent.redact_screen: an RE2 pattern that every text this rule changes matches.
        self.screen = screen
        self.skips = "skip" in self.pattern.groupindex

    def apply(self, text: str, lower: str) -> str:
        haystack = lower if self.lowered else text
        for trigger in self.triggers:  # a plain loop: cheaper than any() over a generator
            if trigger in haystack:
                break
        else:
            return text
        if self.quick is not None and self.quick.search(text) is None:
            return text
        return self.pattern.sub(self._replace, text)

    def _replace(self, match: re.Match[str]) -> str:
        start = match.start()
        if (self.not_after and start and match.string[start - 1] in self.not_after
                and not _escaped(match.string, start)):
            return match.group(0)
        if self.skips and match["skip"] is not None:
            return match.group(0)
        return self.replace if isinstance(self.replace, str) else self.replace(match)


def _escaped(text: str, start: int) -> bool:
    """Whether the word character before `start` ends an escape, not a word: a URL-encoded
    separator (`%3D`) or a JSON line break or tab (`\\n`, `\\t`)."""
    return (start >= 3 and text[start - 3] == "%"
            or start >= 2 and text[start - 2] == "\\" and text[start - 1] in "nrt")


def keep_prefix(match: re.Match[str]) -> str:
    """Keep the groups, all before the secret (a header name, a URL up to the password, a
    command line up to -p), and replace the rest."""
    return "".join(match.groups("")) + REDACTED


def vendor(pattern: str, *triggers: str, screen: str, keep: bool = False,
           quick: str | None = None, inside: bool = False) -> Rule:
    """A key known by its shape (a vendor prefix, a webhook URL), never inside a longer word
    unless `inside` (a URL path); `keep` keeps the groups before it (`hooks.slack.com/...`)."""
    return Rule(pattern, keep_prefix if keep else REDACTED, triggers, screen=screen,
                quick=quick, not_after=frozenset() if inside else WORD)


class Triggers:
    """Which of `rules` a text holds a trigger of, in one RE2 pass: a substring search per
    trigger (about 80) cost more than the rest of the full pass on ordinary text.

    A replacement never adds a trigger (`[REDACTED]` holds none, and none holds a bracket
    that could span its edges; tests/agent/test_redact.py checks both), so the rules the
    original text triggers bound those each later state of it does: a rule left out would
    have returned at its own trigger check. Lower-cased triggers are matched case-blind,
    a superset of finding them in the lower-cased copy.
    """

    def __init__(self, rules: Sequence[Rule]) -> None:
        options = re2.Options()
        options.max_mem = 8 << 20
        self._set = re2.Set.SearchSet(options)
        self._owner: list[int] = []
        for index, rule in enumerate(rules):
            for trigger in rule.triggers:
                self._set.Add(("(?i)" if rule.lowered else "") + re2.escape(trigger))
                self._owner.append(index)
        self._set.Compile()
        self._every = range(len(rules))

    def of(self, text: str) -> Sequence[int]:
        """The indices of the rules worth running on `text`, in order."""
        try:
            hits = self._set.Match(text)
        except UnicodeEncodeError:  # a lone surrogate, which RE2 cannot read: all of them
            return self._every
        if not hits:
            return ()
        owner = self._owner
        return sorted({owner[hit] for hit in hits})
