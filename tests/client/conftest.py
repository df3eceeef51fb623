"""A real store (pylog.Store) per test, closed afterwards."""

import pytest

import pylog


@pytest.fixture
def store(tmp_path):
    s = pylog.open(str(tmp_path / "data"))
    yield s
    s.close()
