"""Secrets that span lines: private-key blocks, Kubernetes Secrets, and lines continued
with a backslash (docs/architecture.md, "Secrets")."""

from __future__ import annotations

import re

from agent.redact_placeholders import placeholder
from agent.redact_rule import Rule, keep_prefix
from agent.redact_values import LINE_END, REDACTED, lines_after

# Armored key labels: PEM (`RSA PRIVATE KEY`, `ENCRYPTED PRIVATE KEY`) and PGP
# (`PGP PRIVATE KEY BLOCK`).
_KEY_LABEL = r"([A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?)-----"
# A line break in a body: a real one, a JSON `\n` (`\\n` once more escaped, in tool
# arguments), or a shell backslash-newline.
_KEY_BREAK = r"(?:\r?\n|(?:\\{1,2}r)?\\{1,2}n|\\\r?\n)"
# An armored body line, maybe indented (a key in YAML): base64 (a PGP checksum starts with
# `=`) or a `Version: x` header, ending at a line break, a JSON `\n` or the quote that ends
# a string (JSON, or the repr of an exception in a log line), so words after an
# unterminated block survive.
_KEY_LINE = (r"[ \t]*+(?:[A-Za-z0-9+/=]++[ \t]*+|[A-Za-z-]+: [^\r\n\\\"']*)"
             r"(?![^\r\n\\\"'])")
# A body whose line breaks became blanks (an environment variable, a folded log line):
# base64 runs long enough not to be words.
_KEY_WORDS = r"[ \t]++[A-Za-z0-9+/=]{16,}+(?![^\s\\\"'])"


class KeyBlocks(Rule):
    """Private keys, whole: BEGIN, the body lines after it (allowing the one empty line PGP
    puts after its headers) and the END that closes them. When something else stands
    between the body and an END, the next END still closes the block if its label is the
    BEGIN's (a key with an odd line in it); otherwise the block ends with its body, so a
    key cut short does not take everything up to another key's END with it.

    As one pattern, `BEGIN(?:.*?END|body)` scanned from every BEGIN to the end of a text
    that has no END after it; here the next END is looked up once, for every BEGIN before it.
    """

    _END = re.compile(rf"-----END{_KEY_LABEL}")
    _BODY = re.compile(rf"(?:{_KEY_BREAK}{_KEY_BREAK}?{_KEY_LINE}|{_KEY_WORDS})*")
    _CLOSE = re.compile(rf"(?:{_KEY_BREAK}|[ \t]++)?[ \t]*+-----END{_KEY_LABEL}")

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
            stop = self._BODY.match(text, begin.end()).end()
            if (close := self._CLOSE.match(text, stop)) is not None:
                stop = close.end()
            else:
                if end is not None and end.start() < begin.end():
                    end = self._END.search(text, begin.end())  # the last one ended before it
                if end is not None and end[1] == begin[1]:
                    stop = end.end()
            pieces += (text[done:begin.start()], REDACTED)
            done = stop
        pieces.append(text[done:])
        return "".join(pieces)


