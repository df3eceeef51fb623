"""Fixtures for the LogManager tests: a fake clock, and managers that are
always closed (locks released) at the end of a test."""

import pytest

from pylog._core.engine import IoEngine
from pylog.manager import LogManager

ENGINES = ("portable", "io_uring")

from log_support import T0, Clock  # noqa: F401 - re-exported to the manager tests


@pytest.fixture(params=ENGINES)
def engine_kind(request) -> str:
    """The engine name; tests pass it as the broker default ``pylog.io.engine``."""
    try:
        IoEngine(request.param)
    except OSError as exc:
        pytest.skip(f"the {request.param} I/O engine is unavailable here: {exc}")
    return request.param


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def dirs(tmp_path):
    """Three log dir paths (not created yet), like three disks."""
    return [str(tmp_path / f"disk{i}") for i in range(3)]


@pytest.fixture
def open_manager(clock):
    """``open_manager(dirs, **config)``: a LogManager with the fake clock and no
    background thread (tests call run_background_tasks); closed at teardown."""
    opened = []

    def make(log_dirs, config=None, *, background=False, **kw):
        manager = LogManager(log_dirs, config, clock=kw.pop("clock", clock), background=background, **kw)
        opened.append(manager)
        return manager
    yield make
    for manager in opened:
        manager.close()
