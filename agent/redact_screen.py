"""Cheap pre-checks that let `agent.redact` skip text that cannot hold a secret.

Running every redaction pattern over every message costs far more than storing it, and
almost no text holds a secret. A screen here is a set of *necessary* conditions: for each
pattern, a test that every text the pattern would change passes. When no test passes, no
pattern can match, so the caller returns the text untouched; when one passes, the caller
runs its full, unchanged pass. A screen can therefore only skip work that would have found
nothing, never change a result; a test that passes too often only costs speed.

What is cheap: `char in text` is a memchr, nearly free; a regex that starts with a literal
is one fast prefix scan. A regex that can start with several characters is tried at every
position, so tests are grouped by a leading character and merged into one scan.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# (gate, regex, on_lower): the gate is one character every candidate contains (checked
# first, with memchr); the regex must find something in every candidate; on_lower says
# whether both are checked on the lower-cased text instead of the text.
Check = tuple[str, str, bool]


class Screen:
    """Necessary conditions for a set of patterns; `hits` is False only when none can match."""

    def __init__(self, checks: Iterable[Check | None]) -> None:
        groups: dict[tuple[str, bool], list[str]] = {}
        self._always = False
        for check in checks:
            if check is None:  # a pattern without a screen: never skip anything
                self._always = True
                continue
            gate, source, on_lower = check
            groups.setdefault((gate, on_lower), []).append(source)
        # One regex per gate. Sources sharing a gate are written to start with it, so the
        # merged regex keeps a literal prefix (the engine factors the common first
        # character out) and stays one fast scan.
        merged = {key: re.compile("|".join(sources)).search for key, sources in groups.items()}
        self._on_text = tuple((gate, search) for (gate, low), search in merged.items() if not low)
        self._on_lower = tuple((gate, search) for (gate, low), search in merged.items() if low)

    def hits(self, text: str, lower: str) -> bool:
        if self._always:
            return True
        for gate, search in self._on_text:
            if gate in text and search(text) is not None:
                return True
        for gate, search in self._on_lower:
            if gate in lower and search(lower) is not None:
                return True
        return False


def _alternation(words: Iterable[str]) -> str:
    """A regex for any of `words`, branching on one letter at a time: a miss costs one test.

    Used only to find whether some word is present, so a word that extends another
    (`keys` after `key`) is dropped: wherever it matches, the shorter one does too.
    """
    kept = sorted(set(words))
    return _trie([w for w in kept if not any(w != v and w.startswith(v) for v in kept)])


def _trie(words: list[str]) -> str:
    """Alternation of non-empty words, none a prefix of another, factored by first letter."""
    by_first: dict[str, list[str]] = {}
    for word in words:
        by_first.setdefault(word[0], []).append(word[1:])
    # A rest of "" is a whole word, and then the only one with that first letter.
    branches = [re.escape(first) + (_trie(rests) if rests != [""] else "")
                for first, rests in by_first.items()]
    return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"


class KeyScreen:
    """Whether lower-cased text has one of `keys` ending a key before `:`, `=` or `=>`
    (`hits`), or ending the name of a `--flag` (`flag_hits`).

    The value pass looks for `key: value`, `"key" = value`, `key => value` and the like,
    where the key must *end* with a secret word and may be followed by a quote, a
    backslash and blanks before its separator. Searched forwards, that needs one scan per
    word (or a slow scan that tries every word at every position). Reversed, with `=`
    rewritten to `:`, the separator comes first: one scan for `:`, then the blanks, the
    quote and backslash, and the reversed word, branching one letter at a time.
    """

    def __init__(self, keys: Iterable[str]) -> None:
        keys = tuple(keys)
        words = _alternation(key[::-1] for key in keys)
        # The forward form `key(\\?["']?)[ \t]*[:=]`, read backwards.
        self._search = re.compile(rf":[ \t]*[\"']?\\?{words}").search
        # A `--name value` flag counts when its name ends with a key; the name runs from
        # the `--` to a blank. Here a word may not be dropped for a shorter one it extends
        # (a blank must follow it), so this is a plain alternation, tried only at `--`.
        alternatives = "|".join(sorted(map(re.escape, keys), key=len, reverse=True))
        self._flag = re.compile(rf"--[a-z0-9_.-]*?(?:{alternatives})[ \t]").search

    def hits(self, lower: str) -> bool:
        return self._search(lower.replace("=", ":")[::-1]) is not None

    def flag_hits(self, lower: str) -> bool:
        return self._flag(lower) is not None
