"""Secrets never survive redaction; ordinary text does, untouched (docs/architecture.md, "When the summary fails", "Secrets")."""

from __future__ import annotations

import base64
import copy
import io
import json
import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent.redact import (
    _RULES,
    _SCREEN,
    REDACTED,
    _lower,
    _redact_all,
    redact,
    redact_each,
    redact_message,
)
from agent.redact_screen import _GROUP_CHARS
from gateway.service.logs import RedactingFilter
from tests.harness.benign_texts import BENIGN
from tests.harness.secret_forms import FORMS

# Fake secrets with the real shapes, assembled so no scanner mistakes them for live keys.
_DISCORD_ID = base64.b64encode(b"123456789012345678").decode().rstrip("=")
SECRETS: dict[str, str] = {
    "openai": "sk-" + "AbCdEfGhIjKlMnOpQrStUvWx0123456789abcdefghijkl",
    "anthropic": "sk-ant-api03-" + "AbCdEf_ghIJkl-MNopQRstu-VWxyz0123456789-abcdEFGH_ijkl-AA",
    "openai_project": "sk-proj-" + "AbCdEfGhIjKl-MnOpQrStUvWx_yz0123456789abcdef",
    "github": "ghp_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "github_server": "ghs_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "github_pat": "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN",
    "slack": "xoxb-" + "1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "aws": "AKIA" + "IOSFODNN7EXAMPLE",
    "aws_session": "ASIA" + "ABCDEFGHIJKLMNOP",
    "google": "AIza" + "SyA-1234567890abcdefghijklmnopqrstu",
    "huggingface": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
    "telegram": "123456789:" + "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw_",
    "discord": _DISCORD_ID + ".G1a2b3." + "abcdefghijklmnopqrstuvwxyz0123456789AB",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0."
           + "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "stripe_live": "sk_live_" + "51HxYzAbCdEfGhIjKlMnOpQr",
    "stripe_test": "sk_test_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "stripe_restricted": "rk_live_" + "51HxYzRestrictedKey0123",
    "slack_app": "xapp-" + "1-A0123456789-1234567890123-abcdef0123456789abcdef",
    "gitlab": "glpat-" + "xY9zAbCdEf_GhIjKl-Mn",
}


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_every_key_kind_is_replaced_whole_in_a_sentence(kind: str) -> None:
    secret = SECRETS[kind]
    text = f"my {kind} key is {secret}. Please keep it safe."
    out = redact(text)
    assert out == f"my {kind} key is {REDACTED}. Please keep it safe."


@pytest.mark.parametrize("kind", ["anthropic", "openai_project", "slack", "github_pat",
                                  "slack_app", "gitlab"])
def test_hyphenated_keys_leave_no_tail(kind: str) -> None:
    secret = SECRETS[kind]
    out = redact(f"export KEY_VALUE={secret}")
    assert out.endswith(REDACTED)
    # No fragment after the prefix survives, not even the last hyphenated piece.
    for piece in secret.replace("_", "-").split("-")[1:]:
        if len(piece) >= 4:
            assert piece not in out


def test_telegram_token_inside_a_bot_api_url() -> None:
    url = f"https://api.telegram.org/bot{SECRETS['telegram']}/getMe"
    assert redact(url) == f"https://api.telegram.org/bot{REDACTED}/getMe"


def test_discord_shape_without_a_numeric_id_is_not_a_token() -> None:
    lookalike = "MyProjectNameIsVeryLongOk.abcdef.abcdefghijklmnopqrstuvwxyz01234"
    assert redact(lookalike) == lookalike


