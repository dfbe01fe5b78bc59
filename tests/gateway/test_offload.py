"""Worker processes for untrusted work: a budget per job, a memory cap, killed and
replaced when a job overruns, is cancelled or dies (gateway/offload.py)."""

from __future__ import annotations

import asyncio
import os

import pytest

from gateway.offload import WorkerPool, WorkFailed, WorkTimeout
from tests.harness import jobs


@pytest.fixture
async def pool():
    made = WorkerPool("test", size=2, memory_mb=256)
    try:
        yield made
    finally:
        await made.close()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:  # a zombie is dead too
            return stat.read().split()[2] != "Z"
    except FileNotFoundError:  # reaped between the two looks
        return False


async def gone(pid: int) -> bool:
    for _ in range(200):
        if not alive(pid):
            return True
        await asyncio.sleep(0.05)
    return False


async def test_a_job_runs_in_another_process_and_its_error_comes_back(pool):
    assert await pool.run(jobs.add, 2, 3, budget_s=30) == 5
    assert await pool.run(jobs.pid, budget_s=30) != os.getpid()
    with pytest.raises(ValueError, match="bad input"):
        await pool.run(jobs.fail, "bad input", budget_s=30)
    with pytest.raises(WorkFailed, match="_Unpicklable"):
        await pool.run(jobs.fail_oddly, budget_s=30)
    assert pool.killed == 0, "a job's own error does not cost its worker"


async def test_a_job_over_its_budget_is_killed_and_the_pool_goes_on(pool):
    worker, other = await asyncio.gather(*(pool.run(jobs.nap_pid, 0.2, budget_s=30)
                                           for _ in range(2)))
    # Both outcomes awaited: under load the second kill may land after the first raises.
    outcomes = await asyncio.gather(pool.run(jobs.spin, budget_s=0.5),
                                    pool.run(jobs.spin, budget_s=0.5), return_exceptions=True)
    assert [type(o) for o in outcomes] == [WorkTimeout, WorkTimeout]
    assert pool.killed == 2
    assert await gone(worker) and await gone(other)
    assert await pool.run(jobs.add, 1, 1, budget_s=30) == 2  # a new worker took the slot


async def test_cancelling_the_caller_kills_the_job(pool):
    workers = set(await asyncio.gather(*(pool.run(jobs.nap_pid, 0.2, budget_s=30)
                                         for _ in range(2))))
    task = asyncio.create_task(pool.run(jobs.spin, budget_s=600))
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(200):
        if any(not alive(pid) for pid in workers):
            break
        await asyncio.sleep(0.05)
    assert [alive(pid) for pid in sorted(workers)].count(False) == 1, \
        "the spinning worker is killed (a stopped read must not burn CPU on), the other kept"
    assert pool.outcomes["cancelled"] == 1 and pool.killed == 1


async def test_a_worker_that_dies_or_runs_out_of_memory_fails_only_its_job(pool):
    with pytest.raises(WorkFailed, match="SIGKILL"):
        await pool.run(jobs.die, budget_s=30)
    with pytest.raises(WorkFailed, match="more memory"):
        await pool.run(jobs.hog, 1024, budget_s=30)  # over the 256 MB cap
    assert await pool.run(jobs.hog, 16, budget_s=30) == 16 * 1024 * 1024


async def test_at_most_size_jobs_run_at_once(pool):
    loop = asyncio.get_running_loop()
    await asyncio.gather(*(pool.run(jobs.add, 0, 0, budget_s=30) for _ in range(2)))  # warm
    started = loop.time()
    await asyncio.gather(*(pool.run(jobs.nap, 0.4, budget_s=30) for _ in range(4)))
    assert loop.time() - started >= 0.8  # two at a time: two rounds of 0.4 s


async def test_the_event_loop_stays_free_while_a_worker_spins(pool):
    loop = asyncio.get_running_loop()
    spinning = asyncio.create_task(pool.run(jobs.spin, budget_s=3))
    await asyncio.sleep(0.5)  # the worker is busy now
    worst = 0.0
    for _ in range(20):
        asked = loop.time()
        await asyncio.sleep(0.05)
        worst = max(worst, loop.time() - asked - 0.05)
    with pytest.raises(WorkTimeout):
        await spinning
    assert worst < 0.5


async def test_close_kills_running_workers(pool):
    workers = set(await asyncio.gather(*(pool.run(jobs.nap_pid, 0.2, budget_s=30)
                                         for _ in range(2))))
    task = asyncio.create_task(pool.run(jobs.spin, budget_s=600))
    await asyncio.sleep(0.5)
    await pool.close()
    with pytest.raises(WorkFailed):
        await task
    assert all([await gone(pid) for pid in workers])
    with pytest.raises(WorkFailed):
        await pool.run(jobs.add, 1, 1, budget_s=30)
