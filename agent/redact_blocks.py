"""Secrets that span lines: private-key blocks, Kubernetes Secrets, and lines continued
with a backslash (docs/architecture.md, "Secrets")."""

from __future__ import annotations

import re

from agent.redact_placeholders import placeholder
from agent.redact_rule import Rule, keep_prefix
from agent.redact_values import REDACTED

# Armored key labels: PEM (`RSA PRIVATE KEY`, `ENCRYPTED PRIVATE KEY`) and PGP
# (`PGP PRIVATE KEY BLOCK`).
_KEY_LABEL = r"[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----"
# A line break in a body: a real one, a JSON `\n`, or a shell backslash-newline.
_KEY_BREAK = r"(?:\r?\n|(?:\\r)?\\n|\\\r?\n)"
# An armored body line, maybe indented (a key in YAML): base64 (a PGP checksum starts with
# `=`) or a `Version: x` header, ending at a line break (or a JSON `\n`) so words after an
# unterminated block survive.
_KEY_LINE = (r"[ \t]*+(?:[A-Za-z0-9+/=]++[ \t]*+|[A-Za-z-]+: [^\r\n\\]*)"
             r"(?![^\r\n\\])")
# A body whose line breaks became blanks (an environment variable, a folded log line):
# base64 runs long enough not to be words.
_KEY_WORDS = r"[ \t]++[A-Za-z0-9+/=]{16,}+(?![^\s\\\"'])"


class KeyBlocks(Rule):
    """Private keys, whole: from BEGIN to the next END, or, when no END follows, BEGIN and
    the body lines after it (allowing the one empty line PGP puts after its headers).

    As one pattern, `BEGIN(?:.*?END|body)` scanned from every BEGIN to the end of a text
    that has no END after it; here the next END is looked up once, for every BEGIN before it.
    """

    _END = re.compile(rf"-----END{_KEY_LABEL}")
    _BODY = re.compile(rf"(?:{_KEY_BREAK}{_KEY_BREAK}?{_KEY_LINE}|{_KEY_WORDS})*")

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


class KubernetesSecrets(Rule):
    """The values under `data:` and `stringData:` in a text holding a Kubernetes Secret, as
    YAML or JSON: any name may hold a secret there (`tls.key`, `.dockerconfigjson`).

    Each `data:` block is read once, line by line, up to the first line indented no deeper
    than its header; JSON `"data": {...}` objects are read up to their closing brace.
    """

    _KIND = re.compile(r"kind[\"']?[ \t]*:[ \t]*[\"']?Secret(?![A-Za-z])")
    _HEADER = re.compile(r"(?:data|stringData):[ \t]*+\r?$", re.MULTILINE)
    _ENTRY = re.compile(r"([ \t]*+[^\s:#][^:\r\n]*+:[ \t]*+)([^\r\n]*)")
    _JSON = re.compile(r"\"(?:data|stringData)\"[ \t]*:[ \t]*\{([^{}]*+)\}")
    _JSON_VALUE = re.compile(r"(\"[^\"\\\n]*+\"[ \t]*:[ \t]*\")((?:[^\"\\\n]++|\\.)++)(?=\")")

    def __init__(self) -> None:
        super().__init__(self._KIND.pattern, REDACTED, ("Secret",),
                         screen=r"kind[\"']?[ \t]*:[ \t]*[\"']?Secret")

    def apply(self, text: str, lower: str) -> str:
        if "Secret" not in text or self._KIND.search(text) is None:
            return text
        pieces: list[str] = []
        done = 0  # text[:done] is already in pieces
        for header in self._HEADER.finditer(text):
            line = text.rfind("\n", 0, header.start()) + 1
            if header.start() < done or text[line:header.start()].strip(" \t"):
                continue  # inside the last block, or not a key of its own line
            done = self._yaml_block(text, pieces, done, header.end(),
                                    header.start() - line)
        pieces.append(text[done:])
        return self._JSON.sub(self._json_block, "".join(pieces))

    def _yaml_block(self, text: str, pieces: list[str], done: int, pos: int,
                    indent: int) -> int:
        """Replace the values of the lines under a `data:` header; say where they end."""
        while pos < len(text):
            stop = text.find("\n", pos + 1)
            stop = len(text) if stop == -1 else stop
            cut = stop - 1 if text[stop - 1] == "\r" else stop  # the line without its \r
            entry = self._ENTRY.fullmatch(text, pos + 1, cut)
            body = text[pos + 1:cut]
            if body.strip():
                if len(body) - len(body.lstrip(" \t")) <= indent:
                    break
                value = entry[2].strip() if entry else body.strip()
                if value and value[0] not in "|>" and not placeholder(value):
                    head = entry.end(1) if entry else pos + 1 + len(body) - len(body.lstrip())
                    pieces += (text[done:head], REDACTED)
                    done = cut - (len(body) - len(body.rstrip()))
            pos = stop
        return done

    def _json_block(self, block: re.Match[str]) -> str:
        inner = self._JSON_VALUE.sub(
            lambda m: m[0] if placeholder(m[2]) else m[1] + REDACTED, block[1])
        return block[0][:block.start(1) - block.start()] + inner + "}"


def putty_key() -> Rule:
    """The private lines of a PuTTY key file (`Private-Lines: 14` and the base64 under it)."""
    return Rule(r"(Private-Lines:[ \t]*+[0-9]++)(?:\r?\n[A-Za-z0-9+/=]++)++", keep_prefix,
                ("Private-Lines:",), screen="Private-Lines:")


# A backslash ending a line continues it (shell, .env, Dockerfile, Python): a secret may be
# wrapped across the break. The screen sends every text holding one to the full pass.
CONTINUATION_SCREEN = r"\\\r?\n"
_CONTINUATION = re.compile(r"\\\r?\n[ \t]*")


def has_continuation(text: str) -> bool:
    return "\\\n" in text or "\\\r\n" in text


def join_continuations(text: str) -> str:
    """The text with each backslash-newline and the indentation after it removed."""
    return _CONTINUATION.sub("", text)
