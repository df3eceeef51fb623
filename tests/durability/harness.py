"""Crash harness: runs the workload, kills it, and checks what survives.

Two kinds of crash, one set of invariants:

- **kill -9** (`run_and_kill`): the process dies, the page cache keeps
  every write it made. The files as left are the state to check.
- **power loss** (`power_loss_image`): the workload runs with the fault
  layer (faultfs.c, LD_PRELOAD), which journals a copy of what each
  successful fsync/fdatasync/msync made durable and the entries of every
  fsync'ed directory. The image of a power loss just after journal entry
  ``k`` holds, for every directory, the entries of its last fsync at or
  before ``k`` (none if it was never fsync'ed), and for every file reached
  that way, the copy of its last sync at or before ``k`` (empty if none).
  Everything else written is forgotten. Optionally a file keeps a random
  prefix of what it held at its next sync: a torn write.

`check_store` opens the image (or the killed dir) and checks that every
promise the workload logged (workload.py) before the crash point holds.
"""

from __future__ import annotations

import bisect
import fcntl
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field

from kafka.record.memory_records import MemoryRecords

import pylog
from pylog.errors import CorruptRecordError

from . import workload

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM_SOURCE = os.path.join(HERE, "faultfs.c")
WORKLOAD = os.path.join(HERE, "workload.py")


def build_shim(out_dir: str) -> str:
    """Compiles faultfs.c; returns the shared object's path."""
    out = os.path.join(out_dir, "faultfs.so")
    subprocess.run(["cc", "-O2", "-Wall", "-shared", "-fPIC", "-o", out, SHIM_SOURCE,
                    "-ldl", "-lpthread"], check=True)
    return out


# ------------------------------------------------------------------ running

def start(root: str, session: int, seed: int, engine: str, events: str, *,
          shim: str | None = None, journal: str | None = None,
          records: int | None = None) -> subprocess.Popen:
    env = dict(os.environ)
    if shim is not None:
        os.makedirs(journal, exist_ok=True)
        env.update(LD_PRELOAD=shim, FAULTFS_JOURNAL=journal, FAULTFS_ROOT=root)
    args = [sys.executable, WORKLOAD, root, str(session), str(seed), engine, events]
    if records is not None:
        args.append(str(records))
    return subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=HERE)


