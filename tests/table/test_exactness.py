"""Exactly once across kill -9: the converter runs in a child process (reading the log dirs
beside the open store, as a second process would) and is SIGKILLed, at each named step
(decoded, Parquet written, the catalog's new metadata written, committed) and at random
points while a producer writes; afterwards the table holds every record of the log once
(offset, key, value, headers, timestamp), and the commits' offset ranges chain with no
gap and no overlap. Files of a run killed before its commit are referenced by no
snapshot. tools/table-kill-soak runs the random rounds for as long as asked."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
import warnings

import pytest

from pylog.table import TableConverter, convert, watermarks
from pylog.table.converter import KILL_AT_ENV

from .support import assert_commit_chain, commits_of, rows_of, table_of

T0 = 1_700_000_000_000


class Producer:
    """Appends batches of random sizes to random partitions, remembering each record's
    row; `lock` is held across each append (a fork happens between appends)."""

    def __init__(self, store, topic, partitions, seed):
        self.store, self.topic, self.partitions = store, topic, partitions
        self.rng = random.Random(seed)
        self.rows = []
        self.lock = threading.Lock()
        self.n = 0

    def one(self):
        p = self.rng.randrange(self.partitions)
        n = self.rng.randint(1, 40)
        keys = [b"k%d" % (self.n + i) if i % 4 else None for i in range(n)]
        values = [os.urandom(self.rng.randint(0, 64)) for _ in range(n)]
        headers = [[("i", b"%d" % (self.n + i))] if i % 3 == 0 else None for i in range(n)]
        stamps = [T0 + self.n + i for i in range(n)]
        codec = self.rng.choice(["none", "lz4", "zstd"])
        with self.lock:
            first = self.store.log(self.topic, p).append_records(
                values, keys, stamps, headers, compression=codec).first_offset
        self.rows += [(p, first + i, keys[i], values[i], tuple(headers[i] or ()), stamps[i], 0,
                       self.topic) for i in range(n)]
        self.n += n


def run_child(log_dirs, topic, *, kill_at=None, loop=False, fork_lock=None):
    """Forks a converter process; returns its pid and a pipe that says "ready" once its
    table is open, then "." after each run (loop: run_once again and again; else once)."""
    r, w = os.pipe()
    if fork_lock is not None:
        fork_lock.acquire()
    try:
        with warnings.catch_warnings():
            # Python >= 3.12 warns of fork() beside threads (the producer's): the child
            # touches none of their state (its converter opens its own catalog; pyiceberg
            # makes a new executor in a new pid).
            warnings.simplefilter("ignore", DeprecationWarning)
            pid = os.fork()
    finally:
        if fork_lock is not None and pid != 0:
            fork_lock.release()
    if pid == 0:       # the child: never returns into pytest
        code = 1
        try:
            os.close(r)
            if kill_at is not None:
                os.environ[KILL_AT_ENV] = kill_at
            converter = TableConverter(log_dirs, topic)
            converter.table()
            if kill_at == "metadata":   # inside the catalog's commit: metadata file written, row not
                from pyiceberg.catalog.sql import SqlCatalog
                write = SqlCatalog._write_metadata

                def write_then_die(*args, **kwargs):
                    write(*args, **kwargs)
                    os.kill(os.getpid(), signal.SIGKILL)
                SqlCatalog._write_metadata = staticmethod(write_then_die)
            os.write(w, b"ready")
            while True:
                converter.run_once()
                os.write(w, b".")
                if not loop:
                    break
            code = 0
        finally:
            os._exit(code)
    os.close(w)
    return pid, r


def wait_ready(pipe, close=True):
    got = os.read(pipe, 5)
    if close:
        os.close(pipe)
    return got == b"ready"


def reap(pid):
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def data_files_on_disk(table):
    root = table.location()[len("file://"):]
    return {os.path.join(d, f) for d, _, fs in os.walk(os.path.join(root, "data")) for f in fs
            if f.endswith(".parquet")}


def referenced_files(table):
    out = set()
    for snapshot in table.snapshots():
        for manifest in snapshot.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=False):
                out.add(entry.data_file.file_path[len("file://"):])
    return out


@pytest.mark.parametrize("step", ["read", "written", "metadata", "committed"])
def test_kill_at_each_step_then_convert_again(store, step):
    store.create_topic("t", 2, {"pylog.table.enable": "true"})
    producer = Producer(store, "t", 2, seed=step)
    for _ in range(6):
        producer.one()
    convert(store, "t")                    # a first commit: the killed one is not the first
    before = watermarks(table_of(store, "t"))
    for _ in range(6):
        producer.one()
    pid, pipe = run_child(store.log_dirs, "t", kill_at=step)
    assert wait_ready(pipe)
    assert reap(pid) == -signal.SIGKILL
    table = table_of(store, "t")
    if step == "committed":
        assert watermarks(table) == {p: store.log("t", p).log_end_offset for p in range(2)}
    else:
        assert watermarks(table) == before          # nothing of the killed run is visible
    if step in ("written", "metadata"):
        orphans = data_files_on_disk(table) - referenced_files(table)
        assert orphans                               # its Parquet files exist, in no snapshot
    result = convert(store, "t")
    assert result.committed == (step != "committed")
    table = table_of(store, "t")
    assert rows_of(table) == sorted(producer.rows)
    assert_commit_chain(table, 2)
    assert not convert(store, "t").committed


@pytest.mark.slow
def test_random_kills_while_a_producer_writes(store):
    rounds = int(os.environ.get("PYLOG_TABLE_KILL_ROUNDS", "30"))
    seed = int(os.environ.get("PYLOG_TABLE_KILL_SEED", "46"))
    rng = random.Random(seed)
    store.create_topic("t", 3, {"pylog.table.enable": "true"})
    producer = Producer(store, "t", 3, seed=seed)
    producer.one()
    convert(store, "t")                    # loads every module the children use before forking
    stop = threading.Event()

    def produce():      # a steady trickle (a batch about every 2 ms), not a flood
        while not stop.wait(0.002):
            producer.one()
    thread = threading.Thread(target=produce)
    thread.start()
    run_s = None
    try:
        for _ in range(rounds):
            pid, pipe = run_child(store.log_dirs, "t", loop=True, fork_lock=producer.lock)
            assert wait_ready(pipe, close=False)
            if run_s is None:
                # The first round lets one run finish (a commit by a child, whatever the
                # machine's load) and times it: the later kills fall anywhere in 1.5 runs.
                began = time.monotonic()
                assert os.read(pipe, 1) == b"."
                run_s = time.monotonic() - began
            else:
                # a random point of some run_once: reading, writing Parquet, committing, between
                threading.Event().wait(rng.uniform(0, 1.5 * run_s))
            os.kill(pid, signal.SIGKILL)
            assert reap(pid) == -signal.SIGKILL
            os.close(pipe)
    finally:
        stop.set()
        thread.join()
    table = table_of(store, "t")
    commits_by_children = len(commits_of(table)) - 1
    convert(store, "t")
    table = table_of(store, "t")
    rows = rows_of(table)
    assert len({(r[0], r[1]) for r in rows}) == len(rows)          # no record twice
    assert rows == sorted(producer.rows)                           # none missing, all equal
    assert_commit_chain(table, 3)
    assert commits_by_children > 0, "no child ever committed: the kills proved nothing"
    orphans = data_files_on_disk(table) - referenced_files(table)
    print(f"seed {seed}, {rounds} kills: {commits_by_children} commits by the children, {len(orphans)} "
          f"files orphaned by kills between write and commit, {len(rows)} rows")


def test_two_converters_racing_stay_exact(store, monkeypatch):
    """A converter whose table moved on between its read and its commit (another process
    committed meanwhile) has its commit refused by the catalog (pyiceberg's own retry,
    which would append the same files again, is off), and it converts again from the new
    watermark: no record twice."""
    from pylog.table import converter as converter_module
    store.create_topic("t", 2, {"pylog.table.enable": "true"})
    producer = Producer(store, "t", 2, seed="race")
    for _ in range(5):
        producer.one()
    other = TableConverter(store.log_dirs, "t")       # a second process's converter
    raced = []

    def other_commits_first(step):
        if step == "written" and not raced:
            raced.append(None)
            raced[0] = other.run_once()
            for _ in range(2):
                producer.one()      # after both reads: the loser's second try takes them
    monkeypatch.setattr(converter_module, "_kill_point", other_commits_first)
    mine = TableConverter(store, "t").run_once()
    assert raced[0].committed and mine.committed
    assert min(a for a, _ in mine.offsets.values()) > 0     # from the winner's watermark on
    for _ in range(3):
        producer.one()
    convert(store, "t")
    table = table_of(store, "t")
    assert rows_of(table) == sorted(producer.rows)
    assert_commit_chain(table, 2)


def test_a_converter_keeping_its_table_across_runs_stays_exact(store):
    """A converter keeps the table its last run loaded or committed; when another process
    commits to it (or drops and rebuilds it) in between, the next run's commit is refused
    (the table's uuid and main snapshot are asserted), and the run is redone from the
    table as it is: nothing twice, nothing skipped."""
    store.create_topic("t", 2, {"pylog.table.enable": "true"})
    producer = Producer(store, "t", 2, seed="kept")
    for _ in range(5):
        producer.one()
    mine = TableConverter(store, "t")
    assert mine.run_once().committed
    for _ in range(3):
        producer.one()
    assert TableConverter(store.log_dirs, "t").run_once().committed   # mine's table is stale
    assert not mine.run_once().committed        # redone from the new watermark: nothing new
    for _ in range(3):
        producer.one()
    TableConverter(store.log_dirs, "t").run_once()
    for _ in range(2):
        producer.one()
    result = mine.run_once()
    assert result.committed and result.offsets
    table = table_of(store, "t")
    assert rows_of(table) == sorted(producer.rows)
    assert_commit_chain(table, 2)
    TableConverter(store.log_dirs, "t").drop()  # (a rebuild by another process: a new table)
    result = mine.run_once()
    assert result.committed and {a for a, _ in result.offsets.values()} == {0}
    table = table_of(store, "t")
    assert rows_of(table) == sorted(producer.rows)
    assert_commit_chain(table, 2)
