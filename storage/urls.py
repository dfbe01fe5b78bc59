"""Storage URLs with their password taken out, for every message, log line and page.

A password written raw into a URL (`postgresql://me:p#ss?w@rd/x@host/db`) cannot be
parsed by `urlsplit`: `#`, `?` and `/` end its netloc inside the password, and a raw `@`
moves the host. So the credentials are read here as running from after `scheme://` to
the LAST `@` of the URL, and everything after the first `:` in them is the password. Where
that reading and a URL parser disagree, the password is written raw, and the store
refuses the URL (`ambiguous`) rather than connect to a host made of part of it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import unquote

MASK = "***"
# A password can also come as a query parameter (`?password=...`, libpq's keyword).
_QUERY_SECRET = re.compile(r"([?&](?:ssl)?password=)([^&#]*)", re.IGNORECASE)


@dataclass(frozen=True)
class Credentials:
    """A URL cut around its user-info: `{head}{user}:{password}@{rest}`."""

    head: str  # "postgresql://"
    user: str
    password: str | None  # as written in the URL (raw or percent-encoded)
    rest: str  # host, port, path, query


def credentials(url: str) -> Credentials | None:
    """The URL's user-info, or None when it has none."""
    scheme_end = url.find("://")
    at = url.rfind("@")
    if scheme_end < 0 or at < scheme_end:
        return None
    head, userinfo, rest = url[:scheme_end + 3], url[scheme_end + 3:at], url[at + 1:]
    user, colon, password = userinfo.partition(":")
    return Credentials(head, user, password if colon else None, rest)


def url_password(url: str | None) -> str | None:
    """The password as written in the URL (the user-info's or a `password=` parameter)."""
    forms = password_forms(url)
    return forms[0] if forms else None


def password_forms(url: str | None) -> tuple[str, ...]:
    """Every form of the URL's passwords that could be echoed: as written, and
    percent-decoded (what the client sends, and what an error may quote)."""
    if not url:
        return ()
    found: list[str] = []
    parts = credentials(url)
    if parts is not None and parts.password:
        found.append(parts.password)
    found += [m.group(2) for m in _QUERY_SECRET.finditer(url) if m.group(2)]
    forms = [*found, *(unquote(p) for p in found)]
    return tuple(dict.fromkeys(form for form in forms if form))


def mask_url(url: str) -> str:
    """The URL with every password replaced by ***, whatever characters it holds."""
    parts = credentials(url)
    if parts is not None and parts.password is not None:
        url = f"{parts.head}{parts.user}:{MASK}@{parts.rest}"
    return _QUERY_SECRET.sub(rf"\g<1>{MASK}", url)


def scrub(text: str, url: str) -> str:
    """`text` (an error from the database client, which may quote the URL) with the URL
    masked and any form of its password taken out."""
    text = text.replace(url, mask_url(url))
    for form in sorted(password_forms(url), key=len, reverse=True):
        text = text.replace(form, MASK)
    return text


def ambiguous(url: str) -> bool:
    """True when the user-info holds a raw character that ends or splits a URL's
    authority (`@ / ? #`): a URL parser (the database client's) would then read another
    password, or a host made of part of it."""
    parts = credentials(url)
    if parts is None or parts.password is None:
        return False
    return any(c in f"{parts.user}:{parts.password}" for c in "@/?#")
