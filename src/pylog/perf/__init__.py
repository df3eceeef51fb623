"""Kafka's perf tests for pylog (``pylog perf``): producer and consumer throughput,
end-to-end latency, on an in-process store or against a broker.

- :mod:`.workload`: what a run sends (Kafka's payloads, keys, topics) and where;
- :mod:`.stats`: window lines and the summary with latency percentiles (Kafka's lines,
  or JSON);
- :mod:`.produce`, :mod:`.consume`, :mod:`.end_to_end`: the three tests.

The tuning rig (``tuning/``) and the benchmarks run these same functions.
"""

from .consume import run_consume
from .end_to_end import run_end_to_end
from .produce import Throttler, run_produce
from .stats import Stats, Summary
from .workload import Workload

__all__ = [
           "Stats",
           "Summary",
           "Throttler",
           "Workload",
           "run_consume",
           "run_end_to_end",
           "run_produce",
]
