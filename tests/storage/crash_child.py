"""Child process for the crash tests: appends forever, reporting acknowledged offsets.

Usage: python crash_child.py LOG_DIR ENGINE FLUSH_MESSAGES SEED

Every record's value is a pure function of its offset (``expected_value``),
so the parent can check any record it finds after the kill. After each
append whose records are covered by an fsync (``AppendInfo.flushed``), the
child prints ``ack <last_offset>`` and flushes stdout: those records must
survive the SIGKILL that ends it.
"""

import random
import sys

from pylog import records
from pylog.storage.log import Log


def expected_value(offset: int) -> bytes:
    return (b"%d:" % offset) * (1 + offset % 7)


def main() -> None:
    log_dir, engine, flush_messages, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    rng = random.Random(seed)
    log = Log(log_dir, {"pylog.io.engine": engine, "flush.messages": flush_messages,
                        "segment.bytes": 256 * 1024, "index.interval.bytes": 4096})
    print(f"open {log.log_end_offset} {log.recovery.bytes_truncated}", flush=True)
    while True:
        start = log.log_end_offset
        count = rng.randint(1, 50)
        values = [expected_value(o) for o in range(start, start + count)]
        info = log.append(records.encode_batch(values, compression=rng.choice(["none", "none", "lz4"])))
        assert info.first_offset == start
        if info.flushed:
            print(f"ack {info.last_offset}", flush=True)


if __name__ == "__main__":
    main()
