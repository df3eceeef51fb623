"""pylog.common.memory: glibc's thresholds (tune_malloc), raised only when asked, never
over the environment's choice; the start-up heap out of the cyclic collector's passes
(freeze_heap), by pylog serve only."""

import subprocess
import sys

import pytest

CHECK = """
import os, sys
from pylog.common.memory import tune_malloc
print(tune_malloc())
"""


def run(env_extra):
    import os
    env = dict(os.environ, **env_extra)
    for key in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "PYLOG_KEEP_MALLOC"):
        if key not in env_extra:
            env.pop(key, None)
    return subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                          env=env, timeout=60).stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_thresholds_are_raised_once_asked():
    assert run({}).startswith("malloc: mmap threshold 32 MiB, trim threshold 256 MiB")


def test_the_environment_wins():
    assert "from the environment" in run({"MALLOC_TRIM_THRESHOLD_": "1000000"})
    assert "left as it is" in run({"PYLOG_KEEP_MALLOC": "1"})


def test_importing_pylog_changes_nothing():
    """The library never tunes malloc by itself: only pylog serve, pylog perf and
    benchmarks call tune_malloc."""
    import ast
    from pathlib import Path
    src = Path(__file__).resolve().parents[1] / "src" / "pylog"
    callers = sorted(str(p.relative_to(src)) for p in src.rglob("*.py")
                     if "tune_malloc()" in p.read_text() and p.name != "memory.py")
    assert callers == ["cli/perf.py", "cli/serve.py"]
    assert ast.parse((src / "common" / "memory.py").read_text())


FREEZE = """
import gc
import pylog
from pylog.common.memory import freeze_heap
tracked = len(gc.get_objects())
frozen = freeze_heap()
print(tracked, frozen, len(gc.get_objects()))
"""


def test_freeze_heap_takes_the_start_up_heap_out_of_the_collectors_passes():
    """What a full pass of the collector walks after freeze_heap: what was made since,
    not the modules and classes pylog imported."""
    out = subprocess.run([sys.executable, "-c", FREEZE], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    tracked, frozen, walked = map(int, out)
    assert frozen >= tracked * 0.9
    assert walked < tracked / 10


def test_only_pylog_serve_freezes_the_heap():
    """Process-wide (an application's own objects would be frozen too): the library
    never freezes by itself."""
    from pathlib import Path
    src = Path(__file__).resolve().parents[1] / "src" / "pylog"
    callers = sorted(str(p.relative_to(src)) for p in src.rglob("*.py")
                     if ("freeze_heap()" in p.read_text() or "gc.freeze()" in p.read_text())
                     and p.name != "memory.py")
    assert callers == ["cli/serve.py"]
