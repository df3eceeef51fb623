"""Fixtures for the durability tests: the fault layer, compiled once per session."""

import shutil

import pytest

from .harness import build_shim


@pytest.fixture(scope="session")
def faultfs(tmp_path_factory) -> str:
    """Path of faultfs.so (tests/durability/faultfs.c), built with the system cc."""
    if shutil.which("cc") is None:
        pytest.skip("no C compiler (cc) to build the fault layer tests/durability/faultfs.c")
    return build_shim(str(tmp_path_factory.mktemp("faultfs")))
