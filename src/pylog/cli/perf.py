"""``pylog perf produce | consume | end-to-end``: Kafka's perf tests
(kafka-producer-perf-test, kafka-consumer-perf-test, kafka-e2e-latency), on an
in-process store (the log dirs given, or a temporary one) or against a broker.

Output is Kafka's (window lines every ``--reporting-interval``, then the summary
line with latency percentiles); ``--json`` prints JSON lines instead (``type``:
``window`` or ``summary``); on a terminal a progress bar runs on stderr.
``--profile DIR`` records a py-spy flame graph (SVG) of the run and, where the
machine allows it, ``perf stat`` cycles and instructions per record.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time

import click

from pylog.compression import CODECS

from .common import fail_on
from .remote import bootstrap_option

__all__ = ["perf"]


def _pairs(items: tuple[str, ...], option: str) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint=option)
        out[key.strip()] = value.strip()
    return out


class _Progress:
    """A progress bar on stderr, only on a terminal."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self._last = -1

    def __call__(self, fraction: float) -> None:
        if not self.enabled:
            return
        filled = int(fraction * 30)
        if filled == self._last:
            return
        self._last = filled
        sys.stderr.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {fraction * 100:5.1f}%")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\r" + " " * 42 + "\r")
            sys.stderr.flush()


class _Profiler:
    """py-spy (flame graph) and perf stat attached to this process for the run."""

    def __init__(self, out_dir: str | None) -> None:
        self.out_dir = out_dir
        self.procs: list[tuple[str, subprocess.Popen]] = []
        self.notes: list[str] = []

    def __enter__(self) -> _Profiler:
        if not self.out_dir:
            return self
        os.makedirs(self.out_dir, exist_ok=True)
        pid = str(os.getpid())
        spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
        if os.path.exists(spy):
            self.procs.append(("py-spy", subprocess.Popen(
                [spy, "record", "--pid", pid, "--rate", "250", "--threads", "--nonblocking",
                 "-o", os.path.join(self.out_dir, "flame.svg")],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)))
        else:
            self.notes.append("py-spy is not installed (pip install py-spy): no flame graph")
        if shutil.which("perf"):
            probe = subprocess.run(["perf", "stat", "-x,", "-e", "cycles,instructions", "true"],
                                   capture_output=True, text=True)
            if "<not supported>" in probe.stderr or probe.returncode:
                self.notes.append("perf stat: cycles and instructions are not supported on "
                                  "this machine (a VM without PMU access)")
            else:
                self.procs.append(("perf", subprocess.Popen(
                    ["perf", "stat", "-x,", "-e", "cycles,instructions", "-p", pid,
                     "-o", os.path.join(self.out_dir, "perf-stat.csv")],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)))
        else:
            self.notes.append("perf is not installed (linux-perf): no cycle counts")
        time.sleep(0.5)                  # let the profilers attach
        return self

    def __exit__(self, *exc) -> None:
        for _, proc in self.procs:
            proc.send_signal(signal.SIGINT)
        for name, proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                self.notes.append(f"{name} did not stop")

    def per_record(self, records: int) -> dict:
        """cycles and instructions per record from perf stat's CSV, if it ran."""
        out = {}
        path = os.path.join(self.out_dir or "", "perf-stat.csv")
        if self.out_dir and os.path.exists(path):
            for line in open(path):
                fields = line.strip().split(",")
                if len(fields) > 2 and fields[0].replace(".", "").isdigit():
                    out[f"{fields[2]}_per_record"] = round(float(fields[0]) / max(records, 1), 1)
        return out


def _emit(json_lines: bool):
    def report(item) -> None:
        click.echo(json.dumps(item) if isinstance(item, dict) else item)
    return report


def _workload(**kw):
    from pylog.perf import Workload
    return Workload(**kw)


@click.group("perf", help="Kafka's perf tests: produce, consume, end-to-end latency "
                          "(in-process, or at a broker with --bootstrap-server).")
def perf() -> None:
    from pylog.common.memory import tune_malloc
    tune_malloc()       # as pylog serve: big buffers through many threads (pylog.common.memory)


@perf.command("produce", help="kafka-producer-perf-test: send --num-records records and "
                              "report throughput and latency percentiles.")
@click.option("--topic", default="perf-test", show_default=True)
@click.option("--topics", default=1, show_default=True,
              help="N > 1: topics <topic>-0 .. <topic>-(N-1), records round-robin")