class KubernetesSecrets(Rule):
    """The values under `data:` and `stringData:` in a text holding a Kubernetes Secret, as
    YAML (also inside a JSON string, its lines split by `\\n`) or as JSON: any name may hold
    a secret there (`tls.key`, `.dockerconfigjson`).

    Each `data:` block is read once, line by line, up to the first line indented no deeper
    than its header; JSON `"data": {...}` objects are read up to their closing brace.
    """

    # JSON, or JSON inside a JSON string (tool arguments), where each quote is escaped.
    _KIND = re.compile(r"kind\\?[\"']?[ \t]*:[ \t]*\\?[\"']?Secret(?![A-Za-z])")
    _HEADER = re.compile(r"(?:data|stringData):(?=[ \t]*+(?:\r?$|\\n))", re.MULTILINE)
    _ENTRY = re.compile(r"([ \t]*+[^\s:#][^:\r\n]*+:[ \t]*+)(.*)")
    _JSON = re.compile(r"\\?\"(?:data|stringData)\\?\"[ \t]*:[ \t]*\{([^{}]*+)\}")
    _JSON_VALUE = re.compile(r"(\\?\"[^\"\\\n]*+\\?\"[ \t]*:[ \t]*\\?\")"
                             r"((?:[^\"\\\n]++|\\[^\"\n])++)(?=\\?\")")

    def __init__(self) -> None:
        super().__init__(self._KIND.pattern, REDACTED, ("Secret",),
                         screen=r"kind\\?[\"']?[ \t]*:[ \t]*\\?[\"']?Secret")

    def apply(self, text: str, lower: str) -> str:
        if "Secret" not in text or self._KIND.search(text) is None:
            return text
        pieces: list[str] = []
        done = read = 0  # text[:done] is in pieces; blocks were read up to `read`
        for header in self._HEADER.finditer(text):
            at = header.start()
            blanks = at
            while blanks and text[blanks - 1] in " \t":
                blanks -= 1
            if at < read or not _starts_line(text, blanks):
                continue  # inside the last block, or not a key of its own line
            eol = LINE_END.match(text, header.end())
            if eol is not None:
                done, read = self._yaml_block(text, pieces, done, eol, at - blanks)
        pieces.append(text[done:])
        return self._JSON.sub(self._json_block, "".join(pieces))

    def _yaml_block(self, text: str, pieces: list[str], done: int, eol: re.Match[str],
                    indent: int) -> tuple[int, int]:
        """Replace the values of the lines under a `data:` header; say where the text is
        copied up to, and where the block ends."""
        read = eol.end()
        for first, last in lines_after(text, eol):
            body = text[first:last]
            if body.strip():
                if len(body) - len(body.lstrip(" \t")) <= indent:
                    break
                entry = self._ENTRY.fullmatch(text, first, last)
                value = (entry[2] if entry else body).strip()
                if value and value[0] not in "|>" and not placeholder(value):
                    head = entry.end(1) if entry else last - len(body.lstrip())
                    pieces += (text[done:head], REDACTED)
                    done = last - (len(body) - len(body.rstrip()))
            read = last
        return done, read

    def _json_block(self, block: re.Match[str]) -> str:
        inner = self._JSON_VALUE.sub(
            lambda m: m[0] if placeholder(m[2]) else m[1] + REDACTED, block[1])
        return block[0][:block.start(1) - block.start()] + inner + "}"


def _starts_line(text: str, at: int) -> bool:
    """Whether `at` starts a line: of the text, after a break, a JSON `\\n` or a quote."""
    return (at == 0 or text[at - 1] in "\n\"'"
            or text[at - 1] == "n" and at >= 2 and text[at - 2] == "\\")


def putty_key() -> Rule:
    """The private lines of a PuTTY key file (`Private-Lines: 14` and the base64 under it)."""
    return Rule(r"(Private-Lines:[ \t]*+[0-9]++)(?:(?:\r?\n|\\n)[A-Za-z0-9+/=]++)++",
                keep_prefix, ("Private-Lines:",), screen="Private-Lines:")


# A backslash ending a line continues it (shell, .env, Dockerfile, Python): a secret may be
# wrapped across the break; in a JSON string (tool arguments) the two read `\\\n`. The
# screen sends every text holding one to the full pass.
CONTINUATION_SCREEN = r"\\\r?\n|\\\\\\n"
_CONTINUATION = re.compile(r"\\\r?\n[ \t]*|\\\\\\n(?:[ \t]|\\t)*")


def has_continuation(text: str) -> bool:
    return "\\\n" in text or "\\\r\n" in text or "\\\\\\n" in text


def join_continuations(text: str) -> str:
    """The text with each backslash-newline and the indentation after it removed."""
    return _CONTINUATION.sub("", text)
