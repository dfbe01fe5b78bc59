"""End to end with the real embedded model: what `make run` gives a user on a fresh machine."""

from __future__ import annotations

import sqlite3

import pytest

from tests.harness.cli import threadline

pytestmark = pytest.mark.model


@pytest.mark.timing
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


# Not `timing`: its only bound is the pytest timeout, and forty real-model turns with the
# CPUs kept busy take longer than that; loaded, it measures the machine, not the code.
@pytest.mark.timeout(900)
async def test_forty_turn_console_chat_compacts_with_a_real_summary(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text("model: {max_output_tokens: 96}\n"
                      "compression: {protect_last_n: 6}\n")
    topics = ["gardening", "sailing", "baking bread", "chess", "astronomy", "cycling",
              "pottery", "birdwatching"]
    lines = [f"Turn {i}: tell me one short fact about {topics[i % len(topics)]}. "
             + "I am asking because I like to learn a little every day, and I keep notes. " * 12
             for i in range(40)]
    ran = await threadline("chat", "--config", str(config), stdin="\n".join(lines) + "\n",
                           home=tmp_path, timeout=900)
    assert ran.code == 0, ran.err
    assert "without the summary model" not in ran.out, "the local model wrote the summary"
    db = sqlite3.connect(tmp_path / "threadline.db")
    chain = db.execute("SELECT id, parent_session_id, kind, end_reason FROM sessions").fetchall()
    continuations = [s for s in chain if s[2] == "compression"]
    assert continuations, "40 turns on an 8K window compact at least once"
    summaries = db.execute("SELECT input, output FROM usage WHERE purpose = 'summary'").fetchall()
    assert summaries and all(i > 0 and o > 0 for i, o in summaries)
    [tip] = [s for s in chain if s[3] is None]
    tip_roles = [r for (r,) in db.execute(
        "SELECT role FROM messages WHERE session_id = ? ORDER BY seq", (tip[0],))]
    assert tip_roles[-1] == "assistant", "the chat went on answering on the tip"
    answered = db.execute("SELECT count(*) FROM inbound WHERE status = 'answered'").fetchone()
    assert answered[0] == 40
    handoff = db.execute("SELECT content FROM messages WHERE session_id = ? AND content LIKE "
                         "'%THREADLINE HANDOFF%'", (continuations[-1][0],)).fetchall()
    assert handoff, "the continuation carries the handoff summary"