def run_and_kill(root: str, session: int, seed: int, engine: str, events: str,
                 delay: float, until=None, **kwargs) -> None:
    """Starts a session, lets it work `delay` seconds after it is ready, SIGKILLs it.
    With `until`, it works on after the delay until `until()` is true (a slow
    machine does less in the same time), for at most 120 s more."""
    proc = start(root, session, seed, engine, events, **kwargs)
    try:
        if not select.select([proc.stdout], [], [], 120)[0]:
            raise AssertionError("workload did not get ready within 120 s")
        line = proc.stdout.readline()
        if line != b"ready\n":
            proc.wait(10)
            raise AssertionError(f"workload did not start: {line!r} {proc.stderr.read().decode()}")
        time.sleep(delay)
        deadline = time.monotonic() + 120
        while until is not None and not until() and proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError("the workload did not do enough within 120 s")
            time.sleep(0.05)
        if proc.poll() is not None:
            raise AssertionError(f"workload exited early ({proc.returncode}): "
                                 f"{proc.stderr.read().decode()}")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def count_lines(path: str, prefix: bytes = b"") -> int:
    """Complete lines of `path` (0 when it does not exist yet) that start with `prefix`."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return 0
    lines = data.split(b"\n")[:-1]
    return sum(1 for line in lines if line.startswith(prefix))


# ------------------------------------------------------------------ promises

@dataclass
class Promises:
    """What the workload logged, read from its events file."""
    acks: list[tuple[int, str, int, int, str]] = field(default_factory=list)
    commits: list[tuple[int, str, int, int]] = field(default_factory=list)
    attempted: set[tuple[str, int, int]] = field(default_factory=set)  # every commit tried
    pids: list[tuple[int, int]] = field(default_factory=list)
    # per session: (pos, producer id, session, {partition: log end offset at open})
    producers: list[tuple[int, int, str, dict[int, int]]] = field(default_factory=list)
    topics_created: int | None = None   # position once the topics were created

    @classmethod
    def read(cls, path: str) -> Promises:
        p = cls()
        opens: dict[int, int] = {}
        with open(path, encoding="ascii") as f:
            for line in f:
                if not line.endswith("\n"):
                    break                   # cannot happen with one write per line
                kind, pos, *rest = line.split()
                pos = int(pos)
                if kind == "open":
                    if p.topics_created is None:
                        p.topics_created = pos
                    if rest[1] == "0":
                        opens = {}
                    opens[int(rest[1])] = int(rest[2])
                elif kind == "producer":
                    p.producers.append((pos, int(rest[0]), rest[1], dict(opens)))
                elif kind == "pid":
                    p.pids.append((pos, int(rest[0])))
                elif kind == "ack":
                    p.acks.append((pos, rest[0], int(rest[1]), int(rest[2]), rest[3]))
                elif kind == "committing":
                    p.attempted.add((rest[0], int(rest[1]), int(rest[2])))
                elif kind == "commit":
                    p.commits.append((pos, rest[0], int(rest[1]), int(rest[2])))
        return p


def check_store(root: str, promises: Promises, upto: int | None = None) -> dict:
    """Opens the store at `root` and checks every promise made at a journal
    position <= `upto` (all of them when None). Returns a few counts."""
    def made(pos: int) -> bool:
        return upto is None or pos <= upto

    store = pylog.Store(workload.log_dirs(root), {**workload.STORE_CONFIG},
                             background=False)
    try:
        counts = {"acked": 0, "records": 0}
        found: dict[tuple[str, int], dict[int, tuple[bytes, bytes]]] = {}
        for topic, partitions in workload.TOPICS.items():
            if promises.topics_created is None or not made(promises.topics_created):
                if store.partition_count(topic) is None:
                    continue                # the crash came before the topic was created
            assert store.partition_count(topic) == partitions, f"topic {topic} lost"
            for p in range(partitions):
                lg = store.log(topic, p)
                records = {}
                offset = lg.log_start_offset
                keys = set()
                while offset < lg.log_end_offset:
                    batch = lg.read_records(offset, 1 << 20)
                    if not batch:
                        break
                    for r in batch:
                        assert r.offset == offset, f"{topic}-{p}: offset {r.offset} after {offset - 1}"
                        key = bytes(r.key) if r.key is not None else None
                        value = bytes(r.value) if r.value is not None else None
                        if key != b"warm-up":
                            assert value == workload.value_for(key), \
                                f"{topic}-{p}@{r.offset}: value is not the one sent with key {key!r}"
                            assert key not in keys, f"{topic}-{p}: key {key!r} written twice"
                            keys.add(key)
                        records[r.offset] = (key, value)
                        offset = r.offset + 1
                assert offset == lg.log_end_offset, f"{topic}-{p}: read stopped at {offset}"
                if topic == "keep":
                    assert lg.log_start_offset == 0, "keep has no retention"
                    assert _independent_read(lg) == records, \
                        f"{topic}-{p}: kafka-python reads other records from the files"
                found[(topic, p)] = (lg.log_start_offset, records)
                counts["records"] += len(records)
        for pos, topic, p, offset, key in promises.acks:
            if not made(pos):
                continue
            start, records = found[(topic, p)]
            if offset < start:
                continue                    # removed by retention
            assert offset in records, f"acknowledged {topic}-{p}@{offset} (key {key}) is lost"
            assert records[offset][0] == key.encode(), \
                f"{topic}-{p}@{offset} holds key {records[offset][0]!r}, acknowledged {key}"
            counts["acked"] += 1
        committed: dict[tuple[str, int], int] = defaultdict(int)
        for pos, topic, p, offset in promises.commits:
            if made(pos):
                committed[(topic, p)] = max(committed[(topic, p)], offset)
        for (topic, p), offset in committed.items():
            now = store.committed(workload.GROUP, topic, p)
            assert now is not None and now >= offset, \
                f"committed offset of {topic}-{p} went back: {now} < {offset}"
            assert now == 0 or (topic, p, now) in promises.attempted, \
                f"committed offset {now} of {topic}-{p} was never committed"
        given = [pid for pos, pid in promises.pids if made(pos)]
        given += [pid for pos, pid, _, _ in promises.producers if made(pos)]
        if given:
            fresh = store.init_producer_id()[0]
            assert fresh > max(given), f"producer id {fresh} was given out before (max {max(given)})"
        for pos, pid, session, opens in promises.producers:
            if not made(pos):
                continue
            for p, leo in opens.items():
                # The session's producer is the only writer of keep while it
                # runs, and its sequences start at 0 on its first record in each
                # partition: the record at offset o has sequence o - leo.
                mine = [o for q, t, pp, o, key in promises.acks
                        if made(q) and t == "keep" and pp == p and key.startswith(f"{session}-")]
                if not mine:
                    continue
                entry = store.log("keep", p).producer_state.producers.get(pid)
                assert entry is not None, f"producer {pid} unknown to keep-{p} after the crash"
                assert entry.last_seq >= max(mine) - leo, \
                    f"producer {pid} in keep-{p}: last sequence {entry.last_seq} < {max(mine) - leo}"
        return counts
    finally:
        store.close()


def _independent_read(lg) -> dict[int, tuple[bytes | None, bytes | None]]:
    """The records of `lg` below its log end offset as kafka-python's reader (an
    independent implementation, which checks every batch CRC) finds them in
    the segment files after recovery."""
    out = {}
    for name in sorted(n for n in os.listdir(lg.path) if n.endswith(".log")):
        with open(os.path.join(lg.path, name), "rb") as f:
            batches = MemoryRecords(f.read())
        while batches.has_next():
            batch = batches.next_batch()
            if batch.base_offset >= lg.log_end_offset:
                break
            assert batch.validate_crc(), f"{lg.path}/{name}: batch {batch.base_offset} CRC"
            for r in batch:
                out[r.offset] = (r.key, r.value)
    return out


# --------------------------------------------------------------- power loss

@dataclass
class Entry:
    seq: int
    kind: str            # "F" file copy, "D" directory listing
    ident: str           # dev:ino:generation
    data: str            # copy or listing file


class Journal:
    def __init__(self, directory: str) -> None:
        self.by_ident: dict[str, list[Entry]] = defaultdict(list)
        self.last = 0
        with open(os.path.join(directory, "journal"), encoding="utf-8") as f:
            for line in f:
                if not line.endswith("\n"):
                    break
                seq, kind, ident, _size, data = line.split(" ", 4)
                entry = Entry(int(seq), kind, ident, data.rstrip("\n"))
                self.by_ident[ident].append(entry)
                self.last = max(self.last, entry.seq)
        self._seqs = {i: [e.seq for e in es] for i, es in self.by_ident.items()}

    def names(self) -> dict[str, str]:
        """Each identity's (last) name in any directory listing."""
        out = {}
        for entries in self.by_ident.values():
            for e in entries:
                if e.kind == "D":
                    for line in _read(e.data).decode().splitlines():
                        ident, _kind, name = line.split(" ", 2)
                        out[ident] = name
        return out

    def forget(self, named) -> None:
        """Drops every file sync of the files whose name satisfies `named`
        (the harness's self-test: as if pylog never synced them)."""
        self._drop(named, "F")

    def forget_directories(self, named) -> None:
        """Drops every fsync of the directories whose name satisfies `named`."""
        self._drop(named, "D")

    def _drop(self, named, kind: str) -> None:
        names = self.names()
        for ident in list(self.by_ident):
            if named(names.get(ident, "")):
                self.by_ident[ident] = [e for e in self.by_ident[ident] if e.kind != kind]
        self._seqs = {i: [e.seq for e in es] for i, es in self.by_ident.items()}

    def at(self, ident: str, k: int) -> tuple[Entry | None, Entry | None]:
        """The last entry of `ident` at or before `k`, and the first after it."""
        seqs = self._seqs.get(ident, [])
        i = bisect.bisect_right(seqs, k)
        entries = self.by_ident.get(ident, [])
        return (entries[i - 1] if i else None), (entries[i] if i < len(entries) else None)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def power_loss_image(journal: Journal, root_ident: str, k: int, dest: str,
                     rng: random.Random | None = None) -> dict:
    """Writes to `dest` (which must not exist) what a power loss just after
    journal entry `k` leaves. With `rng`, each file that was synced again
    later keeps, with probability 1/2, a random prefix of its next copy."""
    stats = {"files": 0, "torn": 0}

    def build(ident: str, path: str) -> None:
        os.mkdir(path)
        listing, _ = journal.at(ident, k)
        if listing is None:
            return
        for line in _read(listing.data).decode().splitlines():
            child, kind, name = line.split(" ", 2)
            target = os.path.join(path, name)
            if kind == "d":
                build(child, target)
                continue
            synced, later = journal.at(child, k)
            content = _read(synced.data) if synced is not None else b""
            if rng is not None and later is not None and later.kind == "F" and rng.random() < 0.5:
                nxt = _read(later.data)
                if not nxt.startswith(content[:4096]):
                    nxt = content       # another file under a reused inode (no generation)
                same = next((i for i, (a, b) in enumerate(zip(content, nxt)) if a != b),
                            min(len(content), len(nxt)))
                cut = rng.randint(same, len(nxt))
                content = nxt[:cut] + content[cut:]
                stats["torn"] += 1
            with open(target, "wb") as f:
                f.write(content)
            stats["files"] += 1

    build(root_ident, dest)
    return stats


