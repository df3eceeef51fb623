"""The driver's half of the sink: staged batches into the log, and, for a streaming
query, each micro-batch exactly once whatever order a replay brings its rows in.

Tasks stage C-encoded Kafka batches in files (sink.py); the commit appends them under
the store's lock, per partition in task order, the partitions in parallel.

**A streaming micro-batch's commit** is a small protocol over
``<log dir>/pylog-spark/sinks/`` (one query: ``<queryId>.json``, ``<queryId>.commit/``):

1. *Begin*: the staged files move (rename) into ``<queryId>.commit/``; then the state
   file records, in one atomic fsync'd write, ``{"batch": N, "done": false}`` and the
   manifest: each file's length, each staged batch's (partition, file, position,
   length, records, CRC, attributes) in append order, and each target partition's log
   end offset before the first append.
2. *Append* the manifest's batches and fsync them.
3. *Done*: the state becomes ``{"batch": N, "done": true}``; the commit dir and every
   staging dir of the query's batches <= N (killed runs' files too) are removed.

Once the state names a manifest, the manifest's bytes *are* batch N. Spark runs a
micro-batch whose commit it did not record again, and the rerun's rows may come in
another order (a shuffle), in other tasks, or different (a non-deterministic query):
its staged rows are never appended. A rerun of a done batch is skipped; a rerun of a
begun one completes it from the manifest. What already reached the log is read from
the log itself, not from rows: the batches after the recorded end offset are matched in
order to the manifest's by CRC and record count (by record count alone where the log
rewrote the batch: LogAppendTime or a recompressing ``compression.type`` change its
attributes), and only the rest is appended. A batch another writer appended there in
between matches nothing and is passed over (where the log rewrites batches, unless it
has exactly as many records as the batch expected next).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from concurrent.futures import ThreadPoolExecutor
from dataclasses import astuple, dataclass

from pylog.errors import PylogError
from pylog.record import batch_layout as at
from pylog.storage import fsync_dir, make_dirs, write_file_atomically

__all__ = ["StagedBatch", "append_staged", "QueryCommits", "StagedDataError"]

_HEADER = at.HEADER


class StagedDataError(PylogError, RuntimeError):
    """A staged file is missing or is not the bytes its manifest describes."""


@dataclass(frozen=True)
class StagedBatch:
    """One encoded batch in a staged file, appended as a whole. In a manifest, ``file``
    is a name inside the commit dir; ``crc`` and ``attributes`` are its header's."""

    topic: str
    partition: int
    file: str
    position: int
    length: int
    records: int
    crc: int | None = None
    attributes: int | None = None


def _plan(batches) -> dict[tuple[str, int], list[StagedBatch]]:
    plan: dict[tuple[str, int], list[StagedBatch]] = {}
    for b in batches:
        plan.setdefault((b.topic, b.partition), []).append(b)
    return plan


def _read_batch(fd: int, b: StagedBatch, where: str) -> bytes:
    data = os.pread(fd, b.length, b.position)
    crc = struct.unpack_from(">I", data, at.CRC_OFFSET)[0] if len(data) >= at.ATTRIBUTES_OFFSET else None
    if len(data) != b.length or (b.crc is not None and crc != b.crc):
        raise StagedDataError(
            f"{where}: the staged batch at byte {b.position} of {b.file} is not the one "
            f"recorded ({len(data)} of {b.length} bytes, CRC {crc} vs {b.crc})")
    return data


