"""``pylog consumer-groups``: Kafka's kafka-consumer-groups.sh (list, describe with lag,
reset-offsets, delete), on log dirs or at a broker (``--bootstrap-server``).

On log dirs it opens the store (groups live in ``__consumer_offsets``, which the store's
coordinator replays); at a broker it speaks the group APIs (pylog.remote).
Both answer the same few questions (:class:`_LocalGroups`, :class:`_RemoteGroups`), so
the verbs are written once."""

from __future__ import annotations

from contextlib import contextmanager

import click

from .common import fail_on, log_dirs_option, print_json, print_table
from .remote import bootstrap_option

__all__ = ["consumer_groups"]


def _parse_datetime(text: str) -> int:
    """Kafka's --to-datetime format, YYYY-MM-DDTHH:mm:SS.sss (UTC unless an offset is given)."""
    from datetime import datetime, timezone
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"expected YYYY-MM-DDTHH:mm:SS.sss, got {text!r}",
                                 param_hint="--to-datetime") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


class _LocalGroups:
    """The store's coordinator (log dirs)."""

    def __init__(self, store) -> None:
        self.store = store

    def list(self) -> dict[str, str]:
        return {g: "" for g in self.store.consumer_groups()}

    def members(self, group: str) -> dict[tuple[str, int], tuple[str, str, str]]:
        return {}                 # in-process members have no id, host or client id to show

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        return {tuple(tp): om.offset for tp, om in self.store.committed_offsets(group).items()}

    def partition_count(self, topic: str) -> int | None:
        return self.store.partition_count(topic)

    def bounds(self, topic: str, p: int) -> tuple[int, int]:
        log = self.store.log(topic, p)
        return log.log_start_offset, log.log_end_offset

    def offset_for_time(self, topic: str, p: int, when: int) -> int | None:
        found = self.store.log(topic, p).offset_for_timestamp(when)
        return None if found is None else found.offset

    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        self.store.commit_offsets(group, offsets)

    def delete(self, group: str) -> None:
        self.store.coordinator.delete_group(group)


class _RemoteGroups:
    """A broker's group coordinator, and its partitions' offsets."""

    def __init__(self, groups, topics) -> None:
        self.groups = groups              # pylog.remote.RemoteGroups
        self.topics = topics              # pylog.remote.RemoteTopics (in `with`)

    def list(self) -> dict[str, str]:
        return self.groups.list()

    def members(self, group: str) -> dict[tuple[str, int], tuple[str, str, str]]:
        return {tp: (mb.member_id, mb.host, mb.client_id)
                for mb in self.groups.describe(group).members for tp in mb.partitions}

    def committed(self, group: str) -> dict[tuple[str, int], int]:
        return self.groups.committed(group)

    def partition_count(self, topic: str) -> int | None:
        return self.topics.topics().get(topic)

    def bounds(self, topic: str, p: int) -> tuple[int, int]:
        part = self.topics.partition(topic, p)
        return part.log_start_offset(), part.log_end_offset()

    def offset_for_time(self, topic: str, p: int, when: int) -> int | None:
        return self.topics.partition(topic, p).offset_for_timestamp(when)

    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        state = self.groups.describe(group)
        if state.members:
            # Kafka's own words: a reset needs the group's consumers stopped.
            raise click.ClickException(f"Assignments can only be reset if the group '{group}' "
                                       f"is inactive, but the current state is {state.state}.")
        self.groups.commit(group, offsets)

    def delete(self, group: str) -> None:
        self.groups.delete(group)


@contextmanager
def _open(log_dirs, bootstrap):
    if bool(log_dirs) == bool(bootstrap):
        raise click.UsageError("give --log-dirs or --bootstrap-server (one of them)")
    if bootstrap:
        from pylog.remote import RemoteGroups, RemoteTopics
        with RemoteGroups(bootstrap) as groups, \
                RemoteTopics(bootstrap, "pylog-consumer-groups") as topics:
            yield _RemoteGroups(groups, topics)
        return
    import pylog
    with pylog.open(log_dirs) as store:
        yield _LocalGroups(store)


@click.command("consumer-groups",
               help="List, describe (with lag), reset offsets of, or delete consumer groups "
                    "(kafka-consumer-groups.sh).")
