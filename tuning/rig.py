"""The tuning rig's commands (``python -m tuning <command>``; ``tuning/run`` does all).

- ``run``: builds the matrix's filesystems on loop devices (or uses ``--mounts``),
  sets its write-back knobs, measures every row ``repeats`` times, interleaved
  (A B C A B C: the same noise for all), with pylog and fio; writes one JSON line
  per measurement to ``<out>/results.jsonl`` and produces it into the pylog topic
  ``tuning-results`` of ``<out>/store``; undoes every machine change at the end,
  on Ctrl-C/SIGTERM, and (through the journal) after a crash.
- ``seeds``: the Kafka docs' five performance graphs, measured with pylog perf.
- ``report``: the Spark job: reads the results topic with pylog's Spark source and
  writes docs/TUNING.md with tables and PNG plots.
- ``cleanup``: undoes what a killed run left (mounts, loop devices, sysctls).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sys
import time

from . import journal as journal_mod
from .machine import (
    Mounted,
    can_loop_mount,
    describe_machine,
    describe_mount,
    make_filesystems,
    restore_sysctls,
    set_sysctls,
    unmount_all,
)
from .matrix import load
from .measure import prepare, run_fio, run_pylog

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def say(msg: str) -> None:
    print(f"tuning: {msg}", file=sys.stderr, flush=True)


def _terminate(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


class ResultSink:
    """JSON lines to a file and records to the pylog results topic."""

    def __init__(self, out: str, topic: str) -> None:
        import pylog
        os.makedirs(out, exist_ok=True)
        self.path = os.path.join(out, "results.jsonl")
        self.file = open(self.path, "a")  # noqa: SIM115 - closed in close()
        self.store = pylog.open(os.path.join(out, "store"))
        if topic not in self.store.list_topics():
            self.store.create_topic(topic, 1)
        self.log = self.store.log(topic, 0)
        self.topic = topic

    def write(self, row: dict) -> None:
        line = json.dumps(row, sort_keys=True)
        self.file.write(line + "\n")
        self.file.flush()
        self.log.append_records([line.encode()], keys=[row.get("config", "").encode()])

    def close(self) -> None:
        self.file.close()
        self.store.close()


def cmd_run(args) -> int:
    matrix = load(args.config)
    run = matrix.run
    volume = args.volume_mib or run["volume_mib"]
    repeats = args.repeats or run["repeats"]
    out = args.out or os.path.join(HERE, "results", datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    mounts_given = [m for m in (args.mounts or "").split(",") if m]
    if not mounts_given:
        why = can_loop_mount()
        if why:
            say(f"cannot run the matrix: {why}")
            return 2
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    base = args.base
    journal_mod.cleanup(base)                        # an earlier run's leftovers first
    journal = journal_mod.Journal(base)
    sink = ResultSink(out, run["results_topic"])
    machine = describe_machine()
    run_id = datetime.datetime.now().isoformat(timespec="seconds")
    started = time.monotonic()
    total = len(matrix.rows) * repeats
    done = 0
    say(f"{len(matrix.rows)} configurations x {repeats} repeats, {volume} MiB each; "
        f"results in {out}")
    try:
        for fs_name, devices, wb, rows in matrix.groups():
            profile = matrix.filesystems[fs_name]
            mounted: Mounted | None = None
            before = {}
            try:
                if mounts_given:
                    if devices > len(mounts_given):
                        say(f"skipping {devices}-device rows: only {len(mounts_given)} mounts given")
                        continue
                    targets = [os.path.join(m, "pylog-tuning") for m in mounts_given[:devices]]
                    for t in targets:
                        os.makedirs(t, exist_ok=True)
                else:
                    mounted = make_filesystems(journal, profile, devices, run["device_mib"])
                    targets = mounted.targets
                if matrix.writeback[wb]:
                    before = set_sysctls(journal, matrix.writeback[wb])
                fs_info = [describe_mount(t) for t in targets]
                for rep in range(repeats):
                    for row in rows:
                        record = {"suite": "matrix", "run_id": run_id, "config": row.key,
                                  "repeat": rep, "machine": machine, "mounts": fs_info,
                                  "filesystem_profile": {"name": profile.name,
                                                         "type": profile.fs_type,
                                                         "mkfs": list(profile.mkfs),
                                                         "mount_options": profile.mount_options}
                                  if not mounts_given else {"name": "given", "type":
                                                            fs_info[0]["fs_type"]},
                                  "writeback_values": matrix.writeback[wb],
                                  "volume_mib": volume, "memory": run["memory"],
                                  **row.as_dict()}
                        prepare(targets, run["memory"])
                        record["pylog"] = run_pylog(row, targets, volume)
                        prepare(targets, run["memory"])
                        record["fio"] = run_fio(row, targets, volume)
                        prepare(targets, "warm")
                        sink.write(record)
                        done += 1
                        p, f = record["pylog"], record["fio"]
                        say(f"[{done}/{total}] {row.key} rep {rep}: pylog {p['mb_per_sec']:.0f} "
                            f"MB/s (p99 {p['p99_ms']:.1f} ms), fio {f['mb_per_sec']:.0f} MB/s")
            finally:
                if before:
                    restore_sysctls(before)
                if mounted is not None:
                    unmount_all(journal, mounted)
    except KeyboardInterrupt as exc:
        say(f"interrupted ({exc}); cleaning up")
        return 130
    finally:
        sink.close()
        journal_mod.cleanup(base, journal)
        journal.close()
    say(f"done in {time.monotonic() - started:.0f} s: {done} measurements in {sink.path}")
    return 0


def cmd_cleanup(args) -> int:
    journal_mod.cleanup(args.base)
    left = journal_mod.leftovers(args.base)
    if left["mounts"] or left["loops"]:
        say(f"still present: {left}")
        return 1
    say("nothing of the rig is left on this machine")
    return 0


def cmd_seeds(args) -> int:
    from .seeds import run_seeds
    out = args.out or os.path.join(HERE, "results", "seeds-" +
                                   datetime.datetime.now().strftime("%Y%m%d-%H%M%S"))
    sink = ResultSink(out, "tuning-results")
    try:
        run_seeds(sink.write, quick=args.quick, base=args.dir)
    finally:
        sink.close()
    say(f"seeds graphs measured into {out}")
    return 0


def cmd_report(args) -> int:
    from .report import write_report
    stores = [os.path.join(d, "store") for d in args.results]
    write_report(stores, args.output, args.plots, topic=args.topic)
    say(f"wrote {args.output} and plots in {args.plots}")
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tuning", description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", default=journal_mod.DEFAULT_BASE,
                    help="where images, mounts and the journal live (default %(default)s)")
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run a matrix")
    r.add_argument("--config", default=os.path.join(HERE, "matrix.toml"))
    r.add_argument("--out", help="results dir (default tuning/results/<time>)")
    r.add_argument("--mounts", help="comma-separated real mount points instead of loop devices")
    r.add_argument("--volume-mib", type=int, help="override [run] volume_mib")
    r.add_argument("--repeats", type=int, help="override [run] repeats")
    r.set_defaults(fn=cmd_run)
    c = sub.add_parser("cleanup", help="undo what a killed run left behind")
    c.set_defaults(fn=cmd_cleanup)
    s = sub.add_parser("seeds", help="the Kafka docs' five performance graphs")
    s.add_argument("--out")
    s.add_argument("--dir", help="where the stores go (default a temp dir)")
    s.add_argument("--quick", action="store_true")
    s.set_defaults(fn=cmd_seeds)
    p = sub.add_parser("report", help="the Spark report: docs/TUNING.md and plots")
    p.add_argument("results", nargs="+", help="results dirs of run/seeds")
    p.add_argument("--output", default=os.path.join(REPO, "docs", "TUNING.md"))
    p.add_argument("--plots", default=os.path.join(REPO, "docs", "tuning"))
    p.add_argument("--topic", default="tuning-results")
    p.set_defaults(fn=cmd_report)
    args = ap.parse_args(argv)
    try:
        return args.fn(args)
    except (ValueError, RuntimeError, OSError) as exc:
        say(str(exc))
        return 2
