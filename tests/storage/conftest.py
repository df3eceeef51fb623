"""Fixtures for the storage tests: every Log test runs once per I/O engine."""

import os

import pytest

from pylog._core.engine import IoEngine

ENGINES = ("portable", "io_uring")


def _engine_or_skip(kind: str) -> IoEngine:
    try:
        return IoEngine(kind)
    except OSError as exc:
        pytest.skip(f"the {kind} I/O engine is unavailable here: {exc}")


def io_uring_available() -> bool:
    try:
        IoEngine("io_uring")
    except OSError:
        return False
    return True


@pytest.fixture(params=ENGINES)
def engine_kind(request) -> str:
    """The engine name; the Log tests pass it as ``pylog.io.engine``."""
    _engine_or_skip(request.param)
    return request.param


@pytest.fixture
def log_dir(tmp_path) -> str:
    """A fresh topic-partition directory path (not created yet)."""
    return os.path.join(tmp_path, "events-0")