def append_staged(store, batches: list[StagedBatch], directory: str = "",
                  appended=None, where: str = "") -> None:
    """Appends `batches` (paths relative to `directory`) and fsyncs them: per partition
    in list order, the partitions in parallel (appends and fsyncs release the GIL).
    ``appended(log, tp, batches)`` says how many leading batches of a partition the log
    already holds (default: none)."""
    plan = _plan(batches)

    def append_partition(tp) -> None:
        log = store.log(*tp)
        label = where or f"{tp[0]}-{tp[1]}"
        todo = plan[tp]
        if appended is not None:
            todo = todo[appended(log, tp, todo):]
        fds: dict[str, int] = {}
        try:
            for b in todo:
                fd = fds.get(b.file)
                if fd is None:
                    try:
                        fd = fds[b.file] = os.open(os.path.join(directory, b.file),
                                                   os.O_RDONLY | os.O_CLOEXEC)
                    except FileNotFoundError:
                        raise StagedDataError(f"{label}: staged file {b.file} is "
                                              "missing") from None
                log.append(_read_batch(fd, b, label))
            log.flush()
        finally:
            for fd in fds.values():
                os.close(fd)

    if len(plan) <= 1:
        for tp in plan:
            append_partition(tp)
        return
    with ThreadPoolExecutor(min(len(plan), os.cpu_count() or 1, 16)) as pool:
        for done in [pool.submit(append_partition, tp) for tp in plan]:
            done.result()


