"""``pylog verify`` on real stores with real byte edits (issue 42, item 10): every damage
named, both indexes checked against the .log, segments checked for continuity; a
healthy live store, a live or killed O_DIRECT store and a compacted store pass.

Exit status: 0 nothing damaged (notes, such as the zero padding of an open O_DIRECT
segment, may be printed), 1 damage found, 2 verify could not run."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest

import pylog
from pylog._core.engine import direct_alignment
from pylog.cli import main

CONFIG = {"segment.bytes": 6000, "index.interval.bytes": 400}


def verify(capsys, d, *extra):
    capsys.readouterr()
    status = main(["verify", "--log-dirs", str(d), *extra])
    return status, capsys.readouterr().out


def build(d, config=CONFIG, batches=80):
    """A cleanly shut down store: topic t, one partition, several segments with index
    entries every second batch."""
    with pylog.open(str(d)) as store:
        store.create_topic("t", 1, config=config)
        log = store.log("t", 0)
        for i in range(batches):
            log.append_records([b"record %d-%d " % (i, j) + b"x" * 40 for j in range(5)],
                               timestamps=[1000 + i] * 5)
        assert len(log.segments) >= 5
    return sorted(os.path.join(d, "t-0", n) for n in os.listdir(os.path.join(d, "t-0")))


def segment(files, i, suffix):
    return [f for f in files if f.endswith(suffix)][i]


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def flip(path, at):
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0x40]))


def test_a_healthy_store_passes(tmp_path, capsys):
    build(tmp_path)
    status, out = verify(capsys, tmp_path)
    assert status == 0 and "OK" in out, out


def test_an_index_cut_by_3_bytes_is_damage(tmp_path, capsys):
    """Today: exit 0."""
    index = segment(build(tmp_path), 1, ".index")
    os.truncate(index, os.path.getsize(index) - 3)
    status, out = verify(capsys, tmp_path)
    assert status == 1, out
    assert os.path.basename(index) in out and "not a multiple of the entry size 8" in out


def test_a_garbage_time_index_is_damage(tmp_path, capsys):
    """Today: exit 0 (the .timeindex was never read)."""
    time_index = segment(build(tmp_path), 1, ".timeindex")
    size = os.path.getsize(time_index)
    with open(time_index, "wb") as f:
        f.write(os.urandom(size))
    status, out = verify(capsys, tmp_path)
    assert status == 1 and os.path.basename(time_index) in out, out


def test_a_moved_time_index_entry_is_damage(tmp_path, capsys):
    """A time entry naming a later offset than its timestamp's (lookups skip records)."""
    time_index = segment(build(tmp_path), 1, ".timeindex")
    raw = bytearray(read_bytes(time_index))
    ts, rel = struct.unpack_from(">qi", raw, 12)
    struct.pack_into(">qi", raw, 12, ts, rel + 3)
    with open(time_index, "wb") as f:
        f.write(raw)
    status, out = verify(capsys, tmp_path)
    assert status == 1 and "entry 1 says the largest timestamp up to offset" in out, out


def test_a_missing_middle_log_is_a_hole(tmp_path, capsys):
    """Today: exit 0."""
    log = segment(build(tmp_path), 2, ".log")
    base = int(os.path.basename(log)[:20])
    os.remove(log)
    status, out = verify(capsys, tmp_path)
    assert status == 1, out
    assert f"offsets {base}.." in out and "missing" in out
    assert f"{base:020d}.index" in out and "orphaned" in out


def test_every_damage_is_named_not_only_the_first(tmp_path, capsys):
    """Today: one line for the first damage of a segment, and no line for the index,
    time index or hole damages."""
    files = build(tmp_path, batches=100)
    logs = [f for f in files if f.endswith(".log")]
    assert len(logs) >= 6
    flip(logs[0], 300)                               # a CRC failure in batch 1 ...
    flip(logs[0], 1500)                              # ... and another further on
    flip(logs[1], 600)
    index = segment(files, 2, ".index")
    os.truncate(index, os.path.getsize(index) - 3)
    moved = segment(files, 3, ".index")
    raw = bytearray(read_bytes(moved))
    rel, pos = struct.unpack_from(">ii", raw, 16)
    struct.pack_into(">ii", raw, 16, rel, pos + 3)   # entry 2 no longer at a batch start
    with open(moved, "wb") as f:
        f.write(raw)
    os.remove(logs[4])
    status, out = verify(capsys, tmp_path, "--json")
    assert status == 1
    report = json.loads(out)
    problems = {os.path.basename(s["file"]): s["problems"] for s in report}
    first = os.path.basename(logs[0])
    assert sum("checksum" in p or "crc" in p.lower() for p in problems[first]) == 2, problems[first]
    assert any("checksum" in p or "crc" in p.lower() for p in problems[os.path.basename(logs[1])])
    assert any("multiple of the entry size" in p for p in problems[os.path.basename(logs[2])])
    assert any("entry 2" in p and "not a batch start" in p
               for p in problems[os.path.basename(logs[3])]), problems
    base = int(os.path.basename(logs[4])[:20])
    assert any(f"offsets {base}.." in p and "are missing" in p
               for p in problems[os.path.basename(logs[3])]), problems
    assert any("orphaned" in p for p in problems[os.path.basename(logs[4])])