@pytest.mark.parametrize(("text", "expected"), [
    ("curl -H 'Authorization: Bearer abc123def456ghi789'",
     f"curl -H 'Authorization: Bearer {REDACTED}'"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", f"Authorization: Basic {REDACTED}"),
    ('{"Authorization": "Bot abc.def.ghi"}', f'{{"Authorization": "Bot {REDACTED}"}}'),
    ("token sent as Bearer abcdefghijklmnop1234", f"token sent as Bearer {REDACTED}"),
    # Short values with no header name around them: generated-looking, so a credential.
    ("curl -H 'X: y' then Bearer abc123xyz", f"curl -H 'X: y' then Bearer {REDACTED}"),
    ("sent Bearer abcDEFghi.", f"sent Bearer {REDACTED}."),
])
def test_authorization_headers_keep_the_name_and_lose_the_value(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_password_in_url_keeps_user_and_host() -> None:
    text = "connect to postgres://admin:s3cr3t!pw@db.example.com:5432/app now"
    assert redact(text) == f"connect to postgres://admin:{REDACTED}@db.example.com:5432/app now"


@pytest.mark.parametrize(("text", "expected"), [
    ("postgres://admin:p@ss/w0rd@db", f"postgres://admin:{REDACTED}@db"),
    ("psql postgres://admin:a/b@c@db.example.com:5432/app -c 'select 1'",
     f"psql postgres://admin:{REDACTED}@db.example.com:5432/app -c 'select 1'"),
    ('{"url": "redis://:s3c@ret@cache:6379/0"}', f'{{"url": "redis://:{REDACTED}@cache:6379/0"}}'),
])
def test_url_password_holding_at_or_slash_is_redacted_to_the_host(text: str,
                                                                   expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("DB_PASSWORD=hunter2x", f"DB_PASSWORD={REDACTED}"),
    ("api_key: abcd1234", f"api_key: {REDACTED}"),
    ('{"password": "correct horse battery"}', f'{{"password": "{REDACTED}"}}'),
    ("dbPassword = 'pa ss'", f"dbPassword = '{REDACTED}'"),
    ("https://x.test/cb?token=abc123&page=2", f"https://x.test/cb?token={REDACTED}&page=2"),
    ("CLIENT_SECRET: zz9", f"CLIENT_SECRET: {REDACTED}"),
    ("x-api-key: k-123", f"x-api-key: {REDACTED}"),
    ("Pwd=letmein;Server=db", f"Pwd={REDACTED};Server=db"),
    ("AUTH=abc private_key: 'xyz'", f"AUTH={REDACTED} private_key: '{REDACTED}'"),
    ("DB_PASS=hunter2x", f"DB_PASS={REDACTED}"),
    ("spring.datasource.pass: s3cr3t", f"spring.datasource.pass: {REDACTED}"),
    ('{"pass": "letmein"}', f'{{"pass": "{REDACTED}"}}'),
    ("$cfg = ['api_key' => 'abc123', 'debug' => true];",
     f"$cfg = ['api_key' => '{REDACTED}', 'debug' => true];"),
    ('{ :password => "pa ss", :host => "db" }', f'{{ :password => "{REDACTED}", :host => "db" }}'),
])
def test_secret_assignments_lose_their_value(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("psql -h db --password hunter2 app", f"psql -h db --password {REDACTED} app"),
    ("deploy --token abcDEF123456 --env prod", f"deploy --token {REDACTED} --env prod"),
    ("cli --api-key 'k 123' --verbose", f"cli --api-key '{REDACTED}' --verbose"),
    ("tool --password=Hun7er --secret xyz_42", f"tool --password={REDACTED} --secret {REDACTED}"),
    ("mysql -u root -pS3cret shop", f"mysql -u root -p{REDACTED} shop"),
    ("mysqldump -uroot -p'S3 cret' shop > dump.sql", f"mysqldump -uroot -p{REDACTED} shop > dump.sql"),
    ("docker exec db mariadb -h 127.0.0.1 -pS3cret", f"docker exec db mariadb -h 127.0.0.1 -p{REDACTED}"),
])
def test_command_line_password_flags_lose_their_value(text: str, expected: str) -> None:
    assert redact(text) == expected


@pytest.mark.parametrize(("text", "expected"), [
    ("GET / HTTP/1.1\nCookie: sessionid=abc123; theme=dark\nHost: x",
     f"GET / HTTP/1.1\nCookie: {REDACTED}\nHost: x"),
    ("Set-Cookie: sid=s3cr3t; Path=/; HttpOnly", f"Set-Cookie: {REDACTED}"),
    ('{"cookie": "sid=s3cr3t; lang=en", "ok": true}', f'{{"cookie": "{REDACTED}", "ok": true}}'),
    ("curl -H 'Cookie: a=1; b=2' -H 'cookie: c=3' https://x.test",
     f"curl -H 'Cookie: {REDACTED}' -H 'cookie: {REDACTED}' https://x.test"),
])
def test_cookie_headers_lose_the_whole_value(text: str, expected: str) -> None:
    assert redact(text) == expected