class QueryCommits:
    """One streaming query's commits into one log dir (see the module doc)."""

    def __init__(self, spark_dir: str, query_id: str) -> None:
        self.query_id = query_id
        sinks = os.path.join(spark_dir, "sinks")
        self.state_path = os.path.join(sinks, f"{query_id}.json")
        self.commit_dir = os.path.join(sinks, f"{query_id}.commit")
        self.staging = os.path.join(spark_dir, "staging", query_id)

    def staging_dir(self, batch_id: int) -> str:
        """Where the tasks of micro-batch `batch_id` stage (sink.py)."""
        return os.path.join(self.staging, str(batch_id))

    # ----------------------------------------------------------------- state

    def state(self) -> dict | None:
        try:
            with open(self.state_path, "rb") as f:
                state = json.loads(f.read())
        except FileNotFoundError:
            return None
        except ValueError as exc:
            raise ValueError(f"{self.state_path}: not a pylog sink state ({exc})") from None
        ok = isinstance(state, dict) and isinstance(state.get("batch"), int) and \
            isinstance(state.get("done"), bool) and (state["done"] or "batches" in state)
        if not ok:
            raise ValueError(f"{self.state_path}: not a pylog sink state (written by an older "
                             "pylog?); it records which micro-batch of query "
                             f"{self.query_id} was appended last")
        return state

    def _write_state(self, state: dict) -> None:
        make_dirs(os.path.dirname(self.state_path))
        write_file_atomically(self.state_path, json.dumps(state).encode("utf-8"))

    # ---------------------------------------------------------------- commit

    def commit(self, open_store, batch_id: int,
               staged: list[tuple[str, list[StagedBatch]]]) -> str:
        """Commits micro-batch `batch_id` whose tasks staged `staged` ((path, batches) per
        task, in task order); ``open_store()`` opens the log dirs, only when there is
        something to append. Returns what it did: "appended", "completed" (a begun
        commit of this batch, from its manifest: `staged` is not used), "skipped" or
        "empty"."""
        state = self.state()
        pending = state if state is not None and not state["done"] else None
        if state is not None and (state["batch"] > batch_id or
                                  (state["batch"] == batch_id and state["done"])):
            outcome = "skipped"              # done, or older than the batch begun
        elif pending is None and not any(batches for _, batches in staged):
            outcome = "empty"                # no rows: nothing to record
        else:
            store = open_store()
            try:
                if pending is not None:
                    self._complete(store, pending)   # begun: its manifest is the truth
                if pending is not None and pending["batch"] == batch_id:
                    outcome = "completed"
                else:
                    outcome = "appended"
                    manifest = self._begin(store, batch_id, staged)
                    if manifest is not None:
                        self._complete(store, manifest)
            finally:
                store.close()
        self._sweep(batch_id)
        return outcome

    def _begin(self, store, batch_id: int, staged) -> dict | None:
        """Moves the staged files into the commit dir and writes the manifest: from here
        on they are batch `batch_id`. None when nothing was staged."""
        if not any(batches for _, batches in staged):
            return None
        shutil.rmtree(self.commit_dir, ignore_errors=True)   # a begin that died unrecorded
        os.makedirs(self.commit_dir)
        files, manifest = {}, []
        for path, batches in staged:
            if not batches:
                continue
            name = os.path.basename(path)
            if name in files:
                raise ValueError(f"two tasks of micro-batch {batch_id} staged {name}")
            target = os.path.join(self.commit_dir, name)
            try:
                os.rename(path, target)
            except FileNotFoundError:
                raise StagedDataError(f"micro-batch {batch_id} of query {self.query_id}: "
                                      f"staged file {path} is missing") from None
            files[name] = os.path.getsize(target)
            with open(target, "rb") as f:
                for b in batches:
                    header = os.pread(f.fileno(), _HEADER.size, b.position)
                    fields = _HEADER.unpack(header) if len(header) == _HEADER.size else None
                    if fields is None or fields[1] + 12 != b.length or fields[3] != 2 \
                            or fields[12] != b.records:
                        raise StagedDataError(f"{target}: no staged batch of {b.records} "
                                              f"records at byte {b.position}")
                    manifest.append(StagedBatch(b.topic, b.partition, name, b.position,
                                                b.length, b.records, fields[4], fields[5]))
        fsync_dir(self.commit_dir)
        before = {f"{t}:{p}": store.log(t, p).log_end_offset for t, p in _plan(manifest)}
        state = {"batch": batch_id, "done": False, "files": files, "before": before,
                 "batches": [list(astuple(b)) for b in manifest]}
        self._write_state(state)
        return state

    def _complete(self, store, state: dict) -> None:
        """Appends what the log lacks of a begun batch's manifest, then marks it done."""
        where = f"micro-batch {state['batch']} of query {self.query_id}"
        for name, size in state["files"].items():
            path = os.path.join(self.commit_dir, name)
            actual = os.path.getsize(path) if os.path.exists(path) else None
            if actual != size:
                raise StagedDataError(
                    f"{where}: its commit began but {path} is "
                    + ("missing" if actual is None else f"{actual} bytes, not {size}")
                    + "; the batch cannot be completed exactly once (its first staged data "
                    "is gone)")
        batches = [StagedBatch(*b) for b in state["batches"]]

        def appended(log, tp, todo) -> int:
            return _appended(log, state["before"][f"{tp[0]}:{tp[1]}"], todo, where)

        append_staged(store, batches, self.commit_dir, appended, where)
        self._write_state({"batch": state["batch"], "done": True})
        shutil.rmtree(self.commit_dir, ignore_errors=True)

    def _sweep(self, batch_id: int) -> None:
        """Removes what the query's tasks staged for batches <= `batch_id` (this
        batch's replays and killed runs included) and a stray commit dir."""
        if os.path.isdir(self.commit_dir):
            state = self.state()
            if state is None or state["done"]:
                shutil.rmtree(self.commit_dir, ignore_errors=True)
        try:
            names = os.listdir(self.staging)
        except FileNotFoundError:
            return
        for name in names:
            if not name.isdigit() or int(name) <= batch_id:
                shutil.rmtree(os.path.join(self.staging, name), ignore_errors=True)
        try:
            os.rmdir(self.staging)       # empty now unless a later batch is staging
        except OSError:
            pass


def _appended(log, before: int, batches: list[StagedBatch], where: str) -> int:
    """How many leading `batches` of a partition the log holds past `before` (its end
    when the commit began): the log's batches from there, matched in order."""
    end = log.log_end_offset
    if end <= before:
        return 0               # nothing past the recorded end (recovery truncated it)
    if log.log_start_offset > before:
        raise StagedDataError(
            f"{where}: offsets from {before} of {log.path} were deleted before the "
            "interrupted commit could be checked; it cannot be completed exactly once")
    matched, offset = 0, before
    while offset < end and matched < len(batches):
        found = log.read(offset, 1 << 20).batches()
        for b in found:
            if b.base_offset < before:
                continue
            want = batches[matched]
            if b.records_count == want.records and (
                    b.crc == want.crc or b.attributes != want.attributes):
                matched += 1
                if matched == len(batches):
                    break
        if not found:
            break
        offset = found[-1].next_offset
    return matched
