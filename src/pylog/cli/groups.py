"""``pylog consumer-groups``: Kafka's kafka-consumer-groups.sh on log dirs (list, describe
with lag, reset-offsets, delete). Opens the store: groups live in ``__consumer_offsets``,
which the store's coordinator replays."""

from __future__ import annotations

import click

from .common import fail_on, log_dirs_option, print_json, print_table

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


@click.command("consumer-groups",
               help="List, describe (with lag), reset offsets of, or delete consumer groups "
                    "(kafka-consumer-groups.sh).")
@log_dirs_option()
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
def consumer_groups(log_dirs, action, group, topic, all_topics, to, to_offset, to_datetime,
                    shift_by, execute, dry_run, as_json) -> int:
    import pylog
    if action is None:
        raise click.UsageError("give one of --list, --describe, --reset-offsets, --delete")
    if action != "list" and not group:
        raise click.UsageError(f"--{'reset-offsets' if action == 'reset' else action} needs --group")
    with pylog.open(log_dirs) as store:
        groups = store.consumer_groups()
        if action == "list":
            if as_json:
                print_json(groups)
            else:
                for g in groups:
                    click.echo(g)
            return 0
        if group not in groups:
            raise click.ClickException(f"consumer group {group!r} does not exist")
        committed = {tp: om.offset for tp, om in store.committed_offsets(group).items()}
        if action == "delete":
            store.coordinator.delete_group(group)
            click.echo(f"Deletion of requested consumer groups ('{group}') was successful.")
            return 0
        if action == "describe":
            rows = []
            for (t, p), offset in sorted(committed.items()):
                end = store.log(t, p).log_end_offset
                rows.append([group, t, p, offset, end, end - offset, "-", "-", "-"])
            if as_json:
                print_json([dict(zip(["group", "topic", "partition", "current_offset",
                                      "log_end_offset", "lag"], r)) for r in rows])
            else:
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
            count = store.partition_count(name)
            if count is None:
                raise click.ClickException(f"topic {name!r} does not exist")
            targets = [(name, p) for p in range(count) if wanted is None or p in wanted]
        new = {}
        for t, p in targets:
            log = store.log(t, p)
            start, end = log.log_start_offset, log.log_end_offset
            if to == "earliest":
                offset = start
            elif to == "latest":
                offset = end
            elif to_offset is not None:
                offset = to_offset
            elif to_datetime is not None:
                found = log.offset_for_timestamp(_parse_datetime(to_datetime))
                offset = end if found is None else found.offset
            else:
                offset = committed.get((t, p), start) + shift_by
            new[(t, p)] = min(max(offset, start), end)        # Kafka clamps to the log's range
        rows = [[group, t, p, o] for (t, p), o in sorted(new.items())]
        if as_json:
            print_json([dict(zip(["group", "topic", "partition", "new_offset"], r)) for r in rows])
        else:
            print_table(["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"], rows)
        if execute:
            store.commit_offsets(group, new)
    return 0
