"""Model-based test: random appends, reads, rolls, truncations, deletions and
reopens of a real Log, checked against a plain list of records."""

import shutil
import tempfile

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)
from log_support import ManualScheduler

from pylog import records
from pylog.errors import OffsetOutOfRangeError
from pylog.storage.log import Log

from .conftest import io_uring_available, o_direct_available

CONFIG = {"segment.bytes": 3000, "index.interval.bytes": 300, "segment.index.bytes": 8 * 16}


class LogModel(RuleBasedStateMachine):
    """The model: (offset, timestamp, value) per record, batch boundaries, log start."""

    engine = "portable"
    direct = "false"            # pylog.io.direct

    @initialize()
    def setup(self):
        self.dir = tempfile.mkdtemp(prefix="pylog-model-")
        self.sched = ManualScheduler()
        self.log = self._open()
        self.records = []          # (offset, timestamp, value)
        self.batch_starts = []     # first offset of every batch
        self.start = 0

    def _open(self):
        return Log(self.dir + "/m-0", {"pylog.io.engine": self.engine, "pylog.io.direct": self.direct,
                                           **CONFIG}, scheduler=self.sched)

    def teardown(self):
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def end(self):
        return self.records[-1][0] + 1 if self.records else self.start

    @rule(values=st.lists(st.binary(max_size=200), min_size=1, max_size=20),
          ts=st.integers(0, 10_000), codec=st.sampled_from(["none", "none", "zstd"]))
    def append(self, values, ts, codec):
        info = self.log.append(records.encode_batch(values, timestamps=[ts + i for i in range(len(values))],
                                                    compression=codec))
        assert info.first_offset == self.end
        self.batch_starts.append(self.end)
        for i, v in enumerate(values):
            self.records.append((self.end, ts + i, v))

    @rule(data=st.data(), max_bytes=st.integers(1, 5000))
    def read(self, data, max_bytes):
        offset = data.draw(st.integers(self.start, self.end))
        got = self.log.read(offset, max_bytes)
        if offset == self.end:
            assert got.size == 0
            return
        decoded = [(r.offset, r.timestamp, r.value) for r in got.records()]
        batch_start = max(b for b in self.batch_starts if b <= offset)
        assert decoded[0][0] == batch_start            # starts at the batch holding offset
        assert decoded == [r for r in self.records if r[0] >= batch_start][:len(decoded)]

    @rule(offset=st.integers(-5, 0))
    def read_below_start(self, offset):
        if self.start + offset - 1 < self.start:
            try:
                self.log.read(self.start + offset - 1)
            except OffsetOutOfRangeError:
                return
            raise AssertionError("read below the log start offset succeeded")

    @rule()
    def roll(self):
        self.log.roll()

    @precondition(lambda self: self.records)
    @rule(data=st.data())
    def truncate(self, data):
        offset = data.draw(st.integers(self.start, self.end))
        self.log.truncate_to(offset)
        # Whole batches go: the cut is at the start of the batch holding offset.
        cut = max((b for b in self.batch_starts if b <= offset), default=offset) \
            if offset < self.end else offset
        self.records = [r for r in self.records if r[0] < cut]
        self.batch_starts = [b for b in self.batch_starts if b < cut]

    @precondition(lambda self: len(self.log.segments) > 1)
    @rule()
    def delete_oldest_segment(self):
        second = self.log.segments[1].base_offset
        self.log.delete_segments_before(second)
        self.sched.run()
        self.start = second
        self.records = [r for r in self.records if r[0] >= second]
        self.batch_starts = [b for b in self.batch_starts if b >= second]

    @rule(clean=st.booleans())
    def reopen(self, clean):
        if clean:
            self.log.close()
        else:
            self.log.flush()
            # Drop the Log without close(): an unclean shutdown as far as it knows.
            self.log.abandon()
        self.log = self._open()

    @rule(data=st.data())
    def offset_for_timestamp(self, data):
        ts = data.draw(st.integers(0, 11_000))
        found = self.log.offset_for_timestamp(ts)
        candidates = [r for r in self.records if r[1] >= ts]
        if not candidates:
            assert found is None
        else:
            assert (found.offset, found.timestamp) == (candidates[0][0], candidates[0][1])

    @invariant()
    def offsets(self):
        if hasattr(self, "log"):
            assert self.log.log_end_offset == self.end
            assert self.log.log_start_offset == self.start


class PortableLogModel(LogModel):
    engine = "portable"


class UringLogModel(LogModel):
    engine = "io_uring"


class DirectLogModel(LogModel):
    """O_DIRECT appends (the model's temp dir must be on a disk file system)."""
    engine = "io_uring" if io_uring_available() else "portable"
    direct = "true"


MODEL_SETTINGS = settings(max_examples=60, stateful_step_count=40, deadline=None)
TestPortableLog = PortableLogModel.TestCase
TestPortableLog.settings = MODEL_SETTINGS
TestUringLog = pytest.mark.skipif(not io_uring_available(), reason="io_uring unavailable here")(
    UringLogModel.TestCase)
TestUringLog.settings = MODEL_SETTINGS
TestDirectLog = pytest.mark.skipif(not o_direct_available(tempfile.gettempdir()),
                                   reason=f"O_DIRECT is unavailable under {tempfile.gettempdir()}")(
    DirectLogModel.TestCase)
TestDirectLog.settings = MODEL_SETTINGS
