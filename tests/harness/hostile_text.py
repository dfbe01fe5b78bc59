"""Texts shaped to make secret redaction slow: long runs of what its patterns look for.

A stranger can send any of these as a message or a document (up to 100,000 characters),
and each once took a redaction pattern quadratic time, or is the nearest relative of one
that did. `SHAPES[name](n)` gives a text of about `n` characters; `hostile_shapes()` draws
more such shapes, and `hostile_texts()` their texts, from repeated fragments of the words,
separators and quotes the patterns react to.
Only the standard library and hypothesis: other tests send these texts through the bot.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

from hypothesis import strategies as st

_BEGIN = "-----BEGIN RSA PRIVATE KEY-----"


def _repeat(unit: str, n: int, head: str = "", tail: str = "") -> str:
    """`head`, then `unit` repeated to about n characters in all, then `tail`."""
    count = max(1, (n - len(head) - len(tail)) // len(unit))
    return head + unit * count + tail


def _scramble(alphabet: str) -> Callable[[int], str]:
    """A fixed pseudo-random text over `alphabet`: a token-like soup for the screen."""
    def shape(n: int) -> str:
        return "".join(random.Random(n).choices(alphabet, k=n))
    return shape


SHAPES: dict[str, Callable[[int], str]] = {
    # Quadratic before issue 31. A key word's finder retried from every word in one run.
    "key_word_run": lambda n: _repeat("token", n, tail=" token=1"),
    "password_word_run": lambda n: _repeat("password", n, tail="; password: x"),
    "authorization_run": lambda n: _repeat("authorization", n, tail="; x:"),
    # A bare value matched again from every key inside it.
    "key_chain": lambda n: _repeat("password=", n),
    "key_colon_chain": lambda n: _repeat("secret:", n),
    "key_escaped_newlines": lambda n: _repeat("auth:\\n", n),
    # The `--flag` finder retried from every `--` in one run (also `-----begin`, lowered).
    "flag_run": lambda n: _repeat("--a", n, tail=";--password hunter2"),
    "secret_flag_run": lambda n: _repeat("--password", n, tail="="),
    "begin_run": lambda n: _repeat("-----BEGIN", n),
    # Private keys: every BEGIN searched the rest of the text for an END.
    "begin_without_end": lambda n: _repeat(_BEGIN, n),
    "begin_lines_without_end": lambda n: _repeat(_BEGIN + "\nQUFBQQ==\n", n),
    # JWTs: every `eyJ` in one run, and in the run after its first dot.
    "jwt_openers": lambda n: _repeat("eyJ", n),
    "jwt_second_part": lambda n: _repeat("eyJ", n, head="eyJhbGciOiJIUzI1NiJ9."),
    # Authorization: the two blank runs around the optional quote tried every split.
    "authorization_blanks": lambda n: _repeat(" ", n, head="Authorization:", tail=","),
    # MySQL: every client name in one word.
    "mysql_run": lambda n: _repeat("mysql", n, tail="; ls -p"),
    "mariadb_dotted": lambda n: _repeat("mariadb.", n, tail=" -p"),
    # Their relatives, linear before and after: the value pass.
    "key_words_line": lambda n: _repeat("api_key secret_token db_password auth ", n),
    "key_word_then_blanks": lambda n: _repeat(" ", n, head="token", tail="x"),
    "key_arrows": lambda n: _repeat("key =>", n),
    "key_quote_openers": lambda n: _repeat('token:"', n),
    "key_unterminated_quotes": lambda n: _repeat("token: 'a token= \"b ", n),
    "key_backslash_value": lambda n: _repeat("\\", n, head='secret: "'),
    "key_escaped_quotes": lambda n: _repeat("\\'", n, head="password='"),
    "json_in_json_openers": lambda n: _repeat('{\\"password\\": \\"', n),
    "json_in_json_backslashes": lambda n: _repeat("\\\\\\\"", n, head='\\"token\\": \\"'),
    "dash_run": lambda n: "-" * n,
    "flag_without_value": lambda n: _repeat("--password ", n),
    "flag_quote_openers": lambda n: _repeat('--token "', n),
    "flag_then_blanks": lambda n: _repeat(" ", n, head="--password", tail="-"),
    "cookie_headers": lambda n: _repeat("Cookie: a=1; ", n),
    "cookie_quoted_keys": lambda n: _repeat('"cookie": "', n),
    "cookie_mixed_openers": lambda n: _repeat("\"Cookie: a 'Set-Cookie: b ", n),
    # The fixed-shape rules.
    "end_without_begin": lambda n: _repeat("-----END RSA PRIVATE KEY-----", n),
    "end_labels_after_begin": lambda n: _repeat("-----END PRIVATE", n, head=_BEGIN),
    "key_label_run": lambda n: _repeat(" PRIVATE KEY", n, head="-----BEGIN"),
    "long_key_line": lambda n: _repeat("A", n, head=_BEGIN + "\n", tail=" x"),
    "pgp_headers": lambda n: _repeat("Version: x\n", n,
                                     head="-----BEGIN PGP PRIVATE KEY BLOCK-----\n"),
    "newline_escapes": lambda n: _repeat("\\n", n, head=_BEGIN),
    "jwt_dotted_parts": lambda n: _repeat("eyJhbGciOiJ.", n),
    "bearer_dots": lambda n: _repeat(".", n, head="Bearer "),
    "bearer_run": lambda n: _repeat("Bearer ", n),
    "bearer_tabs": lambda n: _repeat("\t", n, head="Bearer", tail=","),
    "authorization_headers": lambda n: _repeat("Authorization: Bearer ", n),
    "url_userinfo": lambda n: _repeat("://a:", n),
    "url_schemes": lambda n: _repeat("://", n),
    "url_colons": lambda n: _repeat("b:", n, head="x://a:"),
    "url_password_without_host": lambda n: _repeat("p", n, head="postgres://u:"),
    "url_at_run": lambda n: _repeat("@", n, head="https://u:", tail=" x"),
    "mysql_words": lambda n: _repeat("mysql ", n, tail="-pS3cret"),
    "mysql_bare_flags": lambda n: _repeat("mysql -p ", n),
    "vendor_prefixes": lambda n: _repeat("sk-ghp_xoxb-glpat-hf_AKIAAIza", n),
    "digit_run": lambda n: _repeat("1", n, tail=":"),
    "telegram_digits": lambda n: _repeat("1234567:", n),
    "discord_letters": lambda n: _repeat("M", n, tail="."),
    "discord_parts": lambda n: _repeat("MTIzNDU2Nzg5MDEyMzQ1Njc4.", n),
    "quote_run": lambda n: '"' * n,
    # Soups for the screen's automaton, which tracks many conditions at once.
    "token_soup": _scramble("aZ09_-.:"),
    "key_soup": _scramble("tokenpasswd_-=:\"' "),
}

# Fragments the patterns react to: key words, rule triggers, separators, quotes, dashes.
FRAGMENTS: tuple[str, ...] = (
    "token", "password", "pass", "secret", "key", "api_", "auth", "cookie", "Cookie: ",
    "authorization", "Bearer ", "mysql", "mariadb", "-p", "--", "-", "eyJ", "sk-", "ghp_",
    _BEGIN, "-----END RSA PRIVATE KEY-----", "://", "@", ":", "=", "=>", ";", ".", "/",
    "\"", "'", "\\", "\\\"", " ", "\t", "\n", "\\n", "a", "Z", "1", "_",
)


@dataclass(frozen=True)
class Repeated:
    """A shape like those in `SHAPES`: each unit repeated over its share of n, then a tail.
    Its repr is the recipe, so a failing example reads as one line, not 100,000 characters."""

    units: tuple[str, ...]
    tail: str = ""

    def __call__(self, n: int) -> str:
        share = max(1, n - len(self.tail)) // len(self.units)
        return "".join(unit * max(1, share // len(unit)) for unit in self.units) + self.tail


def hostile_shapes() -> st.SearchStrategy[Repeated]:
    """Shapes of a few units, each a few `FRAGMENTS`, and a short tail of fragments."""
    fragments = st.lists(st.sampled_from(FRAGMENTS), min_size=1, max_size=4).map("".join)
    return st.builds(Repeated, st.lists(fragments, min_size=1, max_size=3).map(tuple),
                     st.lists(st.sampled_from(FRAGMENTS), max_size=3).map("".join))


def hostile_texts(size: int = 100_000) -> st.SearchStrategy[str]:
    """Texts of about `size` characters from `hostile_shapes`."""
    return hostile_shapes().map(lambda shape: shape(size))
