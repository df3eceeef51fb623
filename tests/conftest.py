"""Suite-wide test settings: Hypothesis profiles, and ``engine_kind``.

The default profile keeps the whole suite well under three minutes; pick
another with ``HYPOTHESIS_PROFILE=thorough`` (many more examples, for a soak
before a release) or ``HYPOTHESIS_PROFILE=ci`` (derandomised: a CI failure
reproduces on any machine).
"""

import os
import tempfile

import pytest
from hypothesis import HealthCheck, settings

from pylog._core.engine import IoEngine

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("default", max_examples=40, **_COMMON)
settings.register_profile("ci", max_examples=40, derandomize=True, print_blob=True, **_COMMON)
settings.register_profile("thorough", max_examples=2000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "default"))


ENGINES = ("portable", "io_uring")


@pytest.fixture(params=ENGINES)
def engine_kind(request) -> str:
    """The I/O engine name (tests pass it as ``pylog.io.engine``): every test that
    takes it runs once per engine, and skips where the engine is unavailable."""
    try:
        IoEngine(request.param)
    except OSError as exc:
        pytest.skip(f"the {request.param} I/O engine is unavailable here: {exc}")
    return request.param


@pytest.fixture(params=("buffered", "direct"))
def io_mode(request, monkeypatch, tmp_path) -> str:
    """Runs a test once with buffered appends and once with O_DIRECT appends
    (pylog.io.direct), by changing the key's default in this process and, through
    PYLOG_IO_DIRECT, in the processes the test starts. Modules whose every test
    runs in both modes say ``pytestmark = pytest.mark.usefixtures("io_mode")``.
    The direct run skips where the test's file system refuses O_DIRECT."""
    import dataclasses

    from pylog._core.engine import direct_alignment
    from pylog.storage import config

    if request.param == "direct":
        fd, probe = tempfile.mkstemp(dir=tmp_path)
        try:
            direct_alignment(fd)
        except OSError as exc:
            pytest.skip(f"O_DIRECT is unavailable under {tmp_path}: {exc.strerror}")
        finally:
            os.close(fd)
            os.unlink(probe)
    value = "true" if request.param == "direct" else "false"
    key = "pylog.io.direct"
    monkeypatch.setitem(config.TOPIC_CONFIGS, key,
                        dataclasses.replace(config.TOPIC_CONFIGS[key], default=value))
    monkeypatch.setenv(config.DIRECT_ENV_VAR, value)
    return request.param
