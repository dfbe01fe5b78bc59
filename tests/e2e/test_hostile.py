"""Nothing a stranger sends can stall the bot: hostile files and texts go through a real
`threadline run` on the fake Telegram while another chat says hello every second. That
chat's every answer comes within 2 s, the hostile chat gets an answer or a one-sentence
refusal within its budget, the bot and its workers stay under 600 MB, and the hostile
chat's next message is answered (docs/architecture.md, "Untrusted work")."""

from __future__ import annotations

import asyncio
import signal

import pytest

from tests.harness.cli import THREADLINE, cli_env
from tests.harness.hostile_files import CORPUS
from tests.harness.hostile_run import (
    BUDGET_S,
    HOSTILE_USER,
    Calm,
    Outcome,
    config_file,
    file_update,
    responder,
    send_item,
)
from tests.harness.hostile_text import SHAPES
from tests.harness.procmem import PeakMemory

pytestmark = pytest.mark.timeout(600)  # dozens of items, each answered at Telegram's pace
MEMORY_MB = 600
EXTRA_CHATS = 5550400  # hostile chats beside the first, when items go several at a time
CALM_S = 2.0
TEXT_CHARS = 100_000
# Three times the budget: the answer also waits for the download, the model and Telegram's
# one message a second, and a busy CI machine slows every one of them.
ANSWER_S = BUDGET_S * 3
NESTED_SPOILER = "||x\n" + "> " * 32 + "\nx||"  # exponential in the converter's own pattern


async def started(tmp_path, config: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        THREADLINE, "run", "--config", config, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, cwd=str(tmp_path),
        env=cli_env(tmp_path))


async def run_items(tmp_path, fake_openai, fake_telegram, items, chats: int = 1) -> tuple[
        list[Outcome], Calm, float, str]:
    """Send the items, each into one of `chats` hostile chats, that many at a time."""
    fake_openai.responder = responder
    proc = await started(tmp_path, config_file(tmp_path, fake_telegram, fake_openai.base_url))
    calm = Calm(fake_telegram)
    outcomes = []
    try:
        async with PeakMemory(proc.pid) as memory:
            fake_telegram.push(fake_telegram.updates.private_text("warm up", HOSTILE_USER))
            await fake_telegram.wait_for_messages(HOSTILE_USER, 1, timeout=60)
            calm.start()
            for at in range(0, len(items), chats):
                batch = items[at:at + chats]
                users = [HOSTILE_USER, *(EXTRA_CHATS + i for i in range(1, len(batch)))]
                outcomes += await asyncio.gather(*(
                    send_item(fake_telegram, name, make(user), ANSWER_S, user)
                    for user, (name, make) in zip(users, batch, strict=True)))
            await calm.stop()
    finally:
        err = await stopped(proc)
    return outcomes, calm, memory.peak_mb, err


async def stopped(proc: asyncio.subprocess.Process) -> str:
    """SIGTERM, and SIGKILL if that does not end it: a stuck bot must not outlive the test."""
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:
        proc.kill()
        _, err = await proc.communicate()
        return err.decode() + "\n(killed: SIGTERM did not end it within 60 s)"
    return err.decode()


def judge(outcomes: list[Outcome], calm: Calm, peak_mb: float, err: str) -> None:
    problems = [f"{o.name}: no answer within {ANSWER_S:g} s" for o in outcomes if not o.answer]
    problems += [f"{o.name}: the next message went unanswered" for o in outcomes
                 if not o.next_answered]
    problems += [f"{o.name}: answered with more than one sentence: {o.answer!r}"
                 for o in outcomes if o.answer.startswith("I can't") and
                 o.answer.rstrip(".").count(". ") > 0]
    problems += [f"hello {n} was answered after {delay:.1f} s" for n, delay in calm.late]
    if peak_mb >= MEMORY_MB:
        problems.append(f"peak memory {peak_mb:.0f} MB")
    if "Traceback" in err:
        problems.append("a traceback in the log")
    assert not problems, "\n".join(problems)
    assert len(calm.latencies) >= len(outcomes), "the other chat kept talking throughout"


async def test_hostile_files_cost_their_own_chat_alone(tmp_path, fake_openai, fake_telegram):
    items = [(name, lambda user, f=file_name, m=make: file_update(fake_telegram, f, m(), user))
             for name, (file_name, make) in CORPUS.items()]
    outcomes, calm, peak_mb, err = await run_items(tmp_path, fake_openai, fake_telegram, items)
    judge(outcomes, calm, peak_mb, err)
    said = {o.name: o.answer for o in outcomes}
    assert said["png_huge"].startswith("I can't read huge.png")  # declined before decoding


async def test_hostile_texts_and_markdown_cost_their_own_chat_alone(tmp_path, fake_openai,
                                                                    fake_telegram):
    def document(name: str, text: str):
        return lambda user: file_update(fake_telegram, f"{name}.txt", text.encode(), user)

    def said(text: str):
        return lambda user: fake_telegram.updates.private_text(text, user)

    items = [(name, document(name, make(TEXT_CHARS))) for name, make in SHAPES.items()]
    items.append(("nested spoiler", said(NESTED_SPOILER)))
    items += [(f"spoiler at depth {depth}", said("||a\n" + "> " * depth + "\nb||"))
              for depth in (20, 40, 60)]
    # Four hostile chats at once: more hostile, and the suite's time stays reasonable.
    outcomes, calm, peak_mb, err = await run_items(tmp_path, fake_openai, fake_telegram, items,
                                                   chats=4)
    judge(outcomes, calm, peak_mb, err)
    for outcome in outcomes:
        if "spoiler" in outcome.name:
            assert outcome.answer.startswith("echo: ||"), outcome  # every character kept


@pytest.mark.parametrize("count", [6])
async def test_sigterm_while_hostile_pdfs_are_read_exits_in_time(tmp_path, fake_openai,
                                                                  fake_telegram, count):
    from tests.harness.hostile_files import pdf_shared_stream

    fake_openai.responder = responder
    config = config_file(tmp_path, fake_telegram, fake_openai.base_url)
    proc = await started(tmp_path, config)
    try:
        fake_telegram.push(fake_telegram.updates.private_text("warm up", HOSTILE_USER))
        await fake_telegram.wait_for_messages(HOSTILE_USER, 1, timeout=60)
        data = pdf_shared_stream()
        for n in range(count):  # six chats, each reading the costly PDF
            file_id = fake_telegram.add_file(data, suffix=".pdf")
            fake_telegram.push(fake_telegram.updates.document(
                f"report-{n}.pdf", "application/pdf", chat_id=HOSTILE_USER + 10 + n,
                user_id=HOSTILE_USER + 10 + n, file_id=file_id))
        await asyncio.sleep(2)  # the readers are busy now
        loop = asyncio.get_running_loop()
        asked = loop.time()
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 120)
        took = loop.time() - asked
    finally:
        if proc.returncode is None:
            proc.kill()
    assert proc.returncode == 0
    assert took < 45, f"SIGTERM took {took:.1f} s; the unit allows 45 (TimeoutStopSec)"
