"""``pylog topics`` and ``pylog get-offsets``: Kafka's kafka-topics.sh and
kafka-get-offsets.sh, on log dirs.

Listing, describing and offsets read the dirs read-only (pylog.storage.LogDirsReader), so
they work beside the process that owns them; creating, altering and deleting open the
store (and so need it to themselves).
"""

from __future__ import annotations

import re

import click

from .common import fail_on, log_dirs_option, print_json
from .remote import bootstrap_option, remote_offsets, remote_topics

__all__ = ["topics", "get_offsets"]


def _configs(items: tuple[str, ...]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise click.BadParameter(f"expected key=value, got {item!r}", param_hint="--config")
        out[key.strip()] = value.strip()
    return out


def _matching(names, pattern: str | None) -> list[str]:
    if pattern is None:
        return sorted(names)
    try:
        rx = re.compile(pattern)
    except re.error as exc:
        raise click.BadParameter(f"not a regular expression: {exc}", param_hint="--topic") from None
    return sorted(n for n in names if rx.fullmatch(n))


def _one_place(log_dirs, bootstrap) -> None:
    if bool(log_dirs) == bool(bootstrap):
        raise click.UsageError("give --log-dirs or --bootstrap-server (one of them)")


@click.command(help="Create, list, describe, alter or delete topics (kafka-topics.sh), in log "
                    "dirs or at a broker (--bootstrap-server).")
@log_dirs_option(required=False)
@bootstrap_option()
@click.option("--create", "action", flag_value="create")
@click.option("--list", "action", flag_value="list")
@click.option("--describe", "action", flag_value="describe")
@click.option("--alter", "action", flag_value="alter")
@click.option("--delete", "action", flag_value="delete")
@click.option("--topic", help="a topic name (a regular expression for --list/--describe)")
@click.option("--partitions", type=click.IntRange(min=1), help="partition count (create, alter)")
@click.option("--config", "configs", multiple=True, metavar="KEY=VALUE",
              help="a topic config (repeatable), Kafka's names")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output (list, describe)")
@fail_on(Exception)
def topics(log_dirs, bootstrap_server, action, topic, partitions, configs, as_json) -> int:
    _one_place(log_dirs, bootstrap_server)
    if action is None:
        raise click.UsageError("give one of --create, --list, --describe, --alter, --delete")
    if bootstrap_server:
        if action not in ("list", "describe") and not topic:
            raise click.UsageError(f"--{action} needs --topic")
        return remote_topics(bootstrap_server, action, topic, partitions, _configs(configs),
                             as_json, _matching)
    if action in ("list", "describe"):
        return _list_or_describe(log_dirs, action, topic, as_json)
    if not topic:
        raise click.UsageError(f"--{action} needs --topic")
    import pylog
    with pylog.open(log_dirs) as store:
        if action == "create":
            store.create_topic(topic, partitions=partitions, config=_configs(configs))
            click.echo(f"Created topic {topic}.")
        elif action == "delete":
            store.delete_topic(topic)
            click.echo(f"Deleted topic {topic}.")
        else:
            if partitions is None and not configs:
                raise click.UsageError("--alter needs --partitions or --config")
            if partitions is not None:
                store.create_partitions(topic, partitions)
            if configs:
                store.alter_topic_config(topic, _configs(configs))
            click.echo(f"Altered topic {topic}.")
    return 0


def _list_or_describe(log_dirs, action, pattern, as_json) -> int:
    from pylog.storage import LogDirsReader
    reader = LogDirsReader(log_dirs)
    counts = reader.topics()
    names = _matching(counts, pattern)
    if action == "list":
        if as_json:
            print_json(names)
        else:
            for name in names:
                click.echo(name)
        return 0
    newest = reader.topic_table()
    out = []
    for name in names:
        row = newest.get(name)
        parts = []
        for p in range(counts[name]):
            try:
                pr = reader.partition(name, p)
                parts.append({"partition": p, "log_dir": pr.directory.rsplit("/", 1)[0],
                              "log_start_offset": pr.log_start_offset(),
                              "log_end_offset": pr.log_end_offset(),
                              "segments": len(pr.segment_bases())})
            except Exception as exc:          # a partition without a dir: say so, go on
                parts.append({"partition": p, "error": str(exc)})
        out.append({"topic": name, "topic_id": row.topic_id if row else None,
                    "partitions": parts, "configs": dict(row.config) if row else {}})
    if as_json:
        print_json(out)
        return 0
    for t in out:
        configs = ",".join(f"{k}={v}" for k, v in sorted(t["configs"].items()))
        click.echo(f"Topic: {t['topic']}\tTopicId: {t['topic_id']}\tPartitionCount: "
                   f"{len(t['partitions'])}\tReplicationFactor: 1\tConfigs: {configs}")
        for p in t["partitions"]:
            extra = (f"\tLogStartOffset: {p['log_start_offset']}\tLogEndOffset: "
                     f"{p['log_end_offset']}\tSegments: {p['segments']}") if "error" not in p \
                else f"\tError: {p['error']}"
            click.echo(f"\tTopic: {t['topic']}\tPartition: {p['partition']}\tLeader: 0\t"
                       f"Replicas: 0\tIsr: 0{extra}")
    return 0


@click.command("get-offsets",
               help="Offsets of topic-partitions (kafka-get-offsets.sh): latest by default, "
                    "--time -2 for the earliest, or the first offset at or after a timestamp "
                    "(ms). Reads the dirs read-only, beside a running owner, or asks a broker "
                    "(--bootstrap-server).")
@log_dirs_option(required=False)
@bootstrap_option()
@click.option("--topic", help="a regular expression (default: every topic but internal ones)")
@click.option("--partitions", help="comma-separated partition ids")
@click.option("--time", "when", default="-1", show_default=True,
              help="-1 (latest), -2 (earliest), or a timestamp in ms")
@fail_on(Exception)
def get_offsets(log_dirs, bootstrap_server, topic, partitions, when) -> int:
    from pylog.storage import LogDirsReader
    _one_place(log_dirs, bootstrap_server)
    try:
        when = {"latest": -1, "earliest": -2}.get(when, None) if not when.lstrip("-").isdigit() \
            else int(when)
    except ValueError:
        when = None
    if when is None or when < -2:
        raise click.BadParameter("use -1, -2, latest, earliest or a timestamp in ms",
                                 param_hint="--time")
    if bootstrap_server:
        return remote_offsets(bootstrap_server, topic, partitions, when, _matching)
    reader = LogDirsReader(log_dirs)
    counts = reader.topics()
    names = _matching([n for n in counts if topic or not n.startswith("__")], topic)
    wanted = None if not partitions else {int(p) for p in partitions.split(",")}
    for name in names:
        for p in range(counts[name]):
            if wanted is not None and p not in wanted:
                continue
            pr = reader.partition(name, p)
            if when == -1:
                offset = pr.log_end_offset()
            elif when == -2:
                offset = pr.log_start_offset()
            else:
                offset = pr.offset_for_timestamp(when)
            click.echo(f"{name}:{p}:{'' if offset is None else offset}")
    return 0
