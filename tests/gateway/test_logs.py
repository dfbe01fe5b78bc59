"""What the gateway writes to stderr once logging is configured from config.yaml."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote

import pytest
import yaml

from gateway.config import load_config
from gateway.service.logs import ONE_LINE, configure_logging
from tests.harness.secret_forms import FORMS

# Fake secrets, assembled so no scanner takes them for live ones.
PATTERN_KEY = "sk-" + "AbCdEfGhIjKlMnOpQrStUvWx0123456789abcdefghijkl"
CONFIGURED_KEY = "plain-configured-" + "value-42"  # fits no pattern: masked as configured


def test_json_log_lines_keep_the_traceback_but_not_the_secrets_in_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], restore_logging: None) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"model": {"api_key": CONFIGURED_KEY},
                                    "logging": {"format": "json", "level": "INFO"}}))
    config = load_config(path, env={})
    configure_logging(config)
    try:
        raise RuntimeError(f"upstream refused {PATTERN_KEY} and {CONFIGURED_KEY}")
    except RuntimeError:
        logging.getLogger("gateway.test_logs").exception("request failed")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1
    entry = json.loads(lines[0])
    assert entry["message"] == "request failed"
    assert "Traceback" in entry["exc"] and "RuntimeError: upstream refused" in entry["exc"]
    assert PATTERN_KEY not in lines[0] and CONFIGURED_KEY not in lines[0]
    assert "[REDACTED]" in entry["exc"]
    # The time says its zone: a log collector never has to guess the server's clock.
    at = datetime.fromisoformat(entry["at"])
    assert at.utcoffset() == timedelta(0)
    assert abs((datetime.now(UTC) - at).total_seconds()) < 300


def test_the_storage_password_is_masked_raw_and_percent_decoded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], restore_logging: None) -> None:
    password = "Tr0ub#dor?&@3/x%y"  # every character a URL reserves
    encoded = quote(password, safe="")
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"storage": {"url": f"postgresql://tl:{encoded}@db/app"}}))
    configure_logging(load_config(path, env={}))
    logging.getLogger("gateway.test_logs").warning("client said: %s / %s", password, encoded)
    err = capsys.readouterr().err
    assert "client said:" in err
    assert password not in err and encoded not in err and "Tr0ub" not in err


def test_a_one_line_logger_keeps_no_secret_of_the_error_it_folds_into_its_line(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], restore_logging: None) -> None:
    # asyncpg's pool error is logged as one line with the exception's repr, where every
    # line break is a `\n` escape: a key cut short, or any other form, must not leak there.
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"logging": {"format": "text", "level": "INFO"}}))
    configure_logging(load_config(path, env={}))
    pool = logging.getLogger(next(iter(ONE_LINE)))
    for form in FORMS:
        try:
            raise OSError(f"({form.name}) cannot connect:\n{form.text}")  # the form ends it
        except OSError:
            pool.exception("connection failed")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == len(FORMS) and "Traceback" not in "\n".join(lines)
    out = "\n".join(lines)
    assert [form.name for form in FORMS if f"({form.name})" not in out] == []
    assert [form.name for form in FORMS if any(part in out for part in form.secrets)] == []
