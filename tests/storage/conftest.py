"""Fixtures for the storage tests: LogManagers (storage only, no coordinator)
with a fake clock, always closed. ``engine_kind`` (one run per I/O engine) is
suite-wide, in tests/conftest.py."""

import os
import tempfile

import pytest
from log_support import Clock, manager_factory

from pylog._core.engine import IoEngine, direct_alignment
from pylog.storage import LogManager


def io_uring_available() -> bool:
    try:
        IoEngine("io_uring")
    except OSError:
        return False
    return True


def o_direct_available(directory: str) -> bool:
    """Whether files under `directory` can be appended with O_DIRECT."""
    fd, path = tempfile.mkstemp(dir=directory)
    try:
        direct_alignment(fd)
    except OSError:
        return False
    finally:
        os.close(fd)
        os.unlink(path)
    return True


@pytest.fixture
def log_dir(tmp_path) -> str:
    """A fresh topic-partition directory path (not created yet)."""
    return os.path.join(tmp_path, "events-0")


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def dirs(tmp_path):
    """Three log dir paths (not created yet), like three disks."""
    return [str(tmp_path / f"disk{i}") for i in range(3)]


@pytest.fixture
def open_manager(clock):
    """``open_manager(dirs, **config)``: a storage LogManager with the fake clock and
    no background thread (tests call run_background_tasks); closed at teardown."""
    yield from manager_factory(LogManager, clock)