@click.option("--num-records", required=True, type=int)
@click.option("--record-size", default=100, show_default=True, type=int)
@click.option("--payload-file", type=click.Path(exists=True, dir_okay=False))
@click.option("--payload-delimiter", default="\\n", show_default=True)
@click.option("--throughput", default=-1.0, show_default=True, type=float,
              help="records/s cap over all producers (-1: none)")
@click.option("--batch-size", type=int, help="batch.size (bytes)")
@click.option("--linger-ms", type=int, help="linger.ms")
@click.option("--acks", type=click.Choice(["0", "1", "all", "-1"]), help="acks (default all)")
@click.option("--compression", type=click.Choice(list(CODECS)),
              help="compression.type")
@click.option("--producer-props", "producer_props", multiple=True, metavar="KEY=VALUE",
              help="any producer config (Kafka's names)")
@click.option("--partitions", default=1, show_default=True, help="of topics the run creates")
@click.option("--keys", default=0, show_default=True,
              help="distinct keys (murmur2 over the partitions); 0: null keys, as Kafka's tool")
@click.option("--producers", default=1, show_default=True, help="producer threads")
@click.option("--processes", is_flag=True,
              help="run the producers as processes (with --bootstrap-server)")
@click.option("--api", type=click.Choice(["send", "send_batch"]), default="send",
              show_default=True)
@click.option("--batch-records", default=1000, show_default=True,
              help="records per send_batch call")
@click.option("--flush-messages", type=int, help="flush.messages of created topics (1: fsync "
                                                 "every append)")
@click.option("--flush-ms", type=int, help="flush.ms of created topics")
@click.option("--direct", is_flag=True, help="pylog.io.direct=true (O_DIRECT appends)")
@click.option("--io-engine", type=click.Choice(["auto", "io_uring", "portable"]))
@click.option("--topic-config", "topic_config", multiple=True, metavar="KEY=VALUE",
              help="any topic config of created topics")
@click.option("--log-dirs", metavar="DIR[,DIR...]",
              help="the store (default: a temporary dir, removed after the run)")
@bootstrap_option()
@click.option("--reporting-interval", default=5000, show_default=True, help="ms between lines")
@click.option("--json", "json_lines", is_flag=True, help="JSON lines instead of Kafka's lines")
@click.option("--profile", "profile_dir", type=click.Path(file_okay=False),
              help="write a py-spy flame graph (and perf stat counts) into this dir")
@fail_on(Exception)
def produce(topic, topics, num_records, record_size, payload_file, payload_delimiter, throughput,
            batch_size, linger_ms, acks, compression, producer_props, partitions, keys,
            producers, processes, api, batch_records, flush_messages, flush_ms, direct,
            io_engine, topic_config, log_dirs, bootstrap_server, reporting_interval, json_lines,
            profile_dir) -> int:
    from pylog.perf import run_produce
    pconf = _pairs(producer_props, "--producer-props")
    for key, value in (("batch.size", batch_size), ("linger.ms", linger_ms), ("acks", acks),
                       ("compression.type", compression)):
        if value is not None:
            pconf[key] = value
    tconf = _pairs(topic_config, "--topic-config")
    for key, value in (("flush.messages", flush_messages), ("flush.ms", flush_ms),
                       ("pylog.io.engine", io_engine)):
        if value is not None:
            tconf[key] = value
    if direct:
        tconf["pylog.io.direct"] = "true"
    if bootstrap_server and (tconf or log_dirs):
        raise click.UsageError("--log-dirs and topic configs are for the in-process store; "
                               "a broker's topics are configured there")
    w = _workload(num_records=num_records, record_size=record_size, payload_file=payload_file,
                  payload_delimiter=payload_delimiter.encode().decode("unicode_escape"),
                  keys=keys, topic=topic, topics=topics, partitions=partitions,
                  throughput=throughput, producers=producers, api=api,
                  batch_records=batch_records, producer_config=pconf, topic_config=tconf)
    progress = _Progress(not json_lines)
    with _Profiler(profile_dir) as profiler:
        try:
            summary = run_produce(w, log_dirs.split(",") if log_dirs else None, bootstrap_server,
                                  processes, reporting_interval / 1000, json_lines,
                                  _emit(json_lines), progress)
        finally:
            progress.close()
    summary.extra.update(profiler.per_record(summary.records))
    for note in profiler.notes:
        click.echo(f"pylog perf: {note}", err=True)
    if profile_dir:
        summary.extra["profile"] = profile_dir
    click.echo(json.dumps(summary.as_dict()) if json_lines else summary.kafka_line())
    return 0


