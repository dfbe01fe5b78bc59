"""The run lock beside the SQLite file, in one process: what a second taker is told."""

from __future__ import annotations

import fcntl
import os

import pytest

from gateway.config import load_config
from gateway.service.runlock import AlreadyRunning, held, lock_path, run_lock
from tests.harness.gateway import write_config


def test_a_second_taker_is_told_the_holders_pid_and_a_clean_release_clears_it(tmp_path):
    db = tmp_path / "threadline.db"
    with held(db):
        assert lock_path(db).read_text() == f"{os.getpid()}\n"
        with pytest.raises(AlreadyRunning) as refused, held(db):
            pass
        assert refused.value.pid == os.getpid()
        assert f"pid {os.getpid()}" in str(refused.value) and str(db) in str(refused.value)
    assert lock_path(db).read_text() == ""
    with held(db):  # free again
        pass


def test_a_holder_that_has_not_written_its_pid_yet_is_still_named_as_starting(tmp_path):
    db = tmp_path / "threadline.db"
    fd = os.open(lock_path(db), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(AlreadyRunning) as refused, held(db):
            pass
    finally:
        os.close(fd)
    assert refused.value.pid is None and "still starting" in str(refused.value)


def test_postgresql_storage_takes_no_lock(tmp_path):
    config = load_config(write_config(
        tmp_path, storage={"url": "postgresql://threadline:pw@127.0.0.1:9/threadline"}))
    with run_lock(config), run_lock(config):  # several processes share it by design
        pass
    assert not lock_path(config.db_path).exists()