def test_secrets_inside_json_encoded_tool_arguments_keep_the_json_valid() -> None:
    command = 'echo \'{"password": "hunter2x"}\' > c.json; curl -H "Cookie: sid=s3cr3t" x'
    msg = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "run", "arguments": json.dumps({"cmd": command})}}]}
    args = redact_message(msg)["tool_calls"][0]["function"]["arguments"]
    cmd = json.loads(args)["cmd"]
    assert "hunter2x" not in cmd and "s3cr3t" not in cmd
    assert cmd.startswith(f'echo \'{{"password": "{REDACTED}"}}\' > c.json; curl -H "Cookie: ')


def test_private_key_block_is_replaced_whole() -> None:
    block = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAx1y2\nQm9ndXNrZXk=\n"
             "-----END RSA PRIVATE KEY-----")
    assert redact(f"here:\n{block}\nthanks") == f"here:\n{REDACTED}\nthanks"


def test_unterminated_private_key_block_still_loses_its_body() -> None:
    out = redact("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA\nAAAABG5vbmU=")
    assert out == REDACTED


PGP_BODY = ("Version: GnuPG v2\nComment: test key\n\n"
            "lQOYBGVxYzABCADF7aB3cD4eF5gH6iJ7kL8mN9oP0qR1sT2uV3wX4yZ5\n"
            "aB3cD4eF5gH6iJ7kL8mN9oP0qR1sT2u+/V3wX4yZ5==\n=Ab12")


@pytest.mark.parametrize("end", ["\n-----END PGP PRIVATE KEY BLOCK-----", ""])
def test_pgp_private_key_block_loses_headers_body_and_checksum(end: str) -> None:
    block = f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n{PGP_BODY}{end}"
    assert redact(f"my key:\n{block}\nthanks, keep it safe") == (
        f"my key:\n{REDACTED}\nthanks, keep it safe")


def test_unterminated_key_inside_tool_arguments_loses_its_body() -> None:
    body = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEA\nAAAABG5vbmU=\n"
    args = json.dumps({"path": "/root/.ssh/id", "body": body})
    assert json.loads(redact(args)) == {"path": "/root/.ssh/id", "body": f"{REDACTED}\n"}


