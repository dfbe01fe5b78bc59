"""Storage URLs lose their password, whatever it holds, before they reach any output."""

from __future__ import annotations

from urllib.parse import quote

import pytest

from storage.errors import StoreError
from storage.postgres.store import PostgresSessionStore
from storage.urls import ambiguous, mask_url, password_forms, scrub, url_password

# Every character a URL reserves, and a percent sign that looks like an escape.
NASTY = "p#ss?w@rd/x%41y:z"
ENCODED = quote(NASTY, safe="")

MASKED = [
    # (url, masked)
    ("postgresql://tl:plain-pw@db:5432/app", "postgresql://tl:***@db:5432/app"),
    (f"postgresql://tl:{ENCODED}@db:5432/app", "postgresql://tl:***@db:5432/app"),
    (f"postgresql://tl:{NASTY}@db:5432/app", "postgresql://tl:***@db:5432/app"),
    (f"postgres://tl:{NASTY}@db/app?sslmode=require", "postgres://tl:***@db/app?sslmode=require"),
    ("postgresql://tl:a@b@c@db/app", "postgresql://tl:***@db/app"),
    ("postgresql://tl:p%2Fw%40@db/app", "postgresql://tl:***@db/app"),
    ("postgresql://tl:pw@h1:5432,h2:5433/app", "postgresql://tl:***@h1:5432,h2:5433/app"),
    ("postgresql://me%40corp:pw@db/app", "postgresql://me%40corp:***@db/app"),
    ("postgresql://tl:@db/app", "postgresql://tl:***@db/app"),
    ("postgresql://db/app?user=tl&password=s3cret&sslmode=require",
     "postgresql://db/app?user=tl&password=***&sslmode=require"),
    ("postgresql://db/app?sslpassword=k3y", "postgresql://db/app?sslpassword=***"),
    ("postgresql://tl@db/app", "postgresql://tl@db/app"),
    ("postgresql://db/app", "postgresql://db/app"),
    ("postgresql:///app?host=/run/postgresql", "postgresql:///app?host=/run/postgresql"),
    ("not a url at all", "not a url at all"),
]


@pytest.mark.parametrize(("url", "masked"), MASKED, ids=[m for _, m in MASKED])
def test_mask_url_takes_out_the_password_whatever_it_holds(url: str, masked: str) -> None:
    assert mask_url(url) == masked
    for form in password_forms(url):
        assert form not in mask_url(url)


def test_the_password_is_read_raw_and_decoded() -> None:
    assert password_forms(f"postgresql://tl:{ENCODED}@db/app") == (ENCODED, NASTY)
    assert password_forms(f"postgresql://tl:{NASTY}@db/app") == (NASTY, "p#ss?w@rd/xAy:z")
    assert url_password(f"postgresql://tl:{NASTY}@db/app") == NASTY
    assert url_password("postgresql://tl@db/app") is None and password_forms(None) == ()


def test_an_error_that_echoes_the_url_or_a_form_of_the_password_is_scrubbed() -> None:
    url = f"postgresql://tl:{ENCODED}@db:5432/app"
    text = f"invalid DSN {url}; password {NASTY} tried; also {ENCODED}"
    scrubbed = scrub(text, url)
    assert "postgresql://tl:***@db:5432/app" in scrubbed
    for form in (ENCODED, NASTY):
        assert form not in scrubbed


@pytest.mark.parametrize("raw", ["p#w", "p?w", "p/w", "p@w"])
def test_a_raw_reserved_character_in_the_password_is_ambiguous(raw: str) -> None:
    assert ambiguous(f"postgresql://tl:{raw}@db/app")
    assert not ambiguous(f"postgresql://tl:{quote(raw, safe='')}@db/app")
    assert not ambiguous("postgresql://tl:p%w:x@db/app")  # unambiguous, if odd


async def test_the_store_refuses_a_raw_password_naming_the_fix_not_the_password() -> None:
    url = f"postgresql://tl:{NASTY}@127.0.0.1:1/app"
    store = PostgresSessionStore(url)
    with pytest.raises(StoreError) as raised:
        await store.initialize()
    message = str(raised.value)
    assert "percent-encode" in message and "postgresql://tl:***@127.0.0.1:1/app" in message
    assert "p#ss" not in message and "rd/x" not in message
