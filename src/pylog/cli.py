"""The ``pylog`` command.

``pylog serve`` runs the broker; ``pylog export-to-kafka`` hands a topic to an Apache
Kafka broker (storage/kafka_export.py). The operations tools (topics, console producer and
consumer, dump-log, perf) arrive with their own issue and register here as
subcommands. argparse for now: the command has one subcommand and needs nothing a
standard-library parser lacks.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

__all__ = ["main"]


def _serve(args: argparse.Namespace) -> int:
    from pylog.errors import PylogError
    try:
        return _serve_store(args)
    except (PylogError, OSError) as exc:
        print(f"pylog serve: {exc}", file=sys.stderr)
        return 2


def _serve_store(args: argparse.Namespace) -> int:
    import pylog
    from pylog.broker import read_properties, split_config

    values: dict[str, str] = {}
    if args.config:
        values.update(read_properties(args.config))
    for item in args.override or []:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"pylog serve: --override expects key=value, got {item!r}", file=sys.stderr)
            return 2
        values[key.strip()] = value.strip()
    if args.log_dirs:
        values["log.dirs"] = args.log_dirs
    if args.listen:
        values["listeners"] = args.listen
    server, store_config = split_config(values)
    # Kafka: log.dirs wins over log.dir.
    dirs = store_config.pop("log.dirs", None), store_config.pop("log.dir", None)
    dirs = dirs[0] or dirs[1]
    if not dirs:
        print("pylog serve: give --log-dirs DIR[,DIR...] (or log.dirs in --config)", file=sys.stderr)
        return 2
    logging.basicConfig(level=getattr(logging, args.log_level.upper()),
                        format="[%(asctime)s] %(levelname)s %(name)s: %(message)s")
    store = pylog.open(dirs, **store_config)
    try:
        broker = pylog.Broker(store, config=server).start()
    except BaseException:
        store.close()
        raise

    def stop(signum, frame):  # noqa: ARG001
        logging.getLogger("pylog.broker").info("signal %d: shutting down", signum)
        # shutdown() waits for in-flight requests: not inside the signal handler.
        threading.Thread(target=broker.shutdown, name="pylog-shutdown").start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"pylog serving {dirs} on {broker.bootstrap_servers}", flush=True)
    try:
        broker.serve_forever()
    finally:
        broker.shutdown()
        store.close()
    return 0


def _export_to_kafka(args: argparse.Namespace) -> int:
    """pylog's side of moving a topic to an Apache Kafka broker (storage/kafka_export.py)."""
    import csv
    import os

    import pylog
    from pylog.errors import PylogError
    from pylog.storage.kafka_export import ExportError, check_pylog_dirs, export_topic
    from pylog.storage.reader import LogDirsReader
    try:
        check_pylog_dirs(LogDirsReader(args.log_dirs))
        # The groups' committed offsets for the topic, as kafka-consumer-groups.sh
        # --reset-offsets --from-file reads them (topic,partition,offset per line).
        written = []
        if args.offsets_dir:
            os.makedirs(args.offsets_dir, exist_ok=True)
            with pylog.open(args.log_dirs) as store:     # closes cleanly again
                for group in store.consumer_groups():
                    rows = sorted((partition, getattr(om, "offset", om)) for (topic, partition), om
                                  in store.committed_offsets(group).items() if topic == args.topic)
                    if rows:
                        path = os.path.join(args.offsets_dir, f"{group}.csv")
                        with open(path, "w", newline="") as f:
                            csv.writer(f).writerows((args.topic, p, o) for p, o in rows)
                        written.append((group, path))
        report = export_topic(args.log_dirs, args.topic, args.kafka_log_dir)
    except (ExportError, PylogError, OSError) as exc:
        print(f"pylog export-to-kafka: {exc}", file=sys.stderr)
        return 2
    print(f"copied {report.segments} segments ({report.bytes:,} bytes) of {report.partitions} "
          f"partitions of {args.topic!r} into {args.kafka_log_dir}; end offsets "
          f"{report.end_offsets}. Start Kafka: it validates and indexes them on start-up.")
    for group, path in written:
        print(f"group {group}: kafka-consumer-groups.sh --bootstrap-server HOST:9092 --group "
              f"{group} --reset-offsets --from-file {path} --execute")
    return 0


def main(argv: list[str] | None = None) -> int:
    import pylog

    parser = argparse.ArgumentParser(
        prog="pylog", description="pylog: a Kafka-compatible log storage engine for Python with a C core.")
    parser.add_argument("--version", action="version",
                        version=f"pylog {pylog.__version__} (crc32c: {pylog.crc32c_implementation()}; "
                                f"io engine: {pylog.io_engine()})")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    serve = sub.add_parser(
        "serve", help="serve log dirs to Kafka clients (Kafka's wire protocol)",
        description="Serves a store to Kafka clients (kcat, librdkafka, kafka-python, aiokafka, "
                    "Java). SIGTERM or SIGINT shuts down gracefully.")
    serve.add_argument("--log-dirs", help="comma-separated log dirs (Kafka's log.dirs)")
    serve.add_argument("--listen", help="host:port to listen on (default 127.0.0.1:9092; "
                                        "Kafka's listeners)")
    serve.add_argument("--config", help="a server.properties file in Kafka's format")
    serve.add_argument("--override", action="append", metavar="KEY=VALUE",
                       help="a config that overrides the file (repeatable), as Kafka's "
                            "kafka-server-start.sh --override")
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.set_defaults(run=_serve)
    export = sub.add_parser(
        "export-to-kafka", help="hand a topic to a stopped Apache Kafka broker, unconverted",
        description="Copies a topic's segment files into a Kafka broker's log dir (the topic "
                    "created there first with the same partitions, and Kafka stopped). The "
                    "pylog store must be closed cleanly. Committed offsets of the topic's "
                    "consumer groups go to CSV files for kafka-consumer-groups.sh "
                    "--reset-offsets --from-file.")
    export.add_argument("--log-dirs", required=True, help="pylog's log dirs (comma-separated)")
    export.add_argument("--topic", required=True)
    export.add_argument("--kafka-log-dir", required=True,
                        help="the Kafka broker's log dir holding the topic's partition dirs")
    export.add_argument("--offsets-dir", help="where to write <group>.csv committed offsets")
    export.set_defaults(run=_export_to_kafka)
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 0
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