@perf.command("consume", help="kafka-consumer-perf-test: consume --messages records and "
                              "report throughput.")
@click.option("--topic", default="perf-test", show_default=True)
@click.option("--topics", default=1, show_default=True)
@click.option("--messages", "num_records", required=True, type=int,
              help="records to consume (Kafka's --messages)")
@click.option("--consumers", default=1, show_default=True, help="consumer threads (one group)")
@click.option("--processes", is_flag=True,
              help="run the consumers as processes (with --bootstrap-server)")
@click.option("--group", help="group id (default perf-consumer-<n>)")
@click.option("--api", type=click.Choice(["poll", "poll_arrow"]), default="poll_arrow",
              show_default=True)
@click.option("--timeout", default=10000, show_default=True,
              help="ms without new records before giving up")
@click.option("--consumer-props", "consumer_props", multiple=True, metavar="KEY=VALUE",
              help="any consumer config (Kafka's names), e.g. max.poll.records=100000")
@click.option("--log-dirs", metavar="DIR[,DIR...]")
@bootstrap_option()
@click.option("--reporting-interval", default=5000, show_default=True)
@click.option("--show-detailed-stats", is_flag=True, help="a line every reporting interval")
@click.option("--json", "json_lines", is_flag=True)
@fail_on(Exception)
def consume(topic, topics, num_records, consumers, processes, group, api, timeout, consumer_props,
            log_dirs, bootstrap_server, reporting_interval, show_detailed_stats,
            json_lines) -> int:
    from pylog.perf import run_consume
    from pylog.perf.consume import KAFKA_HEADER, kafka_line
    w = _workload(num_records=num_records, topic=topic, topics=topics)
    report = _emit(json_lines) if (show_detailed_stats or json_lines) else (lambda _: None)
    progress = _Progress(not json_lines)
    try:
        summary = run_consume(w, log_dirs.split(",") if log_dirs else None, bootstrap_server,
                              consumers, api, group, timeout / 1000, reporting_interval / 1000,
                              json_lines, report, progress,
                              _pairs(consumer_props, "--consumer-props"), processes)
    finally:
        progress.close()
    if json_lines:
        click.echo(json.dumps(summary.as_dict()))
    else:
        click.echo(KAFKA_HEADER)
        click.echo(kafka_line(summary))
    if not summary.extra.get("complete", True):
        click.echo(f"WARNING: Exiting before consuming the expected number of messages: timeout "
                   f"({timeout} ms) exceeded. You can use the --timeout option to increase the "
                   f"timeout.", err=True)
        return 1
    return 0


@perf.command("end-to-end", help="kafka-e2e-latency: produce one record, consume it, repeat; "
                                 "report the latency percentiles.")
@click.option("--topic", default="perf-e2e", show_default=True)
@click.option("--num-records", required=True, type=int)
@click.option("--record-size", default=100, show_default=True)
@click.option("--acks", type=click.Choice(["1", "all"]), default="1", show_default=True)
@click.option("--log-dirs", metavar="DIR[,DIR...]")
@bootstrap_option()
@click.option("--json", "json_lines", is_flag=True)
@fail_on(Exception)
def end_to_end(topic, num_records, record_size, acks, log_dirs, bootstrap_server,
               json_lines) -> int:
    import numpy as np

    from pylog.perf import run_end_to_end
    from pylog.perf.end_to_end import kafka_lines
    w = _workload(num_records=num_records, record_size=record_size, topic=topic)
    lat = run_end_to_end(w, acks, log_dirs.split(",") if log_dirs else None, bootstrap_server)
    if json_lines:
        p50, p95, p99, p999 = np.percentile(lat, [50, 95, 99, 99.9], method="lower")
        click.echo(json.dumps({"type": "summary", "records": len(lat),
                               "avg_latency_ms": float(lat.mean()),
                               "max_latency_ms": float(lat.max()), "p50_ms": float(p50),
                               "p95_ms": float(p95), "p99_ms": float(p99),
                               "p999_ms": float(p999)}))
    else:
        for line in kafka_lines(lat):
            click.echo(line)
    return 0
