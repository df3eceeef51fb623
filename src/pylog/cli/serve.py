"""``pylog serve``: the store served to Kafka clients (pylog.broker)."""

from __future__ import annotations

import logging
import signal
import sys
import threading

import click

from .common import LOG_LEVELS, configure_logging

__all__ = ["serve"]


@click.command(help="Serve log dirs to Kafka clients (Kafka's wire protocol): kcat, librdkafka, "
                    "kafka-python, aiokafka, Java. SIGTERM or SIGINT shuts down gracefully.")
@click.option("--log-dirs", metavar="DIR[,DIR...]", help="comma-separated log dirs (Kafka's log.dirs)")
@click.option("--listen", metavar="HOST:PORT",
              help="where to listen: HOST:PORT or NAME://HOST:PORT,... (Kafka's listeners; "
                   "default 127.0.0.1:9092)")
@click.option("--config", "config_file", type=click.Path(dir_okay=False),
              help="a server.properties file in Kafka's format")
@click.option("--override", multiple=True, metavar="KEY=VALUE",
              help="a config that overrides the file (repeatable), as kafka-server-start.sh --override")
@click.option("--log-level", type=click.Choice(LOG_LEVELS),
              help="default: pylog --log-level, else info")
@click.option("--metrics-port", type=click.IntRange(0, 65535),
              help="serve Prometheus metrics (Kafka's names) on 127.0.0.1:PORT/metrics (0: any)")
def serve(log_dirs, listen, config_file, override, log_level, metrics_port) -> int:
    from pylog.common.memory import tune_malloc
    tune_malloc()       # big buffers through many threads: see pylog.common.memory
    from pylog.errors import PylogError
    try:
        return _serve(log_dirs, listen, config_file, override, log_level, metrics_port)
    except (PylogError, OSError) as exc:
        print(f"pylog serve: {exc}", file=sys.stderr)
        return 2


def _serve(log_dirs, listen, config_file, override, log_level, metrics_port) -> int:
    import pylog
    from pylog.broker import ServerConfig, read_properties, split_config

    values: dict[str, str] = {}
    if config_file:
        values.update(read_properties(config_file))
    for item in override:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"pylog serve: --override expects key=value, got {item!r}", file=sys.stderr)
            return 2
        values[key.strip()] = value.strip()
    if log_dirs:
        values["log.dirs"] = log_dirs
    if listen:
        values["listeners"] = listen
    server, store_config = split_config(values)
    ServerConfig(server)    # a bad listener fails here, before the store opens
    # Kafka: log.dirs wins over log.dir.
    dirs = store_config.pop("log.dirs", None), store_config.pop("log.dir", None)
    dirs = dirs[0] or dirs[1]
    if not dirs:
        print("pylog serve: give --log-dirs DIR[,DIR...] (or log.dirs in --config)", file=sys.stderr)
        return 2
    ctx = click.get_current_context(silent=True)
    inherited = (ctx.find_root().obj or {}).get("log_level") if ctx is not None else None
    configure_logging(log_level or inherited or "info")
    store = pylog.open(dirs, **store_config)
    try:
        broker = pylog.Broker(store, config=server).start()
    except BaseException:
        store.close()
        raise

    def stop(signum, frame):  # noqa: ARG001
        logging.getLogger("pylog.cli").info("signal %d: shutting down", signum)
        # shutdown() waits for in-flight requests: not inside the signal handler.
        threading.Thread(target=broker.shutdown, name="pylog-shutdown").start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    metrics = None
    if metrics_port is not None:
        from pylog.metrics import serve_metrics
        metrics, _ = serve_metrics(store, broker, metrics_port)
    print(f"pylog serving {dirs} on {broker.bootstrap_servers}", flush=True)
    print("listeners: " + ", ".join(
        "%s (%s, advertised as %s:%d)" % (listener, listener.security_protocol,
                                          *broker.advertised_address(listener))
        for listener in broker.listeners), flush=True)
    if broker.tls_engine is not None:
        print(f"TLS: {broker.tls_engine}", flush=True)
    if metrics is not None:
        print(f"metrics on http://127.0.0.1:{metrics.server_port}/metrics", flush=True)
    from pylog.common.memory import freeze_heap
    freeze_heap()       # start-up objects: out of the collector's full passes
    try:
        broker.serve_forever()
    finally:
        if metrics is not None:
            metrics.shutdown()
            metrics.server_close()
        broker.shutdown()
        store.close()
    return 0
