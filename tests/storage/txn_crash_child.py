"""Child process for the transaction crash test: transactions forever, until SIGKILL.

Usage: python txn_crash_child.py LOG_DIR FLUSH_MESSAGES SEED

Three transactional producers interleave transactions of one to three batches each
(through the storage API a transaction coordinator uses: verification, transactional
batches, COMMIT or ABORT markers) with plain batches, in a standalone Log with small
segments, so transactions span segments and markers land in any of them. Each record's
value names its producer and transaction (``b"<pid>:<txn>:<i>"``), so the parent can
tell from the log alone which records a read_committed reader must get.
"""

import random
import sys

from pylog.record import encode_batch
from pylog.storage.log import Log

sys.path.insert(0, __file__.rsplit("/", 3)[0] + "/tests")
from txn_support import TxnProducer  # noqa: E402


def main() -> None:
    log_dir, flush_messages, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    log = Log(log_dir, {"flush.messages": flush_messages, "segment.bytes": 16 * 1024,
                        "index.interval.bytes": 1024})
    producers = []
    for pid in (101, 102, 103):
        # A reopened log may hold this producer's transaction still open: go on after it.
        entry = log.producer_state.producers.get(pid)
        p = TxnProducer(log, pid, epoch=entry.epoch + 1 if entry is not None else 0)
        producers.append(p)
    # An open transaction left by the previous child: the "coordinator" aborts it.
    for info in log.ongoing_transactions():
        log.write_txn_marker(info.producer_id, info.producer_epoch + 1, 0, committed=False)
    print(f"open {log.log_end_offset}", flush=True)
    txn = {p.pid: 0 for p in producers}
    batches = {p.pid: 0 for p in producers}
    while True:
        if rng.random() < 0.2:
            log.append(encode_batch([b"plain:%d" % log.log_end_offset]))
            continue
        p = rng.choice(producers)
        if p.open and (batches[p.pid] >= 3 or rng.random() < 0.4):
            p.end(rng.random() < 0.5, bump=rng.random() < 0.5)
            txn[p.pid] += 1
            batches[p.pid] = 0
            continue
        n = rng.randint(1, 5)
        p.send([b"%d:%d:%d" % (p.pid, txn[p.pid], i) for i in range(n)])
        batches[p.pid] += 1


if __name__ == "__main__":
    main()
