"""One cheap pass that lets `agent.redact` skip text that cannot hold a secret.

Running every redaction pattern over every message costs far more than storing it, and
almost no text holds a secret. The screen is a set of *necessary* conditions: for each
pattern, a pattern that every text it would change also matches. When none matches, no
redaction pattern can change the text, so the caller returns it untouched; when one does,
the caller runs its full, unchanged pass. A screen can therefore only skip work that would
have found nothing, never change a result; a condition that matches too often only costs
speed. `tests/agent/test_redact.py` checks that screened and full passes agree.

All conditions run as one RE2 set (`google-re2`): a single left-to-right automaton pass over
the text answers for every pattern at once, where Python's `re` would need one scan per
pattern. RE2 has no look-behind and only ASCII `\\d` and `\\s`, so each condition is written as
a superset of its pattern's start: literal prefixes, and negated classes that exclude at most
what the pattern excludes.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import IntEnum

import re2


class Found(IntEnum):
    NOTHING = 0  # no pattern can change the text
    VALUES = 1  # only the key/flag/cookie value pass can
    RULES = 2  # some rule may: run everything


class Screen:
    """`check(text)` says which redaction passes could change `text` (see the module doc).

    `rules` are conditions for the fixed-shape rules; `keys` are the words whose
    `key = value` forms the value pass redacts.
    """

    def __init__(self, rules: Iterable[str], keys: Iterable[str]) -> None:
        options = re2.Options()
        options.max_mem = 32 << 20  # room for the whole set as one DFA
        self._set = re2.Set.SearchSet(options)
        self._rules = 0
        for source in rules:
            self._set.Add(source)
            self._rules += 1
        words = "|".join(sorted(map(re2.escape, keys), key=len, reverse=True))
        # `key = value`, `"key": "value"`, `key => value`: the key word, an optional
        # (escaped) quote and blanks, then the separator. Matched case-blind on the text,
        # where the value pass reads the lower-cased copy: RE2's folding covers every
        # character that lower-cases to an ASCII letter.
        self._set.Add(rf"(?i)(?:{words})(?:\\?[\"'])?[ \t]*[:=]")
        # `--db-password value`: a flag whose name ends with a key word, then a blank.
        self._set.Add(rf"(?i)--[a-z0-9_.-]*(?:{words})[ \t]")
        self._set.Compile()

    def check(self, text: str) -> Found:
        hits = self._set.Match(text)
        if not hits:
            return Found.NOTHING
        return Found.RULES if min(hits) < self._rules else Found.VALUES
