"""Suite-wide test settings: Hypothesis profiles, ``engine_kind``, ``io_mode``, and how
tests share pytest-xdist workers.

Hypothesis: pick a profile with ``HYPOTHESIS_PROFILE=thorough`` (many more examples, for
a soak before a release) or ``HYPOTHESIS_PROFILE=ci`` (derandomised: a CI failure
reproduces on any machine).

Workers: ``tools/run-tests`` runs the suite on pytest-xdist workers with
``--dist loadgroup``: each test goes to whichever worker is free, except tests marked
``xdist_group(name)``, which all run on one worker, in order (docs/TESTING.md says when
to mark a module). Tests that use a fixture of ``SHARED_FIXTURES`` are grouped here, so
the fixture's one instance (a JVM, a SparkSession) is started once, not once per worker.
Tests marked ``slow`` are handed out first, so that no long test starts last. A test
marked ``alone`` (its assertions time a broker's answers) runs while no other worker runs
a test: ``_Alone`` below.
"""

import fcntl
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


# fixture name -> xdist group of every test that uses it: one instance per run.
SHARED_FIXTURES = {
    "spark": "spark",           # tests/spark/conftest.py: one local[2] SparkSession (a JVM)
    "real_kafka": "real-kafka",  # tests/kafka_reference/conftest.py: one Kafka broker JVM
}


@pytest.hookimpl(tryfirst=True)         # before xdist reads the groups (same hook)
def pytest_collection_modifyitems(config, items):
    for item in items:
        for fixture, group in SHARED_FIXTURES.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.xdist_group(group))
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Same order in every worker (xdist checks): slow tests first, otherwise as collected.
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


class _GroupSuffix:
    """A loadgroup worker tells the controller a test's group by appending ``@name`` to
    the test's node id (xdist's own hook). From pytest 9.2 node ids are structured and
    xdist's assignment to the old ``_nodeid`` attribute no longer takes, so every group
    would be silently ignored (pytest-dev/pytest-xdist#1386). This adds the suffix where
    xdist's hook could not; once xdist sets it itself, this does nothing."""

    @pytest.hookimpl(trylast=True)      # after xdist's hook
    def pytest_collection_modifyitems(self, config, items):
        if not getattr(config.option, "loadgroup", False):
            return
        from _pytest.nodeid import coerce_node_id
        for item in items:
            names = {str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                     for m in item.iter_markers("xdist_group")}
            suffix = "@" + "_".join(sorted(names))
            if names and not item.nodeid.endswith(suffix):
                item._id = coerce_node_id(item.nodeid + suffix)


class _Alone:
    """Tests marked ``alone`` run with no test running on another worker; the others run
    side by side. A reader-writer lock between the workers of one run, from two flock(2)ed
    files in the run's shared base temp dir: every test holds ``run`` shared; an ``alone``
    test holds it exclusively. It first takes ``gate`` exclusively, and other tests pass
    the gate before taking ``run``, so while it waits for the running tests to end, no new
    one starts (no starvation). Workers idle meanwhile: keep such tests few and short."""

    def __init__(self, config) -> None:
        self.config = config

    def _open(self, name: str) -> int:
        root = self.config._tmp_path_factory.getbasetemp().parent   # shared by the workers
        return os.open(os.path.join(root, f"pylog-{name}.lock"), os.O_RDWR | os.O_CREAT, 0o644)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        gate, run = self._open("gate"), self._open("run")
        try:
            if item.get_closest_marker("alone") is not None:
                fcntl.flock(gate, fcntl.LOCK_EX)
                fcntl.flock(run, fcntl.LOCK_EX)
            else:
                fcntl.flock(gate, fcntl.LOCK_SH)
                fcntl.flock(run, fcntl.LOCK_SH)
                fcntl.flock(gate, fcntl.LOCK_UN)
            return (yield)
        finally:
            os.close(run)           # closing releases its locks
            os.close(gate)


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        config.pluginmanager.register(_Alone(config), "pylog-alone")
    try:
        import _pytest.nodeid  # noqa: F401 - structured node ids: pytest 9.2 and later
    except ImportError:
        return
    config.pluginmanager.register(_GroupSuffix(), "pylog-xdist-group-suffix")


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


@pytest.fixture(scope="module")
def kip848_timers() -> dict:
    """The consumer-protocol (KIP-848) group timers of ``kip848_broker``: a module whose
    tests need others (a session that expires within a test) defines its own
    ``kip848_timers`` fixture, which pytest uses instead of this one."""
    return {"group_consumer_heartbeat_interval_ms": 500, "group_consumer_session_timeout_ms": 15000}


@pytest.fixture(scope="module")
def kip848_broker(tmp_path_factory, kip848_timers):
    """(store, broker): one pylog broker per module for consumer-protocol (KIP-848)
    groups, on a free port of 127.0.0.1, with no initial rebalance delay; each test names
    its own topics and groups."""
    import pylog
    store = pylog.open(str(tmp_path_factory.mktemp("kip848")))
    broker = pylog.Broker(store, listen="127.0.0.1:0", group_initial_rebalance_delay_ms=0,
                          **kip848_timers).start()
    try:
        yield store, broker
    finally:
        broker.shutdown()
        store.close()
