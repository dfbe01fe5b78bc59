"""What the summary model is sent, as captured by the fake OpenAI-compatible server.

The real `openai` SDK (through OpenAICompatProvider) talks to tests/harness/fake_openai.py
over a socket; the tests read the requests the server recorded.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Callable
from typing import Any

import pytest

from agent.compression.prompts import SUMMARY_PREFIX
from agent.providers.openai_compat import OpenAICompatProvider
from agent.tokens import estimate_message
from tests.harness import FakeOpenAI
from tests.harness.transcripts import (
    CHECKPOINT,
    assert_valid,
    assistant,
    call,
    chat,
    make_engine,
    result,
    text_of,
    user,
)

Message = dict[str, Any]
Make = Callable[..., OpenAICompatProvider]

# Fake secrets with real shapes, assembled so no scanner takes them for live ones.
SECRETS: dict[str, str] = {
    "openai": "sk-" + "AbCdEfGhIjKlMnOpQrStUvWx0123456789abcdefghijkl",
    "anthropic": "sk-ant-api03-" + "AbCdEf_ghIJkl-MNopQRstu-VWxyz0123456789-abcdEFGH_ijkl-AA",
    "openai_project": "sk-proj-" + "AbCdEfGhIjKl-MnOpQrStUvWx_yz0123456789abcdef",
    "github": "ghp_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    "github_pat": "github_pat_" + "11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN",
    "slack": "xoxb-" + "1234567890-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "aws": "AKIA" + "IOSFODNN7EXAMPLE",
    "google": "AIza" + "SyA-1234567890abcdefghijklmnopqrstu",
    "huggingface": "hf_" + "AbCdEfGhIjKlMnOpQrStUvWxYz01234567",
    "telegram": "123456789:" + "AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw_",
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0."
           + "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "bearer": "Zm9vYmFyYmF6cXV4" + "MTIzNDU2Nzg5MA",
    "url_password": "Hunter2" + "CorrectHorse",
    "private_key": "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQ" + "C7VJTUt9Us8cKj",
    "stripe": "sk_live_" + "51HxYzAbCdEfGhIjKlMnOpQr",
    "stripe_restricted": "rk_test_" + "51HxYzRestrictedKey0123",
    "slack_app": "xapp-" + "1-A0123456789-1234567890123-abcdef0123456789abcdef",
    "gitlab": "glpat-" + "xY9zAbCdEf_GhIjKl-Mn",
    "short_bearer": "q7Rz" + "Kw2x",
    "url_password_slash": "Tr0ub4dor/" + "Horse@Battery9",
    "pgp_key": "lQOYBGVxYzABCADF7aB3cD4eF5gH6iJ7kL8mN9oP0" + "qR1sT2uV3wX4yZ5",
    "pgp_unterminated": "mQENBFzVxZkBCAC9oP0qR1sT2uV3wX4yZ5aB3c" + "D4eF5gH6iJ7kL8mN",
    "dotenv_pass": "Pg" + "Rw8-mTq",
    "password_flag": "Gl4cier" + "Mint",
    "token_flag": "tkn9Q" + "v7Lm2Xp",
    "mysql_p": "My" + "Sq1Pw",
    "php_array": "phpK3y" + "Value",
    "cookie": "sess" + "9f8e7d6c",
    "set_cookie": "sid" + "A1b2C3d4",
    "json_cookie": "jc" + "Z9y8X7w6",
}
_PGP = "-----BEGIN PGP PRIVATE KEY BLOCK-----\nVersion: GnuPG v2\n\n{}\n=Ab12"
PLANTED = {
    **{k: f"use {v} for it" for k, v in SECRETS.items()},
    "bearer": f"curl -H 'Authorization: Bearer {SECRETS['bearer']}' https://api.example.com",
    "url_password": f"psql postgres://admin:{SECRETS['url_password']}@db.internal:5432/app",
    "private_key": "-----BEGIN RSA PRIVATE KEY-----\n" + SECRETS["private_key"]
                   + "\nAAAAB3NzaC1yc2EAAAADAQABAAABAQ\n-----END RSA PRIVATE KEY-----",
    "short_bearer": f"the api wants Bearer {SECRETS['short_bearer']} on each call",
    "url_password_slash":
        f"psql postgres://admin:{SECRETS['url_password_slash']}@db.internal:5432/app",
    "pgp_key": _PGP.format(SECRETS["pgp_key"]) + "\n-----END PGP PRIVATE KEY BLOCK-----",
    "pgp_unterminated": _PGP.format(SECRETS["pgp_unterminated"]),
    "dotenv_pass": f"DB_PASS={SECRETS['dotenv_pass']}",
    "password_flag": f"psql -h db --password {SECRETS['password_flag']} app",
    "token_flag": f"deploy --token {SECRETS['token_flag']} --env prod",
    "mysql_p": f"mysql -u root -p{SECRETS['mysql_p']} shop",
    "php_array": f"$cfg = ['api_key' => '{SECRETS['php_array']}'];",
    "cookie": f"Cookie: theme=dark; sessionid={SECRETS['cookie']}",
    "set_cookie": f"Set-Cookie: {SECRETS['set_cookie']}; Path=/; HttpOnly",
    "json_cookie": f'{{"cookie": "theme=dark; sid={SECRETS["json_cookie"]}"}}',
}


@pytest.fixture
def summarizer(autoclose: Callable[[Any], Any]) -> Make:
    def make(fake: FakeOpenAI, **overrides: Any) -> OpenAICompatProvider:
        return autoclose(OpenAICompatProvider(fake.provider_settings(**overrides)))

    return make


def requests_of(fake: FakeOpenAI) -> list[dict[str, Any]]:
    return [c.json for c in fake.calls_to("/chat/completions")]


def prompt_of(request: dict[str, Any]) -> str:
    return "\n".join(text_of(m["content"]) for m in request["messages"])


def conversation_of(request: dict[str, Any]) -> str:
    """The turns part of a summarizer prompt (not the earlier checkpoint)."""
    text = prompt_of(request)
    return text.split("<conversation>", 1)[1].split("</conversation>", 1)[0]


def summary_of(out: list[Message]) -> str:
    texts = [text_of(m["content"]) for m in out if SUMMARY_PREFIX in text_of(m["content"])]
    assert len(texts) == 1
    return texts[0]


async def test_summarizer_reads_original_tool_output_head_and_tail(
        fake_openai: FakeOpenAI, summarizer: Make) -> None:
    fake_openai.responder = lambda req: CHECKPOINT
    engine = make_engine(8_000, summarizer(fake_openai), max_output_tokens=256)
    big = "HEAD-" + "h" * 3_995 + "MIDDLE-ONLY-" + "m" * 20_000 + "t" * 1_495 + "-TAIL"
    msgs = chat(2, size=50) + [
        user("read the log please"),
        assistant(None, [call("big", "read_file", path="/var/log/app.log", lines=5000)]),
        result("big", big),
        assistant("The log shows a crash at startup."),
        *chat(6, size=300, system=None, tag="L")]
    out = await engine.compress(msgs, force=True)
    assert engine.last_report is not None and engine.last_report.outcome == "compressed"
    prompt = "\n".join(prompt_of(r) for r in requests_of(fake_openai))
    assert big[:4_000] in prompt and big[-1_500:] in prompt
    assert "MIDDLE-ONLY" not in prompt and "characters omitted" in prompt
    assert ('### tool result: read_file (path="/var/log/app.log", lines=5000), '
            f"{len(big):,} characters in full") in prompt
    assert "identical to a newer tool result" not in prompt  # never a pruned one-liner
    assert_valid(out)


async def test_a_300k_token_middle_is_summarized_in_chunks_that_fit_a_4k_window(
        fake_openai: FakeOpenAI, summarizer: Make) -> None:
    budget = 1_024  # the summary budget is capped at a quarter of the 4,096-token window
    fake_openai.context_limit = 4_096 - budget  # the server refuses anything larger
    fake_openai.responder = lambda req: CHECKPOINT + f"\ncheckpoint {len(fake_openai.calls)}"
    engine = make_engine(100_000, summarizer(fake_openai, context_length=4_096),
                         protect_last_n=4, target_ratio=0.10)
    msgs = chat(1, size=100)
    for i in range(250):
        msgs += [user(f"part {i} " + "q" * 1_000),
                 assistant(None, [call(f"p{i}", "fetch", page=i)]),
                 result(f"p{i}", f"page {i} " + "d" * 4_000)]
    msgs += chat(3, size=100, system=None, tag="END")
    first_240 = msgs[5:5 + 3 * 240]
    assert sum(estimate_message(m) for m in first_240) >= 300_000
    out = await engine.compress(msgs, force=True)
    report = engine.last_report
    assert report is not None and report.outcome == "compressed"
    requests = requests_of(fake_openai)
    assert report.summary_chunks == len(requests) >= 10
    for request in requests:
        assert sum(estimate_message(m) for m in request["messages"]) <= 4_096 - budget
        assert request["max_tokens"] == budget
    joined = "\n".join(prompt_of(r) for r in requests)
    assert all(f"page {i} " in joined for i in range(240))  # every turn was read
    assert f"checkpoint {len(requests) - 1}" in prompt_of(requests[-1])  # running summary
    assert_valid(out)


async def test_planted_secrets_never_reach_the_summarizer_or_the_summary(
        fake_openai: FakeOpenAI, summarizer: Make) -> None:
    # A careless model that repeats its input and adds a secret of its own.
    fake_openai.responder = lambda req: (CHECKPOINT + prompt_of(req)[-3_000:]
                                         + f"\nkey was {SECRETS['openai']}")
    engine = make_engine(8_000, summarizer(fake_openai), max_output_tokens=256)
    msgs = chat(1, size=50)
    for i, (kind, text) in enumerate(PLANTED.items()):
        msgs += [user(f"({kind}) {text}"),
                 assistant(f"noted {text}", [call(f"s{i}", "run", cmd=text)]),
                 result(f"s{i}", f"{text}\n" + "o" * 7_000 + f"\n{text}")]
    msgs.append(user(f"last ask, still {SECRETS['github']} here"))
    # Enough later turns to fill the protected tail, so every planted turn is summarized.
    msgs += chat(8, size=300, system=None, tag="Z")
    frozen = copy.deepcopy(msgs)
    out = await engine.compress(msgs, force=True)
    assert msgs == frozen
    assert engine.last_report is not None and engine.last_report.outcome == "compressed"
    calls = fake_openai.calls_to("/chat/completions")
    sent = "\n".join(c.body.decode() for c in calls)
    assert [kind for kind in PLANTED if f"({kind})" not in sent] == []  # all were read
    summary = summary_of(out)
    for kind, secret in SECRETS.items():
        for c in calls:
            assert secret not in c.body.decode(), kind
            assert secret not in json.dumps(c.json["messages"], ensure_ascii=False), kind
        assert secret not in summary, kind
        assert secret not in (engine.previous_summary or ""), kind
    assert "[REDACTED]" in summary


async def test_planted_secrets_never_reach_the_logs_when_the_summarizer_fails(
        fake_openai: FakeOpenAI, summarizer: Make, caplog: pytest.LogCaptureFixture) -> None:
    # Some proxies echo the request in their error text: the failure is logged and shown.
    echoed = " | ".join(PLANTED.values())
    fake_openai.fail_next(500, body={"error": {"message": f"upstream refused: {echoed}"}},
                          times=3)
    engine = make_engine(8_000, summarizer(fake_openai), max_output_tokens=256)
    msgs = chat(1, size=50)
    for kind, text in PLANTED.items():
        msgs += [user(f"({kind}) {text}"), assistant(f"noted {text}")]
    msgs += chat(8, size=300, system=None, tag="Z")
    with caplog.at_level(logging.DEBUG):  # captured before any redacting log filter runs
        await engine.compress(msgs, force=True)
    report = engine.last_report
    assert report is not None and report.error and "upstream refused" in caplog.text
    for kind, secret in SECRETS.items():
        assert secret not in caplog.text, kind
        assert secret not in report.error, kind
        assert all(secret not in notice for notice in report.notices), kind


async def test_second_compaction_sends_previous_summary_and_only_new_turns(
        fake_openai: FakeOpenAI, summarizer: Make) -> None:
    fake_openai.responder = lambda req: CHECKPOINT + "\nFIRST-CHECKPOINT-MARK"
    engine = make_engine(8_000, summarizer(fake_openai), protect_last_n=4)
    first = chat(14, size=300, tag="OLD")
    out1 = await engine.compress(first, force=True)
    first_prompt = "\n".join(conversation_of(r) for r in requests_of(fake_openai))
    summarized = [f"OLD-ask-{i} " for i in range(14) if f"OLD-ask-{i} " in first_prompt]
    assert summarized
    fake_openai.reset()
    fake_openai.responder = lambda req: CHECKPOINT + "\nSECOND-CHECKPOINT-MARK"
    out2 = await engine.compress(out1 + chat(10, size=300, system=None, tag="NEW"), force=True)
    assert engine.last_report is not None and engine.last_report.outcome == "compressed"
    second = requests_of(fake_openai)
    prompt = "\n".join(prompt_of(r) for r in second)
    assert "<checkpoint>" in prompt_of(second[0]) and "FIRST-CHECKPOINT-MARK" in prompt
    turns = "\n".join(conversation_of(r) for r in second)
    assert "NEW-ask-0 " in turns
    assert not [marker for marker in summarized if marker in turns]
    assert "SECOND-CHECKPOINT-MARK" in summary_of(out2)
    assert SUMMARY_PREFIX not in prompt  # the old summary goes in as a body, not re-prefixed
    assert_valid(out2)


async def test_focus_topic_reaches_the_prompt(fake_openai: FakeOpenAI, summarizer: Make) -> None:
    fake_openai.responder = lambda req: CHECKPOINT
    engine = make_engine(8_000, summarizer(fake_openai))
    await engine.compress(chat(12, size=300), focus_topic="the database migration", force=True)
    assert engine.last_report is not None and engine.last_report.focus_topic
    prompt = prompt_of(requests_of(fake_openai)[0])
    assert "the database migration" in prompt and "two thirds" in prompt


@pytest.mark.parametrize("reply", [
    "## Active Task\nWrite a haiku about the sea.\n\n## Goal\n" + "Finish the refactor. " * 8,
    "## Goal\n" + "Finish the refactor of the parser module and its tests. " * 4,
    "We refactored the parser and the tests now pass on CI after the fixes. " * 3,
])
async def test_active_task_is_the_newest_compacted_request_verbatim(
        fake_openai: FakeOpenAI, summarizer: Make, reply: str) -> None:
    fake_openai.responder = lambda req: reply
    engine = make_engine(8_000, summarizer(fake_openai), protect_last_n=4)
    ask = "Rename `parse_v1` → `parse` in /src/parser.py\n…and keep the old name as an alias."
    # The latest turn is large, so the tail holds only it and `ask` is the newest request
    # inside the compacted span.
    msgs = chat(6, size=300) + [user(ask), assistant("On it.")] + chat(
        1, size=2_000, system=None, tag="LATER")
    out = await engine.compress(msgs, force=True)
    compacted_users = [m for m in msgs if m["role"] == "user" and not any(m is o for o in out)]
    assert compacted_users[-1]["content"] == ask  # the newest request inside the span
    summary = summary_of(out)
    assert f"## Active Task\n{ask}\n\n" in summary
    assert "haiku" not in summary
    assert summary.count("## Active Task") == 1
    if "## Goal" not in reply:  # prose without sections is kept under the grounded task
        assert reply.strip()[:60] in summary
