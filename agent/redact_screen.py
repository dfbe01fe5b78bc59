"""One cheap pass that lets `agent.redact` skip text that cannot hold a secret.

Running every redaction pattern over every message costs far more than storing it, and
almost no text holds a secret. The screen is a set of *necessary* conditions: for each
pattern, a pattern that every text it would change also matches. When none matches, no
redaction pattern can change the text, so the caller returns it untouched; when a rule's
does, the caller runs its full, unchanged pass; when only value conditions do, it runs just
the parts of the value pass they stand for (each part of that pass looks for its own key
words, so a part whose words are absent finds nothing). A screen can therefore only skip
work that would have found nothing, never change a result; a condition that matches too
often only costs speed. `tests/agent/test_redact.py` checks that screened and full passes
agree.

All conditions run as one RE2 set (`google-re2`): a single left-to-right automaton pass over
the text answers for every pattern at once, where Python's `re` would need one scan per
pattern. RE2 has no look-behind and only ASCII `\\d` and `\\s`, so each condition is written as
a superset of its pattern's start: literal prefixes, and negated classes that exclude at most
what the pattern excludes.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Sequence

import re2


def _alternation(words: Iterable[str]) -> str:
    return "|".join(sorted(map(re2.escape, words), key=len, reverse=True))


def key_condition(words: Iterable[str]) -> str:
    """`key = value`, `"key": "value"`, `key => value` for a key ending in one of `words`:
    the word, an optional (escaped) quote and blanks, then the separator. Matched case-blind
    on the text, where the value pass reads the lower-cased copy: RE2's folding covers every
    character that lower-cases to an ASCII letter."""
    return rf"(?i)(?:{_alternation(words)})(?:\\?[\"'])?[ \t]*[:=]"


def flag_condition(words: Iterable[str]) -> str:
    """`--db-password value`: a flag whose name ends with one of `words`, then a blank."""
    return rf"(?i)--[a-z0-9_.-]*(?:{_alternation(words)})[ \t]"


_GROUP_CHARS = 1 << 16  # `Screen.candidates` joins and scans texts in groups this large


class Screen:
    """`check(text)` says which redaction passes could change `text` (see the module doc).

    `rules` are conditions for the fixed-shape rules; `values` are conditions for the parts
    of the value pass (key forms by key word, cookies, flags), in the caller's order.
    """

    def __init__(self, rules: Iterable[str], values: Iterable[str]) -> None:
        options = re2.Options()
        options.max_mem = 32 << 20  # room for the whole set as one DFA
        self._set = re2.Set.SearchSet(options)
        sources = list(rules)
        self._rules = len(sources)
        sources += values
        for source in sources:
            self._set.Add(source)
        self._set.Compile()
        # The same conditions as one pattern, for `candidates`. Only one can match a line
        # break, the backslash-newline that sends a text to the full pass, and it starts in
        # the text whose line it ends: one scan over texts joined by "\n" stands for a scan
        # of each text alone, at worst naming a text ending in a backslash for nothing.
        self._any = re2.compile("|".join(f"(?:{source})" for source in sources), options)

    def check(self, text: str) -> list[int] | None:
        """None when a rule's condition matches (the whole pass must run); otherwise the
        indices of the value conditions that match, [] when none does (nothing to do)."""
        hits = self._set.Match(text)
        if not hits:
            return []
        rules = self._rules
        if min(hits) < rules:
            return None
        return [hit - rules for hit in hits]

    def candidates(self, texts: Sequence[str]) -> list[int]:
        """The indices of the texts `check` would find anything in, in one scan of them all.

        A compaction screens ~2,000 rendered turns: an automaton pass over their join costs a
        fraction of 2,000 separate calls. The join is made in groups of about
        `_GROUP_CHARS` characters: buffers that small are recycled from the heap, where one
        join of the whole span (800 KB) was a fresh mapping every time, a page fault per
        4 KB, and a group is scanned while it is still in the core's cache.
        """
        ends = list(itertools.accumulate(map((1).__add__, map(len, texts))))
        found: list[int] = []
        start = 0
        while start < len(texts):
            reach = (ends[start - 1] if start else 0) + _GROUP_CHARS
            stop = max(start + 1, bisect.bisect_right(ends, reach, lo=start))
            found += [start + index for index in self._scan(texts[start:stop])]
            start = stop
        return found

    def _scan(self, texts: Sequence[str]) -> list[int]:
        """`candidates` for one group: its texts joined by "\n", one search loop over it.
        A text with a hit is skipped past at once, so the scan stops once per candidate,
        not once per match."""
        text = "\n".join(texts)
        if text.isascii():  # (a flag of the string, free) a byte per character: one copy
            joined, lengths = text.encode("ascii"), map(len, texts)
        else:  # encoded one by one: the join's width would make one encode of it slow
            try:
                encoded = list(map(str.encode, texts))
            except UnicodeEncodeError:  # a lone surrogate, which RE2 cannot read
                return list(range(len(texts)))
            joined, lengths = b"\n".join(encoded), map(len, encoded)
        # ends[i]: where text i's "\n" ends in the join, so a position's text is a bisection.
        ends = list(itertools.accumulate(map((1).__add__, lengths)))
        search = self._any.search
        found: list[int] = []
        pos = 0
        while (hit := search(joined, pos)) is not None:
            index = bisect.bisect_right(ends, hit.start())
            found.append(index)
            pos = ends[index]
        return found