@log_dirs_option(required=False)
@bootstrap_option()
@click.option("--list", "action", flag_value="list")
@click.option("--describe", "action", flag_value="describe")
@click.option("--reset-offsets", "action", flag_value="reset")
@click.option("--delete", "action", flag_value="delete")
@click.option("--group", help="the group (describe, reset-offsets, delete)")
@click.option("--topic", help="reset only this topic (topic or topic:0,1)")
@click.option("--all-topics", is_flag=True, help="reset every topic the group committed")
@click.option("--to-earliest", "to", flag_value="earliest")
@click.option("--to-latest", "to", flag_value="latest")
@click.option("--to-offset", type=int, help="reset to this offset")
@click.option("--to-datetime", help="reset to the first record at or after this time")
@click.option("--shift-by", type=int, help="move each committed offset by N")
@click.option("--execute", is_flag=True, help="apply the reset (default: a dry run)")
@click.option("--dry-run", is_flag=True, help="show the reset without applying it (the default)")
@click.option("--json", "as_json", is_flag=True)
@fail_on(Exception)
def consumer_groups(log_dirs, bootstrap_server, action, group, topic, all_topics, to, to_offset,
                    to_datetime, shift_by, execute, dry_run, as_json) -> int:
    if action is None:
        raise click.UsageError("give one of --list, --describe, --reset-offsets, --delete")
    if action != "list" and not group:
        raise click.UsageError(f"--{'reset-offsets' if action == 'reset' else action} needs --group")
    with _open(log_dirs, bootstrap_server) as groups:
        known = groups.list()
        if action == "list":
            if as_json:
                print_json(list(known))
            else:
                for g in known:
                    click.echo(g)
            return 0
        if group not in known:
            raise click.ClickException(f"consumer group {group!r} does not exist")
        committed = groups.committed(group)
        if action == "delete":
            groups.delete(group)
            click.echo(f"Deletion of requested consumer groups ('{group}') was successful.")
            return 0
        if action == "describe":
            members = groups.members(group)
            rows = []
            for t, p in sorted(set(committed) | set(members)):
                end = groups.bounds(t, p)[1]
                offset = committed.get((t, p))
                lag = "-" if offset is None else end - offset
                rows.append([group, t, p, "-" if offset is None else offset, end, lag,
                             *members.get((t, p), ("-", "-", "-"))])
            if as_json:
                print_json([dict(zip(["group", "topic", "partition", "current_offset",
                                      "log_end_offset", "lag", "consumer_id", "host",
                                      "client_id"], r)) for r in rows])
            else:
                if bootstrap_server and not members:
                    click.echo(f"Consumer group '{group}' has no active members.", err=True)
                print_table(["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET",
                             "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"], rows)
            return 0
        # reset-offsets
        chosen = [x is not None for x in (to, to_offset, to_datetime, shift_by)]
        if sum(chosen) != 1:
            raise click.UsageError("give one of --to-earliest, --to-latest, --to-offset, "
                                   "--to-datetime, --shift-by")
        if not (topic or all_topics):
            raise click.UsageError("--reset-offsets needs --topic or --all-topics")
        if execute and dry_run:
            raise click.UsageError("--execute and --dry-run exclude each other")
        targets = sorted(committed)
        if topic:
            name, _, parts = topic.partition(":")
            wanted = {int(p) for p in parts.split(",")} if parts else None
            count = groups.partition_count(name)
            if count is None:
                raise click.ClickException(f"topic {name!r} does not exist")
            targets = [(name, p) for p in range(count) if wanted is None or p in wanted]
        new = {}
        for t, p in targets:
            start, end = groups.bounds(t, p)
            if to == "earliest":
                offset = start
            elif to == "latest":
                offset = end
            elif to_offset is not None:
                offset = to_offset
            elif to_datetime is not None:
                found = groups.offset_for_time(t, p, _parse_datetime(to_datetime))
                offset = end if found is None else found
            else:
                offset = committed.get((t, p), start) + shift_by
            new[(t, p)] = min(max(offset, start), end)        # Kafka clamps to the log's range
        rows = [[group, t, p, o] for (t, p), o in sorted(new.items())]
        if as_json:
            print_json([dict(zip(["group", "topic", "partition", "new_offset"], r)) for r in rows])
        else:
            print_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows)
        if execute:
            groups.commit(group, new)
    return 0
