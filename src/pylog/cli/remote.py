"""The ``--bootstrap-server`` forms: the same verbs against a broker (``pylog serve`` or a
Kafka cluster) through pylog's protocol client instead of log dirs."""

from __future__ import annotations

import click

__all__ = ["bootstrap_option", "remote_topics", "remote_offsets"]


def bootstrap_option():
    return click.option("--bootstrap-server", metavar="HOST:PORT",
                        help="talk to a broker (pylog serve or Kafka) instead of --log-dirs")


def _check(code: int, what: str) -> None:
    if code:
        from pylog.protocol.client import ProtocolError
        raise ProtocolError(code, what.rstrip(": "))


def remote_topics(bootstrap: str, action: str, topic, partitions, configs, as_json, matching) -> int:
    from pylog.protocol import ApiKey
    from pylog.protocol import messages as m
    from pylog.protocol.client import ProtocolClient

    from .common import print_json
    with ProtocolClient(bootstrap, client_id="pylog-topics") as client:
        if action in ("list", "describe"):
            meta = client.metadata()
            topics = {t.name: t for t in meta.topics if not t.error_code}
            names = matching([n for n in topics if topic or not topics[n].is_internal], topic)
            if action == "list":
                if as_json:
                    print_json(names)
                else:
                    for n in names:
                        click.echo(n)
                return 0
            out = [{"topic": n, "partitions": [
                {"partition": p.partition_index, "leader": p.leader_id,
                 "replicas": list(p.replica_nodes), "isr": list(p.isr_nodes)}
                for p in sorted(topics[n].partitions, key=lambda p: p.partition_index)]}
                for n in names]
            if as_json:
                print_json(out)
                return 0
            for t in out:
                click.echo(f"Topic: {t['topic']}\tPartitionCount: {len(t['partitions'])}")
                for p in t["partitions"]:
                    click.echo(f"\tTopic: {t['topic']}\tPartition: {p['partition']}\tLeader: "
                               f"{p['leader']}\tReplicas: {','.join(map(str, p['replicas']))}\t"
                               f"Isr: {','.join(map(str, p['isr']))}")
            return 0
        if action == "create":
            req = m.CreateTopicsRequest(timeout_ms=30000, topics=[m.CreateTopicsRequestCreatableTopic(
                name=topic, num_partitions=partitions or -1, replication_factor=-1,
                configs=[m.CreateTopicsRequestCreatableTopicConfig(name=k, value=v)
                         for k, v in configs.items()])])
            result = client.request(ApiKey.CREATE_TOPICS, req).topics[0]
            _check(result.error_code, f"creating {topic!r}: {result.error_message or ''}".strip())
            click.echo(f"Created topic {topic}.")
        elif action == "delete":
            req = m.DeleteTopicsRequest(timeout_ms=30000, topic_names=[topic],
                                        topics=[m.DeleteTopicsRequestDeleteTopicState(name=topic)])
            result = client.request(ApiKey.DELETE_TOPICS, req).responses[0]
            _check(result.error_code, f"deleting {topic!r}")
            click.echo(f"Deleted topic {topic}.")
        else:
            if partitions is None and not configs:
                raise click.UsageError("--alter needs --partitions or --config")
            if partitions is not None:
                req = m.CreatePartitionsRequest(timeout_ms=30000, validate_only=False, topics=[
                    m.CreatePartitionsRequestCreatePartitionsTopic(name=topic, count=partitions,
                                                                   assignments=None)])
                result = client.request(ApiKey.CREATE_PARTITIONS, req).results[0]
                _check(result.error_code, f"altering the partitions of {topic!r}: "
                                          f"{result.error_message or ''}".strip())
            if configs:
                # IncrementalAlterConfigs: SET (0) each key of the TOPIC (2) resource.
                req = m.IncrementalAlterConfigsRequest(validate_only=False, resources=[
                    m.IncrementalAlterConfigsRequestAlterConfigsResource(
                        resource_type=2, resource_name=topic, configs=[
                            m.IncrementalAlterConfigsRequestAlterableConfig(
                                name=k, config_operation=0, value=v) for k, v in configs.items()])])
                result = client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, req).responses[0]
                _check(result.error_code, f"altering the configs of {topic!r}: "
                                          f"{result.error_message or ''}".strip())
            click.echo(f"Altered topic {topic}.")
    return 0


def remote_offsets(bootstrap: str, topic, partitions, when: int, matching) -> int:
    """kafka-get-offsets: each ListOffsets goes to the partition's leader."""
    from pylog.remote import RemoteTopics
    wanted = None if not partitions else {int(p) for p in partitions.split(",")}
    with RemoteTopics(bootstrap, "pylog-get-offsets") as where:
        counts = where.topics()
        for name in matching([n for n in counts if topic or n not in where.internal], topic):
            for p in range(counts[name]):
                if wanted is not None and p not in wanted:
                    continue
                part = where.partition(name, p)
                offset = part.log_end_offset() if when == -1 else part.log_start_offset() \
                    if when == -2 else part.offset_for_timestamp(when)
                click.echo(f"{name}:{p}:{'' if offset is None else offset}")
    return 0