ORDINARY = [
    "PELICAN-7731 is the ticket for the login bug",
    "/home/user/src/threadline/agent/context_compressor.py:120",
    "C:\\Users\\ann\\Documents\\report-final-v2.docx",
    "request id 123e4567-e89b-12d3-a456-426614174000",
    "commit da39a3ee5e6b4b0d3255bfef95601890afd80709 fixed it",
    "max_tokens: 1024 and prompt_tokens=5310, tokens: 77",
    "author: Jane Doe; monkey=3; keyboard: US",
    "## Key Decisions: none yet",
    "the task-risk-management-framework-for-the-whole-team doc",
    "whisk-together-the-eggs-and-the-flour-slowly then bake",
    "XAKIAIOSFODNN7EXAMPLEX is a made-up constant name",
    "see shf_abcdefghijklmnopqrstuvwxyz0123456 and myghp_abcdefghijklmnopqrstuvwxyz0123",
    "visit https://www.example.com/path?page=2&sort=asc",
    "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "Time 12:30:45, ratio 3:2, score 10:7",
    "A bearer of good news arrived.",
    "ssh git@github.com:org/repo.git",
    "Ask about the API key rotation schedule tomorrow.",
    "www.google.com and docs.python.org",
    "http://localhost:8080/path and https://host:8443/a/b?page=2",
    "bypass=1, compass: north, passes: 3, passport=yes",
    "mkdir -p build && ssh -p2222 deploy@host && scp -P 22 a b",
    "use a Bearer token. Bearer auth is simple; the Bearer scheme",
    "pass --token and --url to the script, or use the --secret flag",
    "psql --no-password mydb; docker login --password-stdin -u me",
    "cookies: 3, fortune_cookie: yes",
    "sk_test_helper and rk_live_check are function names",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact(text) == text


@pytest.mark.parametrize("text", [
    "Password: choose a long one",
    "def login(user, password: str):",
    "token = get_token()",
    "connect(password=None)",
    'api_key: str = ""',
    "secret: <your-secret-here>",
    "DB_PASSWORD=changeme", "API_KEY=xxxx", "TOKEN=XXXX-XXXX", "TOKEN=${GITHUB_TOKEN}",
    "API_KEY=<paste it here>", "password: ********", "password = password",
    "token: Optional[str] = None", "password = os.environ['DB_PASSWORD']",
    "const token = await getToken();", "password: process.env.DB_PASSWORD",
    "Authorization: Bearer <token>", "curl -H 'Authorization: Bearer $TOKEN' x",
    "postgres://app:${DB_PASSWORD}@db/app", "--password $PGPASSWORD",
    "<password>${env.NEXUS_PASSWORD}</password>",
])
def test_a_secret_named_but_not_given_is_left_alone(text: str) -> None:
    # A key word must be followed by something that looks like a value: placeholders,
    # variables, code and prose after it are not secrets (issue 35).
    assert redact(text) == text


@pytest.mark.parametrize(("text", "secret"), [
    ("DB_PASSWORD=hunter2", "hunter2"), ("SMTP_PASSWORD=sunshine", "sunshine"),
    ("password: sunshine", "sunshine"), ("Pwd=letmein;Server=db", "letmein"),
    ("password = 'correct horse'", "correct horse"), ("token: expired-3f9a", "expired-3f9a"),
])
def test_short_human_passwords_in_config_lines_are_still_secrets(text: str,
                                                                 secret: str) -> None:
    assert secret not in redact(text)


def test_a_key_cut_short_does_not_take_the_text_up_to_another_keys_end() -> None:
    # The first block has no END; the END further down closes a different key, so only
    # the cut key's own lines go, and the words between the two keys stay.
    cut = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC"
    whole = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAx1y2\n"
             "-----END RSA PRIVATE KEY-----")
    text = f"{cut}\nthe deploy notes stay\n{whole}\nend"
    assert redact(text) == f"{REDACTED}\nthe deploy notes stay\n{REDACTED}\nend"


def test_a_key_with_an_odd_line_is_still_closed_by_its_own_end() -> None:
    block = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEAx1y2\n(pasted from vault)\n"
             "Qm9ndXNrZXk=\n-----END RSA PRIVATE KEY-----")
    assert redact(f"key:\n{block}\nok") == f"key:\n{REDACTED}\nok"


def test_redaction_is_idempotent() -> None:
    text = " | ".join(SECRETS.values()) + " password=abc postgres://u:p4ss@h/db"
    once = redact(text)
    assert once.count(REDACTED) >= len(SECRETS) + 2
    assert redact(once) == once


def test_redact_message_copies_and_covers_every_text_field() -> None:
    key = SECRETS["openai"]
    msg = {
        "role": "assistant",
        "content": [{"type": "text", "text": f"using {key}"},
                    {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}}],
        "tool_calls": [{"id": "c1", "type": "function",
                        "function": {"name": "http", "arguments": f'{{"api_key": "{key}"}}'}}],
    }
    before = copy.deepcopy(msg)
    out = redact_message(msg)
    assert msg == before  # the input is never mutated
    assert key not in repr(out)
    assert out["content"][0]["text"] == f"using {REDACTED}"
    assert out["content"][1] is msg["content"][1]  # untouched parts are shared, not copied
    assert out["tool_calls"][0]["function"]["arguments"] == f'{{"api_key": "{REDACTED}"}}'


