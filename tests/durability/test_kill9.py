"""Real crashes at every layer (issue 14, item 2): kill -9 of a whole store at work.

Each round starts the workload (workload.py) on the same two log dirs: a
LogManager with its background thread flushing, rolling, applying retention
and writing checkpoints, an idempotent acks=all Producer, offset commits to
``__consumer_offsets`` and InitProducerId calls. It is SIGKILLed at a random
moment; a copy of the dirs as the kill left them is opened and every promise
of every round so far is checked (harness.check_store); the next round then
recovers the original. SIGKILL keeps the page cache, so this proves process
crashes; tests/durability/test_power_loss.py covers a power loss.
"""

import os
import random
import shutil

import pytest

from . import harness

# long: handed out first on the xdist workers (tests/conftest.py)
pytestmark = pytest.mark.slow

ROUNDS = 12


def test_kill9_rounds_keep_every_promise(tmp_path, engine_kind):
    root = str(tmp_path / "root")
    os.mkdir(root)
    events = str(tmp_path / "events")
    rng = random.Random(f"kill9-{engine_kind}")
    checked = []
    for session in range(1, ROUNDS + 1):
        # The last round works on until more than 1000 records are acknowledged.
        enough = (lambda: harness.count_lines(events, b"ack ") > 1000) if session == ROUNDS else None
        harness.run_and_kill(root, session, 9, engine_kind, events, rng.uniform(0.05, 0.8),
                             until=enough)
        promises = harness.Promises.read(events)
        copy = str(tmp_path / f"after-{session}")
        shutil.copytree(root, copy)
        checked.append(harness.check_store(copy, promises))
        shutil.rmtree(copy)
    promises = harness.Promises.read(events)
    assert len(promises.producers) == ROUNDS            # every round got going
    assert len({pid for _, pid, _, _ in promises.producers}) == ROUNDS
    assert checked[-1]["acked"] > 1000, checked[-1]
