"""Fixtures for pylog.table's tests: a real Store in tmp_path (no background thread: the
tests run the converter themselves), closed at teardown."""

import pytest

import pylog


@pytest.fixture
def store(tmp_path):
    s = pylog.open(str(tmp_path / "logs"), background=False)
    yield s
    s.close()