def test_redact_message_covers_tool_results() -> None:
    token = SECRETS["github"]
    tool = {"role": "tool", "tool_call_id": "c1", "content": f"GITHUB_TOKEN={token}"}
    assert redact_message(tool)["content"] == f"GITHUB_TOKEN={REDACTED}"
    block = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                                          "content": [{"type": "text", "text": token}]}]}
    assert redact_message(block)["content"][0]["content"][0]["text"] == REDACTED
    assert block["content"][0]["content"][0]["text"] == token


def test_redact_message_returns_the_same_object_when_clean() -> None:
    msg = {"role": "user", "content": [{"type": "text", "text": "hello there"}]}
    assert redact_message(msg) is msg


def _logger_with_filter() -> tuple[logging.Logger, io.StringIO, RedactingFilter]:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    filt = RedactingFilter()
    handler.addFilter(filt)
    logger = logging.getLogger(f"test_redact.{id(stream)}")
    logger.handlers = [handler]
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    return logger, stream, filt


def test_log_filter_redacts_secrets_in_args_and_in_msg() -> None:
    logger, stream, _ = _logger_with_filter()
    logger.info("calling with key %s for %s", SECRETS["anthropic"], "chat 42")
    logger.warning(f"bot token is {SECRETS['telegram']}")
    out = stream.getvalue()
    assert SECRETS["anthropic"] not in out and SECRETS["telegram"] not in out
    assert f"calling with key {REDACTED} for chat 42" in out
    assert f"bot token is {REDACTED}" in out


def test_log_filter_masks_configured_secrets_that_fit_no_pattern() -> None:
    logger, stream, filt = _logger_with_filter()
    filt.add_known_secret("plain-looking-value-42")
    filt.add_known_secret("short")  # too short to mask safely: ignored
    logger.error("upstream said %r", {"detail": "bad plain-looking-value-42", "who": "short"})
    out = stream.getvalue()
    assert "plain-looking-value-42" not in out
    assert REDACTED in out and "short" in out


def test_log_filter_redacts_tracebacks() -> None:
    logger, stream, _ = _logger_with_filter()
    try:
        raise RuntimeError(f"auth failed for {SECRETS['huggingface']}")
    except RuntimeError:
        logger.exception("request failed")
    out = stream.getvalue()
    assert "Traceback" in out and SECRETS["huggingface"] not in out


def test_known_secrets_belong_to_one_filter_only() -> None:
    first, second = RedactingFilter(), RedactingFilter()
    first.add_known_secret("configured-secret-value")
    assert first.redact("x configured-secret-value y") == f"x {REDACTED} y"
    assert second.redact("x configured-secret-value y") == "x configured-secret-value y"



# Texts the screen must not misjudge: the rules' and key forms' parts, assembled in every
# spacing, quoting and case, with the non-ASCII letters case-folding treats specially
# (Kelvin sign, long s, dotted and dotless i) and a lone surrogate, which RE2 cannot read.
_KEYS = ["password", "PassWord", "DB_PASS", "apiKEY", "api_\u212aey", "to\u212aen",
         "\u017fecret", "cookie", "Set-Cookie", "Authorization", "AUTHORIZATION", "secret_key"]
_VALUES = ["S3cret", "abcDEF123_-x", "\"s3 cr3t\"", "x" * 40, "\u0130dem"]
_BLANK = st.sampled_from(["", " ", "\t", "  "])
_KEY_FORM = st.builds(
    lambda *parts: "".join(parts), st.sampled_from(_KEYS),
    st.sampled_from(["", "\"", "'", "\\\"", "\\'"]), _BLANK,
    st.sampled_from([":", "=", "=>", " "]), _BLANK, st.sampled_from(_VALUES))
_FLAG_FORM = st.builds(lambda *parts: "".join(parts), st.just("--"),
                       st.sampled_from(["", "db-", "DB_", "x.", "no-", "v2_"]),
                       st.sampled_from(_KEYS), _BLANK, st.sampled_from(_VALUES))
_RULE_FORM = st.builds(lambda *parts: "".join(parts),
                       st.sampled_from(["Bearer", "bearer", "mysql -u root", "mariadb db",
                                        "https://user:", "x"]),
                       _BLANK, st.sampled_from(["-p", "", "@host"]), _BLANK,
                       st.sampled_from(_VALUES + ["p4ss@host/db"]))
