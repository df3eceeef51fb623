"""Simulated power loss under a whole store (issue 14, item 1).

The workload (workload.py: a LogManager over two dirs with its background
thread, an idempotent acks=all Producer, offset commits, InitProducerId)
runs under the fault layer (faultfs.c) and is killed. From the layer's
journal the harness builds the files a power loss would leave just after
each of many journal entries, half of them with torn writes, reopens each
image and checks every promise made before that point (harness.py):

- every record acknowledged under acks=all is present, byte-identical;
- no record is corrupt, duplicated or out of place;
- committed offsets, producer ids and idempotent producer state never go back.

``tools/durability-soak`` runs the same for as long as you like.
"""

import os
import random

import pytest

from . import harness

# long: handed out first on the xdist workers (tests/conftest.py)
pytestmark = pytest.mark.slow

CRASH_POINTS = 80           # per run (4 runs); the soak runs thousands


def run_power_loss(root_dir, shim, engine, seed, seconds, clean_first=False):
    """Runs the workload under the fault layer and kills it after `seconds`, or
    later, once it has journaled more than CRASH_POINTS durable events and
    logged more than 1000 acknowledgements; with `clean_first`, a first session
    sends 3000 records and closes the store cleanly (so the crash hits a store
    reopened after a clean shutdown)."""
    root = os.path.join(root_dir, "root")
    os.mkdir(root)
    journal_dir = os.path.join(root_dir, "journal")
    events = os.path.join(root_dir, "events")
    session = 1
    if clean_first:
        proc = harness.start(root, 1, seed, engine, events, shim=shim, journal=journal_dir,
                             records=3000)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and out.endswith(b"done\n"), err.decode()
        session = 2
    journaled = harness.count_lines(os.path.join(journal_dir, "journal"))

    def enough():
        return (harness.count_lines(os.path.join(journal_dir, "journal")) - journaled
                > CRASH_POINTS + 10 and harness.count_lines(events, b"ack ") > 1000)

    harness.run_and_kill(root, session, seed, engine, events, seconds, until=enough, shim=shim,
                         journal=journal_dir)
    return root, harness.Journal(journal_dir), harness.Promises.read(events)


@pytest.mark.parametrize("clean_first", [False, True], ids=["fresh", "after-clean-shutdown"])
def test_power_loss_at_many_points_keeps_every_promise(tmp_path, faultfs, engine_kind, clean_first):
    seed = 1 + clean_first
    root, journal, promises = run_power_loss(str(tmp_path), faultfs, engine_kind, seed, 1.2,
                                             clean_first)
    assert journal.last > CRASH_POINTS, f"only {journal.last} durable events were journaled"
    assert len(promises.acks) > 1000 and promises.commits and promises.pids
    rng = random.Random(seed)
    points = sorted(rng.sample(range(1, journal.last), CRASH_POINTS - 1)) + [journal.last]
    results = harness.check_crash_points(journal, harness.identity(root), promises, str(tmp_path),
                                         points, rng)
    assert sum(r["torn"] for r in results) > 0, "no torn write was simulated"
    assert sum(r["acked"] for r in results) > 0
    # The files the kill itself left (page cache kept) keep every promise too.
    harness.check_store(root, promises)


def test_the_check_fails_when_data_fsyncs_are_forgotten(tmp_path, faultfs):
    """The harness can fail: forget every fsync of a .log file and acknowledged
    records must be reported lost at some crash point."""
    root, journal, promises = run_power_loss(str(tmp_path), faultfs, "portable", 2, 0.8)
    journal.forget(lambda name: name.endswith(".log"))
    with pytest.raises(AssertionError, match="is lost|read stopped|are missing"):
        harness.check_crash_points(journal, harness.identity(root), promises, str(tmp_path),
                                   [journal.last], random.Random(2))


def test_the_check_fails_when_directory_fsyncs_are_forgotten(tmp_path, faultfs):
    """A segment whose directory entry was never fsync'ed is gone after a power
    loss: without the log's directory fsyncs, acknowledged records are lost."""
    root, journal, promises = run_power_loss(str(tmp_path), faultfs, "portable", 3, 0.8)
    journal.forget_directories(lambda name: name.startswith("keep-"))
    with pytest.raises(AssertionError, match="is lost|read stopped|are missing|keep has no retention"):
        harness.check_crash_points(journal, harness.identity(root), promises, str(tmp_path),
                                   [journal.last], random.Random(3))
