"""A stranger's text cannot stall the bot in redaction: every shape that once took a pattern
quadratic time is redacted at 100,000 characters in a fraction of a second, and secrets
inside such text are still found (docs/architecture.md, "Secrets")."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agent.redact import REDACTED, redact
from tests.harness.cpu import cpu_seconds
from tests.harness.hostile_text import SHAPES as REPORTED
from tests.harness.hostile_text import Repeated, hostile_shapes


def _repeat(unit: str, n: int, head: str = "", tail: str = "") -> str:
    return head + unit * max(1, (n - len(head) - len(tail)) // len(unit)) + tail


_BEGIN = "-----BEGIN RSA PRIVATE KEY-----"
_HEX = "0123456789abcdef"
# The families of issue 35, each at its worst: prefixes with too short a body, the
# repeated parts of a URL or command line that never completes, unclosed blocks, runs of
# what a placeholder or prose check reads.
VENDOR_PREFIXES = (
    "gsk_xai-r8_pplx-api_org_npm_pypi-AgEdckr_pat_hvs.dp.st.lin_api_secret_ntn_PMAK-glsa_"
    "glc_NRAK-sntrys_whsec_EAAAsq0csp-shpat_sbp_sb_secret_nfp_figd_HRKU-pul-dapi"
    "dop_v1_GOCSPX-ya29.1//0AGE-SECRET-KEY-1ATATT3SG.SKkey--usglrt-gldt-xoxe-")
NEW_SHAPES: dict[str, Callable[[int], str]] = {
    "vendor_prefixes_35": lambda n: _repeat(VENDOR_PREFIXES, n),
    "vendor_short_bodies": lambda n: _repeat(VENDOR_PREFIXES.replace("_", "_ab12C"), n),
    "sendgrid_parts": lambda n: _repeat("SG." + "a" * 17 + ".", n),
    "slack_hooks": lambda n: _repeat("hooks.slack.com/services/", n),
    "webhook_paths": lambda n: _repeat("/webhooks/123456/", n),
    "webhook_digits": lambda n: _repeat("1", n, head="/webhooks/"),
    "teams_hooks": lambda n: _repeat(".webhook.office.com/webhookb2/", n),
    "signed_url_params": lambda n: _repeat("&sig=?X-Amz-Signature=", n),
    "azure_secret_heads": lambda n: _repeat("abc8Q~", n),
    "hex_then_us": lambda n: _repeat(_HEX, n, tail="-us1"),
    "hex_us_run": lambda n: _repeat(_HEX * 2 + "-us", n),
    "userinfo_runs": lambda n: _repeat("://" + "a" * 20, n),
    "userinfo_long": lambda n: _repeat("a", n, head="https://", tail=" @"),
    "curl_user_flags": lambda n: _repeat("-u", n, head="curl "),
    "curl_user_words": lambda n: _repeat("-u a", n, head="curl "),
    "curl_user_colons": lambda n: _repeat("curl -u a:", n),
    "netrc_words": lambda n: _repeat("machine a login b ", n),
    "netrc_lines": lambda n: _repeat("machine a\nlogin b\n", n),
    "secret_tags": lambda n: _repeat("<password>", n),
    "secret_tag_values": lambda n: _repeat("<password>x", n),
    "k8s_data_lines": lambda n: _repeat("  a: b\n", n, head="kind: Secret\ndata:\n"),
    "k8s_data_headers": lambda n: _repeat("data:\n", n, head="kind: Secret\n"),
    "k8s_json_data": lambda n: _repeat('"data": {', n, head='"kind": "Secret", '),
    "k8s_json_values": lambda n: _repeat('"a": "b", ', n, head='"kind": "Secret", "data": {'),
    "yaml_blocks": lambda n: _repeat("password: |\n", n),
    "yaml_block_lines": lambda n: _repeat("  x\n", n, head="password: |\n"),
    "yaml_nested_blocks": lambda n: _repeat("  token: |\n  secret: >\n", n,
                                            head="password: |\n"),
    "continuations": lambda n: _repeat("\\\n", n),
    "continued_values": lambda n: _repeat("a\\\n", n, head="TOKEN="),
    "pem_words": lambda n: _repeat(" QUFBQUFBQUFBQUFBQUFBQQ", n, head=_BEGIN),
    "pem_indented_lines": lambda n: _repeat("\n    QUFB", n, head=_BEGIN),
    "pem_short_words": lambda n: _repeat(" QUFB", n, head=_BEGIN),
    "pem_continued_lines": lambda n: _repeat("QUFB\\\n", n, head=_BEGIN + "\\\n"),
    "base64_pem_heads": lambda n: _repeat("LS0tLS1CRUdJTi", n),
    "putty_lines": lambda n: _repeat("\nQUFB", n, head="Private-Lines: 3"),
    "putty_heads": lambda n: _repeat("Private-Lines: 3\n", n),
    "jwt_empty_parts": lambda n: _repeat(".", n, head="eyJhbGciOiJIUzI1NiJ9"),
    "jwt_dot_runs": lambda n: _repeat("eyJhbGciOiJIUzI1NiJ9.", n),
    "prose_values": lambda n: _repeat("password: choose ", n),
    "prose_after_a_value": lambda n: _repeat(" a", n, head="password: choose"),
    "call_values": lambda n: _repeat("token = get_", n),
    "bracket_values": lambda n: _repeat("secret: <", n),
    "mask_values": lambda n: _repeat("x", n, head="password: "),
    "mask_groups": lambda n: _repeat("xxx-", n, head="password: "),
    "placeholder_urls": lambda n: _repeat("://u:${", n),
    "airtable_heads": lambda n: _repeat("pat" + "a" * 14 + ".", n, tail="." + "a" * 64),
    "atlas_heads": lambda n: _repeat(".atlasv1.", n),
    "doppler_dots": lambda n: _repeat("dp.st.", n),
    "github_pat_heads": lambda n: _repeat("github_pat_", n),
    "discord_token_parts": lambda n: _repeat("M" * 25 + ".aaaaaa." + "a" * 40 + ".", n),
}
SHAPES = {**REPORTED, **NEW_SHAPES}
NEW_FRAGMENTS = (
    "gsk_", "SG.", "hooks.slack.com/services/", "/webhooks/1234567/", "sig=", "?", "&", "Q~",
    "8", "-us1", "curl -u ", "-u", "machine ", "login ", "password ", "<password>",
    "</password>", "kind: Secret\n", "data:\n", "  ", '"data": {', "|", "\\\n",
    "LS0tLS1CRUdJTi", "Private-Lines: 1", "eyJ", ".", "<", "${", "xxx", "(", "dop_v1_",
    "-----BEGIN EC PRIVATE KEY-----", " ", "\n", "a", "0", "f", ":", "=", "\"",
)

SIZE = 100_000  # the largest document a chat hands to redaction
BUDGET = 0.5  # CPU seconds; a quadratic pattern takes seconds to hours at this size
# A lone surrogate: RE2 cannot read it, so the screen gives way and every pattern runs.
UNSCREENED = "\ud800"
SECRETS = ("hunter2x", "ghp_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
           "sk-" + "AbCdEfGhIjKlMnOpQrStUvWx0123456789abcdefghijkl")


def _cpu_seconds(redactor: Callable[[str], str], text: str) -> float:
    return cpu_seconds(lambda: redactor(text))[1]


def _assert_fast(shape: Callable[[int], str]) -> None:
    # A tenth of the size first, on a quarter of the budget: a quadratic pattern fails there
    # in a second or two instead of running into the test timeout.
    for size, budget in ((SIZE // 10, BUDGET / 4), (SIZE, BUDGET)):
        text = shape(size)
        assert size * 0.9 <= len(text) <= size * 1.1
        for variant in (text, text + UNSCREENED):
            seconds = _cpu_seconds(redact, variant)
            assert seconds < budget, f"{seconds:.2f} s of CPU for {len(variant):,} characters"


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_hostile_shape_is_redacted_in_a_fraction_of_a_second(name: str) -> None:
    _assert_fast(SHAPES[name])


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_shapes())
def test_texts_of_repeated_trigger_fragments_are_redacted_fast(shape: Repeated) -> None:
    _assert_fast(shape)


def _new_shapes() -> st.SearchStrategy[Repeated]:
    """`hostile_shapes`, from the fragments the issue-35 rules react to."""
    fragments = st.lists(st.sampled_from(NEW_FRAGMENTS), min_size=1, max_size=4).map("".join)
    return st.builds(Repeated, st.lists(fragments, min_size=1, max_size=3).map(tuple),
                     st.lists(st.sampled_from(NEW_FRAGMENTS), max_size=3).map("".join))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_new_shapes())
def test_texts_of_repeated_fragments_of_the_newer_rules_are_redacted_fast(
        shape: Repeated) -> None:
    _assert_fast(shape)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_redacting_a_hostile_shape_twice_changes_nothing_more(name: str) -> None:
    once = redact(SHAPES[name](2_000))
    assert redact(once) == once


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_secrets_between_hostile_runs_are_still_replaced(name: str) -> None:
    hostile = SHAPES[name](SIZE // 2)
    line = f"export DB_PASSWORD={SECRETS[0]} and keys {SECRETS[1]} {SECRETS[2]}"
    out = redact(f"{hostile}\n{line}\n{hostile}")
    for secret in SECRETS:
        assert secret not in out
    assert REDACTED in out


@pytest.mark.parametrize(("name", "key", "secret"), [("key_word_run", "token=", "1"),
                                                     ("flag_run", "--password ", "hunter2"),
                                                     ("mysql_words", "-p", "S3cret")])
def test_the_secret_that_ends_a_reported_shape_is_replaced(name: str, key: str,
                                                           secret: str) -> None:
    text = SHAPES[name](SIZE)
    assert text.endswith(key + secret)
    assert redact(text).endswith(key + REDACTED)
