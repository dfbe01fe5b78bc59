"""Deterministic secret redaction for stored text, summarizer input and log lines (docs/architecture.md, "Secrets")."""

from __future__ import annotations

import base64
import binascii
import re
import string
from collections.abc import Callable, Sequence
from typing import Any

from agent.redact_screen import Screen
from agent.redact_values import REDACTED, machine_made, redact_values, value_conditions

_Replace = str | Callable[[re.Match[str]], str]


# Characters that continue a token: a key match preceded by one is inside a longer word.
_WORD = frozenset(string.ascii_letters + string.digits + "_-")


class _Rule:
    """One pattern plus the cheap checks that must pass before it is worth running.

    Patterns start with a literal where possible: the regex engine then scans with a fast
    prefix search, which a leading look-behind would disable. The "not inside a word" check
    that a look-behind would do runs in Python, only on actual matches.

    Every pattern runs in linear time (docs/architecture.md, "Secrets"). One whose literal
    starts a run of characters it reads (`eyJ` in a token, `mysql` in a word) has an
    alternative named `skip`, matched with the whole run when no secret follows it, which
    leaves the text as it was: the engine resumes after the run, where it would otherwise
    retry from every later literal inside it, each bound to reach the same run end and fail.
    """

    __slots__ = ("pattern", "replace", "triggers", "lowered", "quick", "not_after", "screen",
                 "skips")

    def __init__(self, pattern: str, replace: _Replace, triggers: tuple[str, ...], *,
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
        if self.not_after and start and match.string[start - 1] in self.not_after:
            return match.group(0)
        if self.skips and match["skip"] is not None:
            return match.group(0)
        return self.replace if isinstance(self.replace, str) else self.replace(match)


def _keep_prefix(match: re.Match[str]) -> str:
    """Keep the groups, all before the secret (a header name, a URL up to the password, a
    command line up to -p), and replace the rest."""
    return "".join(match.groups("")) + REDACTED


def _discord(match: re.Match[str]) -> str:
    # The shape alone also fits some dotted identifiers; a real bot token's first part is the
    # base64 of the bot's numeric user id, which is a cheap and decisive check.
    first = match.group(1)
    try:
        decoded = base64.urlsafe_b64decode(first + "=" * (-len(first) % 4))
    except (binascii.Error, ValueError):
        return match.group(0)
    return REDACTED if decoded.isdigit() else match.group(0)


def _bearer(match: re.Match[str]) -> str:
    # "Bearer" also starts prose ("use a Bearer token"); without a header name around it,
    # only a value that looks generated is taken for a credential.
    return match.group(1) + REDACTED if machine_made(match.group(2)) else match.group(0)


_TOKEN = r"[A-Za-z0-9_-]"
# Armored key labels: PEM (`RSA PRIVATE KEY`) and PGP (`PGP PRIVATE KEY BLOCK`).
_KEY_LABEL = r"[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
# An armored body line: base64 (a PGP checksum starts with `=`) or a `Version: x` header,
# ending at a line break (or a JSON `\n`) so words after an unterminated block survive.
_KEY_BREAK = r"(?:\r?\n|(?:\\r)?\\n)"
_KEY_LINE = r"(?:[A-Za-z0-9+/=]+|[A-Za-z-]+: [^\r\n\\]*)(?![^\r\n\\])"


class _KeyBlocks(_Rule):
    """Private keys, whole: from BEGIN to the next END, or, when no END follows, BEGIN and
    the body lines after it (allowing the one empty line PGP puts after its headers).

    As one pattern, `BEGIN(?:.*?END|body)` scanned from every BEGIN to the end of a text
    that has no END after it; here the next END is looked up once, for every BEGIN before it.
    """

    _END = re.compile(rf"-----END{_KEY_LABEL}")
    _BODY = re.compile(rf"(?:{_KEY_BREAK}{_KEY_BREAK}?{_KEY_LINE})*")

    def __init__(self) -> None:
        super().__init__(rf"-----BEGIN{_KEY_LABEL}", REDACTED, ("-----BEGIN",),
                         screen="-----BEGIN")

    def apply(self, text: str, lower: str) -> str:
        if "-----BEGIN" not in text:
            return text
        pieces: list[str] = []
        done = 0  # text[:done] is already in pieces
        end = self._END.search(text)
        while (begin := self.pattern.search(text, done)) is not None:
            if end is not None and end.start() < begin.end():
                end = self._END.search(text, begin.end())  # the last one ended before it
            stop = end.end() if end is not None else self._BODY.match(text, begin.end()).end()
            pieces += (text[done:begin.start()], REDACTED)
            done = stop
        pieces.append(text[done:])
        return "".join(pieces)


# Order matters: whole blocks and headers first, then prefixed keys, so an
# `api_key=sk-...` line is caught by the specific rule before the generic assignment pass.
_RULES: tuple[_Rule, ...] = (
    _KeyBlocks(),
    # Authorization headers (also JSON-quoted): keep the name and scheme, drop the value.
    # Gated by its trigger on the lower-cased text: the (?i) pattern also matches a few
    # non-ASCII look-alikes that lower-casing keeps apart.
    # The blanks are possessive: the value cannot start with one, and where the two runs
    # around the optional quote could share a run of blanks every split was tried.
    _Rule(r"(?i)(authorization[\"']?[ \t]*+[:=][ \t]*+[\"']?[ \t]*+"
          r"(?:(?:bearer|basic|token|digest|bot)[ \t]++)?)[^\s\"',;]+",
          _keep_prefix, ("authorization",), screen="(?i)authorization", lowered=True),
    # A trailing full stop ends the sentence, not the value.
    _Rule(r"(Bearer[ \t]+)([A-Za-z0-9._~+/=-]*[A-Za-z0-9_~+/=-])", _bearer, ("Bearer",),
          screen="Bearer[ \t]", not_after=_WORD),
    # scheme://user:password@host. A pasted password may hold a raw `@` or `/`, so it runs
    # to the last `@` before whitespace, a quote or the next `://` (which keeps a run of URLs
    # linear); an `@` later in the path over-redacts, the safe way to be wrong.
    # Runs without `@` or `:` are taken whole: the password ends before the last `@`, at
    # the end of a repetition, and one repetition per character was one saved state each.
    _Rule(r"(://[^\s/:@\"'<>]*:)(?:[^\s\"'<>:@]++|:(?!//)|@)+(?=@)", _keep_prefix, ("://",),
          screen=r"://[^\s/:@\"'<>]*:"),
    # MySQL clients take the password glued to -p (`mysql -u root -pS3cret db`). Elsewhere
    # -p is a port, a parent directory or a prompt, so it counts only on a mysql or mariadb
    # command line, within 40 words and before a `;`, `&` or `|` ends it. Linear time: a
    # client name reads at most 41 words, each once, and never gives back part of one.
    _Rule(r"((?:mysql|mariadb)[\w.-]*+)(?:((?:[ \t]++[^\s;&|]++){0,40}?[ \t]++-p)"
          r"(?:\"[^\"\r\n]*\"|'[^'\r\n]*'|[^\s;&|]+)|(?P<skip>))",
          _keep_prefix, ("-p",),  # one scan for the rarer half, not one per client name
          screen=r"(?:mysql|mariadb)[^\n]*[ \t]-p"),
    # Vendor keys with a fixed prefix. Hyphens and underscores belong to the key, so no
    # tail survives (sk-ant-api03-..., sk-proj-...).
    _Rule(rf"sk-{_TOKEN}{{20,}}", REDACTED, ("sk-",), screen="sk-",
          not_after=_WORD),
    _Rule(r"[rs]k_(?:live|test)_[A-Za-z0-9]{16,}", REDACTED, ("k_",),
          screen="[rs]k_(?:live|test)_",
          not_after=_WORD),  # Stripe secret and restricted keys
    _Rule(r"gh[pousr]_[A-Za-z0-9]{20,}", REDACTED, ("gh",), screen="gh[pousr]_",
          not_after=_WORD),
    _Rule(r"github_pat_[A-Za-z0-9_]{20,}", REDACTED, ("github_pat_",),
          screen="github_pat_", not_after=_WORD),
    _Rule(rf"glpat-{_TOKEN}{{20,}}", REDACTED, ("glpat-",), screen="glpat-",
          not_after=_WORD),
    _Rule(r"x(?:ox[abposr]|app)-[A-Za-z0-9-]{10,}", REDACTED, ("xox", "xapp-"),
          screen="x(?:ox[abposr]|app)-", not_after=_WORD),
    _Rule(r"A[KS]IA[A-Z0-9]{16}(?![A-Za-z0-9])", REDACTED, ("AKIA", "ASIA"),
          screen="A[KS]IA", not_after=_WORD),
    _Rule(rf"AIza{_TOKEN}{{35}}", REDACTED, ("AIza",), screen="AIza",
          not_after=_WORD),
    _Rule(r"hf_[A-Za-z0-9]{30,}", REDACTED, ("hf_",), screen="hf_",
          not_after=_WORD),
    _Rule(rf"eyJ(?:{_TOKEN}{{8,}}+\.eyJ{_TOKEN}{{8,}}+\.{_TOKEN}*+|(?P<skip>{_TOKEN}*+))",
          REDACTED, ("eyJ",),
          screen="eyJ", not_after=_WORD),
    # Telegram bot token: numeric bot id, colon, 35 characters (also inside /bot<id>:<..>/).
    _Rule(rf"\d{{6,12}}:{_TOKEN}{{35}}(?!{_TOKEN})", REDACTED, (":",),
          quick=rf":{_TOKEN}{{35}}", screen=rf":{_TOKEN}{{35}}",
          not_after=frozenset(string.digits)),
    # Discord bot token: base64(user id) . timestamp . hmac; the id is verified in _discord.
    _Rule(rf"([MNO][A-Za-z0-9]{{23,27}})\.{_TOKEN}{{6}}\.{_TOKEN}{{27,38}}(?!{_TOKEN})",
          _discord, (".",), quick=rf"\.{_TOKEN}{{6}}\.{_TOKEN}{{27}}",
          screen=rf"\.{_TOKEN}{{6}}\.{_TOKEN}{{27}}", not_after=_WORD),
)

_SCREEN = Screen((rule.screen for rule in _RULES), value_conditions())


def _lower(text: str) -> str:
    """Lower-case text, position for position (str.lower may lengthen a few code points)."""
    lower = text.lower()
    return lower if len(lower) == len(text) else text.translate(_ASCII_LOWER)


_ASCII_LOWER = {c: c + 32 for c in range(ord("A"), ord("Z") + 1)}


def redact(text: str) -> str:
    """Replace every secret the patterns know with REDACTED; idempotent."""
    if not text:
        return text
    try:
        parts = _SCREEN.check(text)
    except UnicodeEncodeError:  # a lone surrogate, which RE2 cannot read: no shortcut
        parts = None
    if parts is None:
        return _redact_all(text, _lower(text))
    # No rule can match, so the rules would leave the text as it is: only the value pass
    # can still change it, and only its parts whose key candidates the screen found.
    return redact_values(text, _lower(text), parts) if parts else text


def redact_each(texts: Sequence[str]) -> list[str]:
    """`[redact(t) for t in texts]`, with one screening scan over them all instead of one
    per text: most of a compaction's ~2,000 rendered turns hold nothing to redact."""
    out = list(texts)
    for index in _SCREEN.candidates(out):
        out[index] = redact(out[index])
    return out


def _redact_all(text: str, lower: str) -> str:
    """Every rule, then the value pass: the full pass the screens let most text skip."""
    original = text
    for rule in _RULES:
        # `lower` may be stale after a replacement; it only gates triggers, and a
        # replacement never adds one, so a stale copy costs at most a wasted regex run.
        text = rule.apply(text, lower)
    if text is not original:
        lower = _lower(text)  # the value pass reads positions, so it must be fresh
    return redact_values(text, lower)


def _redact_value(value: Any) -> Any:
    """Redact a content value (string or list of parts); the same object when unchanged."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list):
        parts = [_redact_part(p) for p in value]
        if any(new is not old for new, old in zip(parts, value, strict=True)):
            return parts
    return value


def _redact_part(part: Any) -> Any:
    if not isinstance(part, dict):
        return part
    changes: dict[str, Any] = {}
    for key in ("text", "content"):  # text blocks; Anthropic-style tool_result blocks
        if key in part:
            new = _redact_value(part[key])
            if new is not part[key]:
                changes[key] = new
    if "input" in part and isinstance(part["input"], str):  # tool_use input given as text
        new = redact(part["input"])
        if new != part["input"]:
            changes["input"] = new
    return {**part, **changes} if changes else part


def _redact_tool_calls(calls: Any) -> Any:
    if not isinstance(calls, list):
        return calls
    out: list[Any] = []
    changed = False
    for call in calls:
        fn = call.get("function") if isinstance(call, dict) else None
        args = fn.get("arguments") if isinstance(fn, dict) else None
        if isinstance(args, str):
            new_args = redact(args)
            if new_args != args:
                call = {**call, "function": {**fn, "arguments": new_args}}
                changed = True
        out.append(call)
    return out if changed else calls


def redact_message(msg: dict[str, Any]) -> dict[str, Any]:
    """A redacted copy of an OpenAI-format message; the same object when nothing changed."""
    changes: dict[str, Any] = {}
    for key in ("content", "reasoning_content", "reasoning"):
        if key in msg:
            old = msg[key]
            new = _redact_value(old)
            if new is not old and new != old:
                changes[key] = new
    if "tool_calls" in msg:
        new_calls = _redact_tool_calls(msg["tool_calls"])
        if new_calls is not msg["tool_calls"]:
            changes["tool_calls"] = new_calls
    return {**msg, **changes} if changes else msg
