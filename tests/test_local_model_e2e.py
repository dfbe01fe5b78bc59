"""End to end with the real embedded model: what `make run` gives a user on a fresh machine."""

from __future__ import annotations

import sqlite3

import pytest

from tests.cli_support import threadline

pytestmark = pytest.mark.model


async def test_run_on_builtin_defaults_answers_with_the_local_model(tmp_path):
    ran = await threadline("run", stdin="Hello! What is the capital of France?\n",
                           home=tmp_path, timeout=300)
    assert ran.code == 0, ran.err
    assert ran.out.strip(), "the local model gave no reply"
    assert "Traceback" not in ran.err
    db = sqlite3.connect(tmp_path / "threadline.db")
    rows = db.execute("SELECT model, purpose, input, output FROM usage").fetchall()
    [(model, purpose, prompt, completion)] = rows
    assert (model, purpose) == ("SmolLM2-135M-Instruct", "chat")
    # Real counts from llama.cpp's tokenizer: the system prompt and question alone are > 20
    # tokens, and the reply is bounded by max_output_tokens.
    assert 20 < prompt < 200
    assert 0 < completion <= 1024
    stored = db.execute("SELECT role, answered FROM messages ORDER BY id").fetchall()
    assert stored == [("system", None), ("user", 1), ("assistant", None)]
