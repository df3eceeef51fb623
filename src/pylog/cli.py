"""The ``pylog`` command.

``pylog serve`` runs the broker. The operations tools (topics, console producer and
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
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 0
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
