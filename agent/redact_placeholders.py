"""Values after a secret's name that hold no secret: placeholders, code and prose.

`password = get_password()`, `api_key: str = ""`, `secret: <your-secret-here>`,
`API_KEY=${OPENAI_API_KEY}` and `Password: choose a long one` name a secret without holding
one. The value pass (`agent/redact_values.py`) and the header, URL and tag rules ask here
before they replace a value. What this module does not recognise stays a secret, so a real
short password in a config line (`DB_PASSWORD=hunter2`, `password: sunshine`) is still
replaced: the false positives cut here are shapes, never a judgement of strength.
"""

from __future__ import annotations

import re
import string

# Characters prose rarely puts in a word but base64 and generated tokens often do.
_RANDOM_MARKS = frozenset(string.digits + "_~+/=")


def machine_made(value: str) -> bool:
    """Whether a word looks generated: a digit or symbol, a capital inside it, or length."""
    return (len(value) >= 16 or value[1:] != value[1:].lower()
            or not _RANDOM_MARKS.isdisjoint(value))


# A longer value is a secret whatever it looks like; the checks below read short ones only.
_CHECKED = 120

# Templates and variables: ${VAR}, $VAR, $(cmd), %VAR%, %(name)s, <name, {name, {{ name at
# the start (a bare value ends at a blank: `<paste it here>` reads `<paste`); whole, a
# bracketed name: <your-key>, {name}, {{ var }}, [hidden]. A value ending in `…` or `...`
# is cut, not whole.
_TEMPLATE = re.compile(r"\$[{(A-Za-z_]|%(?:\(|[A-Za-z_][A-Za-z0-9_]*%|[sdr]$)|<[A-Za-z_]"
                       r"|\{\{?[ A-Za-z_]")
_BRACKETED = re.compile(r"<[^<>]*>|\{[^{}]*\}|\{\{[^{}]*\}\}|\[[^\[\]]*\]")
# Masks: no letter or digit of any script (****, ..., ~), or x's (xxxx, XXXX-XXXX).
_MASK = re.compile(r"[\W_]*|[xX*]{3,}(?:[-_. ][xX*]{3,})*")
# Words that stand for "no value" or a mode, and type names of annotations.
_WORDS = frozenset("""
    changeme changeit changethis replaceme placeholder redacted hidden masked none null nil
    undefined true false yes no on off required optional empty todo tbd fixme example sample
    dummy default unset notset missing invalid expired revoked valid ok set n/a na unknown
    provided present absent disabled enabled basic bearer digest oauth oauth2 jwt ntlm
    kerberos ldap saml sso anonymous await new yield lambda function async not typeof this
    self nullptr str string bytes bytearray int integer bool boolean float any object text
    char varchar secretstr secretbytes
""".split())
# Words that mark a value as an instruction to fill it in: `your-token-here`, INSERT_KEY.
_FILL_IN = frozenset({"your", "here", "insert", "replace", "enter", "example", "placeholder",
                      "generate", "changeme", "redacted"})
# Key words naming a secret: a value that is an identifier holding one refers to a secret
# (`password=password`, `token=self.token`, `mysecretpassword`) instead of being one. The
# long ones count at a word's end too; the short ones only as a whole word, since they end
# ordinary words (`monkey`, `bypass`).
_NAMING_END = ("password", "passwd", "passphrase", "secret", "secrets", "token", "tokens",
               "apikey", "credential", "credentials")
_NAMING_WORD = frozenset({"pass", "pwd", "pw", "key", "keys", "auth", "cred", "creds"})
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z_.-]*")
# Every word the last three sets hold contains one of these: a value with none is no name.
_NAMING = re.compile("pass|pw|secret|token|key|cred|auth|your|here|insert|replace|enter"
                     "|example|placeholder|generate|changeme|redacted")
_WORD_PARTS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
# Code: a call, a subscript or a generic (`get_token()`, `os.environ[`, `Option<String>`)
# at its start; or, whole, a dotted path of names (`self.password`, `process.env.API_KEY`)
# or a pointer type (`&str`).
_CALL = re.compile(r"[A-Za-z_][\w.]*[(\[<]")
_NAME = re.compile(r"[A-Za-z_]+(?:\.[A-Za-z_]+)+|[&*]+\w+")
_PUNCTUATION = ",;|?!.:`'\""
_TRAILING = ")]}>" + _PUNCTUATION
# Prose after a plain word: another word that is not itself a key (`choose a long one`,
# `await getToken()`; but `AUTH=abc private_key: 'x'` is two assignments).
_MORE_WORDS = re.compile(r"[,.;:!?]?[ \t]++[A-Za-z_$][\w$.-]*+(?![ \t]*+[:=])")


def placeholder(value: str) -> bool:
    """Whether a value stands in for a secret: a template or variable, a mask, a word for
    no value, an instruction to fill it in, or a name of a secret; also once the
    punctuation after it is cut off (`<token>`` in Markdown, `None)`)."""
    if len(value) > _CHECKED:
        return False
    if _placeholder(value):
        return True
    bare = value.rstrip(_PUNCTUATION)
    if bare != value and _placeholder(bare):
        return True
    cut = bare.rstrip(_TRAILING)
    return cut != bare and _placeholder(cut)


def _placeholder(value: str) -> bool:
    # Cheapest first: most values reach here once per key found, and hostile text finds many.
    lowered = value.lower()
    if lowered in _WORDS or value.endswith(("...", "…")):
        return True
    first = value[:1]
    if (not first.isalnum() or first in "xX") and (
            first in "$%<{" and _TEMPLATE.match(value) or first in "<{[" and
            _BRACKETED.fullmatch(value) or _MASK.fullmatch(value)):
        return True
    if _NAMING.search(lowered) is None or not _IDENTIFIER.fullmatch(value):
        return False
    words = [w.lower() for w in _WORD_PARTS.findall(value)]
    return (not _FILL_IN.isdisjoint(words) or not _NAMING_WORD.isdisjoint(words)
            or any(w.endswith(_NAMING_END) for w in words))


def not_a_secret(value: str, *, quoted: bool, text: str = "", end: int = 0) -> bool:
    """Whether the value after a secret key holds no secret: a placeholder, or, unquoted,
    code (a call, a name, a type) or the first word of prose (`text[end:]` follows it)."""
    if quoted:
        # `"Token: " + token + "..."`: the quotes closed one string and opened the next.
        return placeholder(value) or value[:1] in " \t" and value.lstrip()[:1] in "+,.%)"
    bare = value.rstrip(_TRAILING) or value
    if placeholder(value) or len(bare) <= _CHECKED and (_CALL.match(bare)
                                                         or _NAME.fullmatch(bare)):
        return True
    # A plain word followed by more words is prose (`Password: choose a long one`).
    return (bare.isascii() and bare.isalpha() and not machine_made(bare)
            and _MORE_WORDS.match(text, end) is not None)
