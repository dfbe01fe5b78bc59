"""Deterministic secret redaction for stored text, summarizer input and log lines (docs/architecture.md, "Secrets")."""

from __future__ import annotations

import base64
import binascii
import re
import string
from collections.abc import Sequence
from typing import Any

from agent.redact_blocks import (
    CONTINUATION_SCREEN,
    KeyBlocks,
    KubernetesSecrets,
    has_continuation,
    join_continuations,
    putty_key,
)
from agent.redact_placeholders import machine_made, placeholder
from agent.redact_rule import WORD, Rule, Triggers, keep_prefix
from agent.redact_screen import Screen
from agent.redact_values import REDACTED, redact_values, value_conditions
from agent.redact_vendors import VENDOR_RULES

__all__ = ["REDACTED", "redact", "redact_each", "redact_message"]


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
    value = match.group(2)
    return match.group(1) + REDACTED if machine_made(value) and not placeholder(value) \
        else match.group(0)


def _unless_placeholder(match: re.Match[str]) -> str:
    """`keep_prefix`, unless what follows the groups stands in for a secret
    (`Authorization: Bearer <token>`, `postgres://user:${DB_PASSWORD}@db`)."""
    kept = "".join(match.groups(""))
    return match.group(0) if placeholder(match.group(0)[len(kept):]) else kept + REDACTED


_TOKEN = r"[A-Za-z0-9_-]"

# Order matters: whole blocks and headers first, then prefixed keys, so an
# `api_key=sk-...` line is caught by the specific rule before the generic assignment pass.
_RULES: tuple[Rule, ...] = (
    KeyBlocks(),
    KubernetesSecrets(),
    putty_key(),
    # Authorization headers (also JSON-quoted): keep the name and scheme, drop the value.
    # Gated by its trigger on the lower-cased text: the (?i) pattern also matches a few
    # non-ASCII look-alikes that lower-casing keeps apart.
    # The blanks are possessive: the value cannot start with one, and where the two runs
    # around the optional quote could share a run of blanks every split was tried.
    Rule(r"(?i)(authorization[\"']?[ \t]*+[:=][ \t]*+[\"']?[ \t]*+"
         r"(?:(?:bearer|basic|token|digest|bot)[ \t]++)?)[^\s\"',;]+",
         _unless_placeholder, ("authorization",), screen="(?i)authorization", lowered=True),
    # A trailing full stop ends the sentence, not the value.
    Rule(r"(Bearer[ \t]+)([A-Za-z0-9._~+/=-]*[A-Za-z0-9_~+/=-])", _bearer, ("Bearer",),
         screen="Bearer[ \t]", not_after=WORD),
    # scheme://user:password@host. A pasted password may hold a raw `@` or `/`, so it runs
    # to the last `@` before whitespace, a quote or the next `://` (which keeps a run of URLs
    # linear); an `@` later in the path over-redacts, the safe way to be wrong.
    # Runs without `@` or `:` are taken whole: the password ends before the last `@`, at
    # the end of a repetition, and one repetition per character was one saved state each.
    Rule(r"(://[^\s/:@\"'<>]*:)(?:[^\s\"'<>:@]++|:(?!//)|@)+(?=@)", _unless_placeholder,
         ("://",), screen=r"://[^\s/:@\"'<>]*:"),
    # MySQL clients take the password glued to -p (`mysql -u root -pS3cret db`). Elsewhere
    # -p is a port, a parent directory or a prompt, so it counts only on a mysql or mariadb
    # command line, within 40 words and before a `;`, `&` or `|` ends it. Linear time: a
    # client name reads at most 41 words, each once, and never gives back part of one.
    Rule(r"((?:mysql|mariadb)[\w.-]*+)(?:((?:[ \t]++[^\s;&|]++){0,40}?[ \t]++-p)"
         r"(?:\"[^\"\r\n]*\"|'[^'\r\n]*'|[^\s;&|]+)|(?P<skip>))",
         keep_prefix, ("-p",),  # one scan for the rarer half, not one per client name
         screen=r"(?:mysql|mariadb)[^\n]*[ \t]-p"),
    *VENDOR_RULES,
    # JSON Web Tokens and JWEs: base64 of a JSON object (`eyJ`) and the dotted parts after
    # it, whatever they hold (`e30` is an empty payload). A run too short to be one is
    # matched whole as `skip`, so a run of `eyJ` is read once.
    Rule(rf"eyJ(?:{_TOKEN}{{12,}}+(?:\.(?=[A-Za-z0-9_.-]){_TOKEN}*+)*+|(?P<skip>{_TOKEN}*+))",
         REDACTED, ("eyJ",), screen="eyJ", not_after=WORD),
    # Telegram bot token: numeric bot id, colon, 35 characters (also inside /bot<id>:<..>/).
    Rule(rf"[0-9]{{6,12}}:{_TOKEN}{{35}}(?!{_TOKEN})", REDACTED, (":",),
         quick=rf":{_TOKEN}{{35}}", screen=rf":{_TOKEN}{{35}}",
         not_after=frozenset(string.digits)),
    # Discord bot token: base64(user id) . timestamp . hmac; the id is verified in _discord.
    Rule(rf"([MNO][A-Za-z0-9]{{23,27}})\.{_TOKEN}{{6}}\.{_TOKEN}{{27,38}}(?!{_TOKEN})",
         _discord, (".",), quick=rf"\.{_TOKEN}{{6}}\.{_TOKEN}{{27}}",
         screen=rf"\.{_TOKEN}{{6}}\.{_TOKEN}{{27}}", not_after=WORD),
)

_TRIGGERS = Triggers(_RULES)
# A backslash-newline sends a text to the full pass, which reads it joined as well.
_SCREEN = Screen([*(rule.screen for rule in _RULES), CONTINUATION_SCREEN], value_conditions())


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
    """Every rule, then the value pass: the full pass the screens let most text skip. A
    text with lines continued by a backslash is also read joined, and when the join shows a
    secret the lines hid (a key wrapped across them), the joined text is what is kept."""
    out = _rules_then_values(text, lower)
    if has_continuation(out):
        joined = join_continuations(out)
        again = _rules_then_values(joined, _lower(joined))
        if again != joined:
            return again
    return out


def _rules_then_values(text: str, lower: str) -> str:
    original = text
    for index in _TRIGGERS.of(text):
        # `lower` may be stale after a replacement; it only gates triggers, and a
        # replacement never adds one, so a stale copy costs at most a wasted regex run.
        text = _RULES[index].apply(text, lower)
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
