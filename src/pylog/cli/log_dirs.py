"""``pylog log-dirs``: Kafka's kafka-log-dirs.sh (``--describe``), and moving a partition
to another log dir of a running broker (``--move``, what kafka-reassign-partitions.sh
does with ``log_dirs``: AlterReplicaLogDirs, KIP-113). Both talk to a broker (``pylog
serve`` or Kafka): a move needs the process that owns the dirs."""

from __future__ import annotations

import json
import time

import click

from .common import fail_on
from .remote import bootstrap_option

__all__ = ["log_dirs"]


def _describe(client, topics: list[str] | None):
    from pylog.protocol import ApiKey
    from pylog.protocol import messages as m
    wanted = None
    if topics:
        meta = client.metadata(topics)
        wanted = [m.DescribeLogDirsRequestDescribableLogDirTopic(
            topic=t.name, partitions=[p.partition_index for p in t.partitions])
            for t in meta.topics if not t.error_code]
    resp = client.request(ApiKey.DESCRIBE_LOG_DIRS, m.DescribeLogDirsRequest(topics=wanted))
    if resp.error_code:
        from pylog.protocol.client import ProtocolError
        raise ProtocolError(resp.error_code, "describing the log dirs")
    return resp


def _error_name(code: int, names) -> str:
    try:
        return names(code).name
    except ValueError:                 # a code newer than pylog's table
        return str(code)


def _node_id(client, bootstrap: str) -> int:
    """The node id of the broker at `bootstrap` (the one whose dirs were described)."""
    brokers = client.metadata([]).brokers
    host, _, port = bootstrap.rpartition(":")
    for b in brokers:
        if b.host == host and b.port == int(port):
            return b.node_id
    return brokers[0].node_id if brokers else -1


def _where(resp, topic: str, partition: int) -> tuple[str | None, str | None]:
    """(current dir, future dir) of one partition in a DescribeLogDirs answer."""
    current = future = None
    for d in resp.results:
        for t in d.topics:
            for p in t.partitions:
                if t.name == topic and p.partition_index == partition:
                    if p.is_future_key:
                        future = d.log_dir
                    else:
                        current = d.log_dir
    return current, future


@click.command("log-dirs", help="Describe the log dirs of the broker at --bootstrap-server "
                                "(kafka-log-dirs.sh --describe, JSON as it prints), or move a "
                                "partition to another of them while it is written (--move "
                                "TOPIC:PARTITION --to DIR).")
@bootstrap_option()
@click.option("--describe", "action", flag_value="describe")
@click.option("--move", "move", metavar="TOPIC:PARTITION", help="the partition to move")
@click.option("--to", "to", metavar="DIR", help="the log dir to move it to (an absolute path)")
@click.option("--topic-list", help="comma-separated topics to describe (default: all)")
@click.option("--wait/--no-wait", default=True, show_default=True,
              help="after --move, wait until the partition is in DIR")
@click.option("--timeout", type=float, default=300.0, show_default=True,
              help="seconds --wait waits")
@fail_on(Exception)
def log_dirs(bootstrap_server, action, move, to, topic_list, wait, timeout) -> int:
    from pylog.protocol import ApiKey
    from pylog.protocol import messages as m
    from pylog.errors import ErrorCode
    from pylog.protocol.client import ProtocolClient, ProtocolError
    if not bootstrap_server:
        raise click.UsageError("give --bootstrap-server (the broker that owns the log dirs)")
    if (action is None) == (move is None):
        raise click.UsageError("give --describe or --move (one of them)")
    with ProtocolClient(bootstrap_server, client_id="pylog-log-dirs") as client:
        if action == "describe":
            topics = [t for t in (topic_list or "").split(",") if t] or None
            resp = _describe(client, topics)
            dirs = [{"logDir": d.log_dir,
                     "error": None if not d.error_code else _error_name(d.error_code, ErrorCode),
                     "totalBytes": d.total_bytes, "usableBytes": d.usable_bytes,
                     "partitions": [{"partition": f"{t.name}-{p.partition_index}",
                                     "size": p.partition_size, "offsetLag": p.offset_lag,
                                     "isFuture": p.is_future_key}
                                    for t in d.topics for p in t.partitions]}
                    for d in resp.results]
            click.echo(json.dumps({"version": 1, "brokers": [
                {"broker": _node_id(client, bootstrap_server), "logDirs": dirs}]}))
            return 0
        topic, sep, number = move.rpartition(":")
        if not sep or not topic or not number.isdigit():
            raise click.BadParameter("expected TOPIC:PARTITION", param_hint="--move")
        if not to:
            raise click.UsageError("--move needs --to DIR")
        partition = int(number)
        resp = client.request(ApiKey.ALTER_REPLICA_LOG_DIRS, m.AlterReplicaLogDirsRequest(dirs=[
            m.AlterReplicaLogDirsRequestAlterReplicaLogDir(path=to, topics=[
                m.AlterReplicaLogDirsRequestAlterReplicaLogDirTopic(name=topic,
                                                                    partitions=[partition])])]))
        code = resp.results[0].partitions[0].error_code
        if code:
            raise ProtocolError(code, f"moving {topic}-{partition} to {to}")
        click.echo(f"Moving {topic}-{partition} to {to}.")
        if not wait:
            return 0
        deadline = time.monotonic() + timeout
        while True:
            current, future = _where(_describe(client, [topic]), topic, partition)
            if current == to and future is None:
                click.echo(f"Moved {topic}-{partition} to {to}.")
                return 0
            if time.monotonic() > deadline:
                raise click.ClickException(f"{topic}-{partition} is still in {current} after "
                                           f"{timeout:g} s (copy in {future})")
            time.sleep(0.1)