# The forms of issue 35 as pasted, as a JSON string and as tool arguments (where their
# lines are `\n` escapes), the ordinary texts, and pieces of the newer rules' shapes.
_FORM_TEXTS = [form.text for form in FORMS] + [json.dumps({"cmd": form.text}) for form in FORMS]
_NEWER_PIECES = ["kind: Secret", "data:", "  tls.key: QUFB", "password: |", "    s3cr3t",
                 "Private-Lines: 2", "\\\n", "\\\\\\n", "curl -u a:b", "-u 1000:1000",
                 "machine h login u password p", "<password>x</password>", "&sig=",
                 "hooks.slack.com/services/", "/webhooks/123456/", "eyJhbGciOiJIUzI1NiJ9.",
                 "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0t", "${TOKEN}", "<token>", "get_token()"]
_PIECE = st.one_of(_KEY_FORM, _FLAG_FORM, _RULE_FORM,
                   st.sampled_from([*SECRETS.values(), *ORDINARY, "\u0131", "\ud800", "\n",
                                    "\\n", "-----BEGIN RSA PRIVATE KEY-----\nAAAA"]),
                   st.sampled_from([*_FORM_TEXTS, *BENIGN, *_NEWER_PIECES]))


@settings(max_examples=600, deadline=None)
@given(st.lists(_PIECE, max_size=5), _BLANK)
def test_the_screen_never_changes_a_result(parts: list[str], joint: str) -> None:
    # The screen may only skip text the full pass would leave alone (agent/redact_screen.py).
    text = joint.join(parts)
    assert redact(text) == _redact_all(text, _lower(text))


@pytest.mark.parametrize("text", [*_FORM_TEXTS, *BENIGN, *_NEWER_PIECES])
def test_the_screen_agrees_with_the_full_pass_on_every_form(text: str) -> None:
    # Each form, its JSON-encoded twin, and each ordinary text, as they are: the property
    # test above mixes them, this names the one that disagrees.
    assert redact(text) == _redact_all(text, _lower(text))
    assert redact(redact(text)) == redact(text)


def test_no_replacement_can_add_a_trigger() -> None:
    # agent/redact_rule.py `Triggers`: the rules a text triggers are found once, before any
    # replacement, which holds only if `[REDACTED]` holds no trigger and no trigger holds a
    # bracket that could span its edges.
    triggers = {trigger for rule in _RULES for trigger in rule.triggers}
    assert len(triggers) > 60
    assert [t for t in triggers if t in REDACTED or t.lower() in REDACTED.lower()] == []
    assert [t for t in triggers if "[" in t or "]" in t] == []


@settings(max_examples=400, deadline=None)
@given(st.lists(st.builds(lambda parts, joint: joint.join(parts),
                          st.lists(_PIECE, max_size=3), _BLANK), max_size=8))
def test_one_scan_over_many_texts_redacts_each_as_if_alone(texts: list[str]) -> None:
    # agent/redact_screen.py `candidates`: the texts are screened joined by line breaks.
    assert redact_each(texts) == [redact(t) for t in texts]


def test_the_screen_of_a_long_span_finds_every_text_across_its_groups() -> None:
    # Screen.candidates joins and scans ~_GROUP_CHARS at a time: secrets at the first and
    # last text of groups, and a text longer than a group, must all be found.
    secrets = [*SECRETS.values(), "password = hunter2", "--token Xy9_kLm2Qr8s"]
    texts = []
    for i in range(400):
        filler = f"line {i} " + "lorem ipsum dolor " * (i % 90)
        texts.append(filler + secrets[i % len(secrets)] if i % 3 == 0 else filler)
    texts[150] = "x" * (_GROUP_CHARS + 10) + " " + SECRETS["github"]
    assert sum(map(len, texts)) > 4 * _GROUP_CHARS
    expected = [i for i, text in enumerate(texts) if _SCREEN.check(text) != []]
    assert 130 < len(expected) and 150 in expected
    assert _SCREEN.candidates(texts) == expected
    assert redact_each(texts) == [redact(t) for t in texts]
