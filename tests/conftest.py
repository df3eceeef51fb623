"""Suite-wide test settings: Hypothesis profiles, and ``engine_kind``.

The default profile keeps the whole suite well under three minutes; pick
another with ``HYPOTHESIS_PROFILE=thorough`` (many more examples, for a soak
before a release) or ``HYPOTHESIS_PROFILE=ci`` (derandomised: a CI failure
reproduces on any machine).
"""

import os

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
