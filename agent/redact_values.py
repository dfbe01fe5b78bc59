"""The value pass of `agent.redact`: secrets that follow a key, a flag or a cookie header.

`key = value`, `"key": "value"`, `key => value`, `--password value` and `Cookie:` values are
found by the key or flag before them, not by the secret's shape. The pass runs in parts
(one per key word, then cookies, then flags) so the screen can name the parts worth
running (`agent/redact_screen.py`, docs/architecture.md "Secrets").
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Iterator

from agent.redact_placeholders import machine_made, not_a_secret, placeholder
from agent.redact_screen import flag_condition, key_condition

REDACTED = "[REDACTED]"

# Keys whose value is a secret. The word must end the key (`DB_PASSWORD`, `apiKey`,
# `"client_secret"`), so counts like `max_tokens` and words like `author` are left alone.
# Beyond the generic words: Azure connection strings (`AccountKey=`, `SharedAccessKey=`),
# service-account JSON (`private_key_id`), Rails, Datadog and New Relic keys, and the
# kubeconfig's base64 client key (`client-key-data`).
_SECRET_KEYS: tuple[str, ...] = tuple(
    ["password", "passwd", "passphrase", "pwd", "secret", "token", "auth", "credential",
     "credentials", "apikey", "accesskey", "privatekey", "secretkey", "access_key_id",
     "access-key-id", "accountkey", "sharedaccesskey", "private_key_id", "secret_key_base",
     "appkey", "masterkey"]
    + [f"{a}{sep}key" for a in ("api", "access", "private", "secret", "account", "app",
                                "application", "master", "license", "encryption", "signing")
       for sep in "_-"]
    + [f"key{sep}data" for sep in "_-"]
)
_PASSWORD_KEYS = ("pass", "password", "passwd", "passphrase", "pwd")  # people choose these
_KEY_CHARS = frozenset(string.ascii_lowercase + string.digits)
_NAME_CHARS = _KEY_CHARS | {"_"}
# A quoted value. The third form is a JSON string inside a JSON string (tool arguments),
# whose own escapes arrive doubled: `\\\"` is a quote inside the value, `\"` ends it.
# Plain characters are taken a run at a time (a repeated group costs the engine a step and
# a saved state per repetition), and nothing is given back: a body stops only where its
# closing quote must follow.
_QUOTED_VALUE = re.compile(r"[ \t]*+(?:\"((?:[^\"\\\n]++|\\.)++)\"|'((?:[^'\\\n]++|\\.)++)'|"
                           r"\\\"((?:[^\"\\\n]++|\\[^\"\\\n]|\\\\(?:\\.|[^\\\n]))++)\\\")")
# A bare value ends at a line break, also a JSON `\n` (a YAML line inside tool arguments);
# a backslash ending a line continues it (agent.redact reads such text joined as well), and
# in JSON the two read `\\\n`.
_BARE_VALUE = re.compile(r"[ \t]*+(?![=:\"'])((?:[^\s\"',;&\\]++|\\(?![\r\nnr]|\\{1,2}n))++)")
# A YAML block scalar's indicator, alone on its line: the value is the lines under it.
_BLOCK = re.compile(r"[|>][-+]?[0-9]?[-+]?")
# The end of a line: a real break (group 1) or a JSON `\n` (group 2).
LINE_END = re.compile(r"[ \t]*+(?:#[^\r\n\\]*+)?(?:\r?(\n)|(\\n)|\Z)")
_YAML_KEY = frozenset(string.ascii_letters + string.digits + "_.-")
# One finder per trigger word, led by the literal word so the scan is a fast prefix search
# (an alternation of all words would be tried at every position). Group 1 ends the key;
# `=>` is the PHP and Ruby hash arrow. A word whose run of key characters is long enough to
# hold the word again matches, the whole run, even with no separator (group 2) after it:
# every later word inside the run reaches the same key end and fails the same way, and the
# scan resumes after the run instead of retrying each (`"token" * N` was quadratic). A
# shorter run cannot hold another, so a word in prose still fails inside the engine. Runs
# and blanks are possessive: what follows them is never a key character or a blank, so
# giving some back cannot help.
_KEY_FINDERS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (word, re.compile(rf"({word}[a-z0-9_-]*+)(?:((?:\\?[\"'])?[ \t]*+(?:=>|[:=]))"
                      rf"|(?<=[a-z0-9_-]{{{2 * len(word)}}}))"))
    for word in ("pass", "pwd", "secret", "token", "key", "auth", "credential")
)
# A flag's name with no blank (group 2) after it matches too, its whole run, as above.
_FLAG = re.compile(r"--([a-z][a-z0-9_.-]*+)([ \t]+)?")
_FLAG_VALUE = re.compile(r"(?!-)([^\s\"'`;&|]+)")
_COOKIE = re.compile(r"cookie(\\?[\"']?)[ \t]*:[ \t]*")
# A header value ends at a line break (also a JSON `\n`) or the quote that opened the header.
_HEADER_VALUE = {q: re.compile(rf"((?:[^\\\r\n{q}]++|\\[^nr\r\n])*+)") for q in ("", "\"", "'")}

Spans = dict[int, int]  # value start -> end


def _ends_secret_key(lower: str, end: int) -> bool:
    """Whether the key ending at `end` names a secret: `db_password`, `DB_PASS`, not `bypass`."""
    if lower.endswith(_SECRET_KEYS, 0, end):
        return True
    # `pass` ends too many words (bypass, compass) to count inside one: only as the whole
    # key or after a separator (`DB_PASS`, `db.pass`).
    return lower.endswith("pass", 0, end) and (end == 4 or lower[end - 5] not in _KEY_CHARS)


def _add(spans: Spans, value: re.Match[str]) -> int:
    """Record the value's group (inside any quotes), and say where it ends; the longest
    claim on a start wins."""
    start, end = value.span(value.lastindex or 0)
    if start < end:
        spans[start] = max(end, spans.get(start, end))
    return end


def _assignment_spans(text: str, lower: str, spans: Spans, finder: re.Pattern[str]) -> None:
    """`key = value`, `key: value`, `"key": "value"`, `'key' => 'value'` for secret keys
    found by one of `_KEY_FINDERS`."""
    reach = 0  # end of the last bare value
    for hit in finder.finditer(lower):
        # The word must end the key: `db_password` yes, `max_tokens` or `keyboard` no.
        if hit[2] is None or not _ends_secret_key(lower, hit.end(1)):
            continue
        at = hit.end()
        # A value starting inside the last bare value would run to its end, a span inside
        # one already recorded; matching it again made `password=password=...` quadratic.
        # Only a `\"` there (the last character of the run, then a quote) can open a value
        # that ends elsewhere, a quoted one.
        if at < reach and not text.startswith('\\"', at):
            continue
        value = _QUOTED_VALUE.match(text, at)
        if value is not None:
            if not not_a_secret(value[value.lastindex or 0], quoted=True):
                _add(spans, value)
        elif (value := _BARE_VALUE.match(text, at)) is not None:
            reach = value.end()
            if _BLOCK.fullmatch(value[1]) and (eol := LINE_END.match(text, reach)):
                reach = _block_span(text, spans, value.start(1), hit.start(), eol)
            elif not not_a_secret(value[1], quoted=False, text=text, end=reach):
                _add(spans, value)


def indent_of(text: str, key: int) -> int:
    """The indentation of the YAML line whose key holds position `key` (of a list item,
    the dash's): read backwards over the key and the blanks before it, never the line."""
    start = key
    while start and text[start - 1] in _YAML_KEY:
        start -= 1
    blanks = start
    while blanks and text[blanks - 1] in " \t":
        blanks -= 1
    if blanks and text[blanks - 1] == "-" and blanks < start:  # `  - password: |`
        dash = blanks - 1
        while dash and text[dash - 1] in " \t":
            dash -= 1
        return blanks - 1 - dash
    return start - blanks


def lines_after(text: str, eol: re.Match[str]) -> Iterator[tuple[int, int]]:
    """(start, end) of each line after the line end `eol` (a `LINE_END` match): real lines,
    or those of a JSON string split by `\\n`, which stop at its closing quote."""
    escaped = eol[2] is not None
    sep = "\\n" if escaped else "\n"
    pos = eol.end()
    while pos < len(text):
        stop = text.find(sep, pos)
        end = len(text) if stop == -1 else stop
        if escaped and (quote := _closing_quote(text, pos, end)) != -1:
            yield pos, quote
            return
        yield pos, end - 1 if not escaped and text[end - 1] == "\r" else end
        if stop == -1:
            return
        pos = stop + len(sep)


def _closing_quote(text: str, start: int, end: int) -> int:
    quote = text.find('"', start, end)
    while quote > 0 and text[quote - 1] == "\\":  # `\"` is a quote inside the string
        quote = text.find('"', quote + 1, end)
    return quote


def _block_span(text: str, spans: Spans, start: int, key: int, eol: re.Match[str]) -> int:
    """A YAML block scalar (`password: |` and the lines indented under it): record it from
    its indicator to its last line, and say where that ends."""
    indent = indent_of(text, key)
    end = start
    for first, last in lines_after(text, eol):
        body = text[first:last]
        if body.strip():
            if len(body) - len(body.lstrip(" \t")) <= indent:
                break
            end = last
    if end > start:
        spans[start] = max(end, spans.get(start, end))
    return end


def _flag_spans(text: str, lower: str, spans: Spans) -> None:
    """`--password X`, `--token X`: a secret flag whose value is the next word."""
    for hit in _FLAG.finditer(lower):
        end = hit.end(1)
        if (hit[2] is None or not _ends_secret_key(lower, end)
                or lower.startswith("no-", hit.start(1))):
            continue  # `--no-password` is a switch, not a flag with a value
        value = _QUOTED_VALUE.match(text, hit.end()) or _FLAG_VALUE.match(text, hit.end())
        # A password may be any word, but a token or key is generated: a plain word after
        # `--token` is prose ("pass --token and --url"), not a value.
        if value is None:
            continue
        word = value[value.lastindex or 0]
        if (lower.endswith(_PASSWORD_KEYS, 0, end) or machine_made(word)) \
                and not placeholder(word):
            _add(spans, value)


def _cookie_spans(text: str, lower: str, spans: Spans) -> None:
    """`Cookie:` and `Set-Cookie:` values, which hold several secrets up to the line's end."""
    reach = 0  # end of the last value: a header inside it is covered, and rescanning is slow
    for hit in _COOKIE.finditer(lower):
        at = hit.start()
        if at < reach or at and lower[at - 1] in _NAME_CHARS:
            continue  # also skip a longer name (`fortune_cookie`)
        if hit.group(1):  # a quoted key, as in JSON: the value is the quoted string
            value = _QUOTED_VALUE.match(text, hit.end()) or _BARE_VALUE.match(text, hit.end())
        else:
            name = at - 4 if at >= 4 and lower.startswith("set-", at - 4) else at
            opener = text[name - 1] if name and text[name - 1] in "\"'" else ""
            value = _HEADER_VALUE[opener].match(text, hit.end())
        if value is not None:
            _add(spans, value)
            reach = value.end()


def _replace_spans(text: str, spans: Spans) -> str:
    pieces: list[str] = []
    done = 0  # text[:done] is already in pieces
    for start in sorted(spans):
        end = spans[start]
        if start < done:  # overlaps a value already replaced: widen that one
            done = max(done, end)
            continue
        pieces += (text[done:start], REDACTED)
        done = end
    pieces.append(text[done:])
    return "".join(pieces)


# The value pass in parts: one per finder word, then cookies, then flags. `parts` below are
# indices into this order, which is also the order of the screen's value conditions.
_COOKIES = len(_KEY_FINDERS)
_FLAGS = _COOKIES + 1
_EVERY_PART = range(_FLAGS + 1)
_NO_SEPARATOR = (_FLAGS,)  # without `:` or `=`, only a flag can hold a value


def redact_values(text: str, lower: str, parts: Iterable[int] | None = None) -> str:
    """The values of secret keys, flags and cookie headers; only the `parts` named, when
    the screen has said which can find anything (`_SCREEN`)."""
    if parts is None:
        parts = _EVERY_PART if ":" in text or "=" in text else _NO_SEPARATOR
    spans: Spans = {}
    for part in parts:
        if part < _COOKIES:
            word, finder = _KEY_FINDERS[part]
            if word in lower:
                _assignment_spans(text, lower, spans, finder)
        elif part == _COOKIES:
            if "cookie" in lower:
                _cookie_spans(text, lower, spans)
        elif "--" in text:
            _flag_spans(text, lower, spans)
    return _replace_spans(text, spans) if spans else text


def value_conditions() -> list[str]:
    """The screen's condition for each part of the value pass, in `redact_values` order.

    Every span a finder records sits after a key that ends in a secret key word and then
    `:`, `=` or `=>`; the key word holds the finder's own word, and the finder that starts
    there reaches the same key end (`[a-z0-9_-]*` runs to it), so the condition for a
    finder is its word's secret keys. Cookies sit after `cookie` and `:`; flags after a
    `--flag` whose name ends in a secret word.
    """
    keys = (*_SECRET_KEYS, "pass")
    groups = [[key for key in keys if word in key] for word, _ in _KEY_FINDERS]
    if {key for group in groups for key in group} != set(keys):  # a key no finder reads
        raise RuntimeError("every secret key must hold one of the finder words")
    return [*map(key_condition, groups), key_condition(["cookie"]), flag_condition(keys)]
