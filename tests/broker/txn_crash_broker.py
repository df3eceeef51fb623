"""A broker (pylog.Broker over a store in argv[1]) that kills itself with SIGKILL on
its second transaction commit, once the PrepareCommit record is durable in
__transaction_state and before any marker is written: the crash the coordinator's
recovery exists for (tests/broker/test_transactions.py)."""

from __future__ import annotations

import os
import signal
import sys

import pylog
from pylog.coordinator.transaction_state import TxnState
from pylog.coordinator.transactions import TransactionCoordinator

commits = 0
original = TransactionCoordinator._write_markers


def crash_before_markers(self, meta):
    global commits
    if meta.state == TxnState.PREPARE_COMMIT:
        commits += 1
        if commits == 2:
            os.kill(os.getpid(), signal.SIGKILL)
    return original(self, meta)


TransactionCoordinator._write_markers = crash_before_markers

store = pylog.open(sys.argv[1])
broker = pylog.Broker(store, listen="127.0.0.1:0").start()
print("listening", broker.bootstrap_servers, flush=True)
broker.serve_forever()