def test_a_moved_offset_entry_is_named_and_recover_force_repairs_it(tmp_path, capsys):
    index = segment(build(tmp_path), 1, ".index")
    raw = bytearray(read_bytes(index))
    rel, pos = struct.unpack_from(">ii", raw, 24)
    struct.pack_into(">ii", raw, 24, rel, pos + 3)
    with open(index, "wb") as f:
        f.write(raw)
    status, out = verify(capsys, tmp_path)
    assert status == 1 and "entry 3 (offset " in out and "not a batch start" in out, out
    assert main(["recover", "--log-dirs", str(tmp_path), "--force"]) == 0
    assert "offset index changed" in capsys.readouterr().out
    status, out = verify(capsys, tmp_path)
    assert status == 0, out


def test_a_healthy_live_store_whose_open_segment_has_no_index_entry_passes(tmp_path, capsys):
    """Today: exit 1, "Index mismatch: offset 0 at position 0"."""
    with pylog.open(str(tmp_path)) as store:
        store.create_topic("t", 1)
        log = store.log("t", 0)
        log.append_records([b"a"] * 5)
        log.append_records([b"b"] * 5)
        status, out = verify(capsys, tmp_path)
        assert status == 0, out


@pytest.fixture
def direct_store(tmp_path):
    probe = os.open(tmp_path / "probe", os.O_CREAT | os.O_RDWR)
    try:
        direct_alignment(probe)
    except OSError as exc:
        pytest.skip(f"O_DIRECT is unavailable under {tmp_path}: {exc.strerror}")
    finally:
        os.close(probe)
        os.unlink(tmp_path / "probe")
    return tmp_path


def test_a_live_o_direct_store_passes_and_names_its_padding(direct_store, capsys):
    """Today: exit 2, a crash on the zero padding of the open segment."""
    with pylog.open(str(direct_store)) as store:
        store.create_topic("t", 1, config={**CONFIG, "pylog.io.direct": "true"})
        log = store.log("t", 0)
        for i in range(30):
            log.append_records([b"record %d " % i + b"x" * 40] * 5)
        active = log.segments[-1].log.path
        assert os.path.getsize(active) > log.segments[-1].size       # padded to the block
        status, out = verify(capsys, direct_store)
        assert status == 0, out
        assert "padding" in out


WRITER = """
import sys, time
import pylog
store = pylog.open(sys.argv[1])
store.create_topic("t", 1, config={"segment.bytes": 6000, "index.interval.bytes": 400,
                                   "pylog.io.direct": "true"})
log = store.log("t", 0)
for i in range(40):
    log.append_records([b"record %d " % i + b"x" * 40] * 5)
print(log.log_end_offset, flush=True)
time.sleep(60)
"""


def test_a_killed_o_direct_store_passes(direct_store, capsys):
    """Today: exit 2."""
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(direct_store)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert int(child.stdout.readline()) == 200
    finally:
        child.kill()                                   # kill -9: nothing closed cleanly
        child.wait(30)
        child.stdout.close()
    status, out = verify(capsys, direct_store)
    assert status == 0, out
    assert "records" in out


@pytest.mark.parametrize("policy_after", ["compact", "delete"])
def test_a_compacted_store_with_cleaned_gaps_passes(tmp_path, capsys, policy_after):
    with pylog.open(str(tmp_path)) as store:
        store.create_topic("c", 1, config={"cleanup.policy": "compact", "segment.bytes": 1000,
                                           "index.interval.bytes": 200})
        log = store.log("c", 0)
        # Every fifth record has a key of its own and survives: each cleaned segment
        # keeps records from its middle and ends before the next one begins.
        for i in range(300):
            key = b"u%d" % i if i % 5 == 0 else b"k%d" % (i % 3)
            log.append_records([b"v%d" % i], keys=[key])
        store.clean_once()
        segments = log.segments
        assert any(a.next_offset < b.base_offset for a, b in zip(segments, segments[1:]))
        store.alter_topic_config("c", {"cleanup.policy": policy_after})
    status, out = verify(capsys, tmp_path)
    assert status == 0, out


def test_a_store_killed_mid_write_is_not_damage_at_its_tail(tmp_path, capsys):
    """The open segment of a store that stopped without a clean shutdown may end in a
    batch cut short (a write in progress): recovery truncates it; verify says so
    and passes. The same cut in a cleanly shut down store is damage."""
    files = build(tmp_path)
    last = [f for f in files if f.endswith(".log")][-1]
    os.truncate(last, os.path.getsize(last) - 7)
    status, out = verify(capsys, tmp_path)
    assert status == 1 and "torn tail" in out, out
    os.remove(os.path.join(tmp_path, ".kafka_cleanshutdown"))
    status, out = verify(capsys, tmp_path)
    assert status == 0 and "recovery will truncate" in out, out
