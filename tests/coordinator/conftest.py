"""Fixtures for the coordinator tests: stores (storage plus the group
coordinator, as pylog.open returns them) with a fake clock, always closed."""

import pytest
from log_support import Clock, manager_factory

import pylog


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def dirs(tmp_path):
    """Three log dir paths (not created yet), like three disks."""
    return [str(tmp_path / f"disk{i}") for i in range(3)]


@pytest.fixture
def open_manager(clock):
    """``open_manager(dirs, **config)``: a pylog.Store with the fake clock and no
    background thread (tests call run_background_tasks); closed at teardown."""
    yield from manager_factory(pylog.Store, clock)
