"""kill -9 in the middle of transactions: recovery rebuilds the producer state's open
transactions, the .txnindex and the last stable offset.

A child process (txn_crash_child.py) runs interleaved transactions of three producers
until SIGKILL. After each kill the parent damages what a power loss could have lost (the
unflushed .txnindex of the active segment: removed or torn), reopens the log, and checks
it against a model built from the log's batches alone with an independent decoder
(kafka-python) and Kafka's rules: which transactions are open and from where, each
aborted transaction's entry (producer id, first offset, marker offset, last stable
offset) in its marker's segment, the LSO, and the records a read_committed reader gets.

PYLOG_TXN_CRASH_ROUNDS sets the rounds (default 5)."""

from __future__ import annotations

import os
import random
import signal
import struct
import subprocess
import sys
import threading
import time

from kafka.record.memory_records import MemoryRecords

from pylog.record import decode_arrow
from pylog.storage.log import Log

CHILD = os.path.join(os.path.dirname(__file__), "txn_crash_child.py")
ROUNDS = int(os.environ.get("PYLOG_TXN_CRASH_ROUNDS", "5"))


def model(log_dir):
    """Kafka's transaction rules over the segments' batches: (open transactions
    {pid: first offset}, aborted entries per segment base, committed (offset, value)
    records, log end offset)."""
    ongoing: dict[int, int] = {}
    pending: dict[int, list] = {}
    aborted: dict[int, list] = {}
    committed = []
    end = 0
    bases = sorted(int(n[:20]) for n in os.listdir(log_dir) if n.endswith(".log"))
    for base in bases:
        with open(os.path.join(log_dir, f"{base:020d}.log"), "rb") as f:
            records = MemoryRecords(f.read())
        while records.has_next():
            batch = records.next_batch()
            if batch is None:
                break
            recs = list(batch)
            end = batch.base_offset + batch.last_offset_delta + 1
            pid = batch.producer_id
            if batch.is_control_batch:
                if pid in ongoing:
                    first = ongoing.pop(pid)
                    lso = min(ongoing.values()) if ongoing else batch.base_offset + 1
                    if recs[0].abort:
                        aborted.setdefault(base, []).append((pid, first, batch.base_offset, lso))
                    else:
                        committed += pending[pid]
                    pending[pid] = []
            elif batch.is_transactional:
                ongoing.setdefault(pid, batch.base_offset)
                pending.setdefault(pid, []).extend((r.offset, r.value) for r in recs)
            else:
                committed += [(r.offset, r.value) for r in recs]
    return ongoing, aborted, sorted(committed), end


def txnindex_entries(log_dir):
    out = {}
    for name in sorted(os.listdir(log_dir)):
        if name.endswith(".txnindex"):
            with open(os.path.join(log_dir, name), "rb") as f:
                data = f.read()
            assert len(data) % 34 == 0, name
            entries = [struct.unpack_from(">hqqqq", data, i) for i in range(0, len(data), 34)]
            assert all(e[0] == 0 for e in entries)
            if entries:
                out[int(name[:20])] = [e[1:] for e in entries]
    return out


def read_committed(log):
    out, offset = [], log.log_start_offset
    while offset < log.last_stable_offset:
        read = log.read_committed(offset)
        if not read.records.size:
            break
        rows = decode_arrow(read.records.read(), aborted_transactions=read.aborted_transactions)
        out += [(o, v) for o, v in zip(rows.column("offset").to_pylist(),
                                       rows.column("value").to_pylist()) if o >= offset]
        offset = read.records.last_offset + 1
    return out


def kill_child(log_dir, rng):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen([sys.executable, CHILD, log_dir, str(rng.choice([1, 20, 10**9])),
                              str(rng.randrange(1 << 30))],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    opened = threading.Event()

    def reader():
        for line in child.stdout:
            if line.startswith("open"):
                opened.set()
    t = threading.Thread(target=reader, daemon=True)
    t.start()
    ok = opened.wait(60)
    if ok:
        time.sleep(rng.uniform(0.2, 0.8))
    child.send_signal(signal.SIGKILL)
    child.wait()
    t.join(10)
    stderr = child.stderr.read()
    child.stdout.close()
    child.stderr.close()
    assert ok and child.returncode == -signal.SIGKILL, stderr


def lose_unflushed_txnindex(log_dir, rng):
    """What a power loss may do to the active segment's .txnindex (never fsynced while
    the segment is active): gone, or cut inside an entry."""
    bases = sorted(int(n[:20]) for n in os.listdir(log_dir) if n.endswith(".log"))
    path = os.path.join(log_dir, f"{bases[-1]:020d}.txnindex")
    if not os.path.exists(path):
        return "none"
    if rng.random() < 0.5:
        os.remove(path)
        return "removed"
    size = os.path.getsize(path)
    os.truncate(path, max(size - rng.randint(1, 33), 0))
    return "torn"


def test_kill9_mid_transaction_rebuilds_open_transactions_txnindex_and_lso(tmp_path):
    rng = random.Random(20261128)
    log_dir = str(tmp_path / "txn-0")
    seen_open = seen_aborted = 0
    for _ in range(ROUNDS):
        kill_child(log_dir, rng)
        expected_index_before = txnindex_entries(log_dir)
        damage = lose_unflushed_txnindex(log_dir, rng)
        ongoing, aborted, committed, end = model(log_dir)
        log = Log(log_dir)
        try:
            assert not log.recovery.clean_shutdown and log.log_end_offset == end
            assert {p.producer_id: p.current_txn_start_offset
                    for p in log.ongoing_transactions()} == ongoing
            assert log.last_stable_offset == (min(ongoing.values()) if ongoing else end)
            assert txnindex_entries(log_dir) == aborted, damage
            if damage == "none":
                assert txnindex_entries(log_dir) == expected_index_before
            lso = log.last_stable_offset
            assert read_committed(log) == [(o, v) for o, v in committed if o < lso]
            seen_open += len(ongoing)
            seen_aborted += sum(map(len, aborted.values()))
        finally:
            log.close()
    assert seen_open and seen_aborted        # the kills did land mid-transaction
    # A clean reopen trusts what recovery wrote.
    log = Log(log_dir)
    try:
        assert log.recovery.clean_shutdown and log.recovery.segments_recovered == ()
        assert txnindex_entries(log_dir) == model(log_dir)[1]
    finally:
        log.close()