FS_IOC_GETVERSION = 0x80087601


def identity(path: str) -> str:
    """dev:ino:generation, as faultfs.c names files."""
    fd = os.open(path, os.O_RDONLY)
    try:
        st = os.fstat(fd)
        buf = bytearray(8)
        try:
            fcntl.ioctl(fd, FS_IOC_GETVERSION, buf)
        except OSError:
            buf = bytearray(8)
        return f"{st.st_dev}:{st.st_ino}:{int.from_bytes(buf, sys.byteorder)}"
    finally:
        os.close(fd)


def check_crash_points(journal: Journal, root_ident: str, promises: Promises, work: str,
                       points: list[int], rng: random.Random) -> list[dict]:
    """Builds and checks the image of each crash point; torn writes in half of them."""
    results = []
    for i, k in enumerate(points):
        image = os.path.join(work, f"image-{k}")
        stats = power_loss_image(journal, root_ident, k, image, rng if i % 2 else None)
        try:
            stats.update(check_store(image, promises, upto=k))
        except (AssertionError, CorruptRecordError) as exc:
            raise AssertionError(f"power loss after journal entry {k} "
                                 f"(torn={bool(i % 2)}, image kept at {image}): {exc}") from exc
        shutil.rmtree(image)
        stats["k"] = k
        results.append(stats)
    return results
