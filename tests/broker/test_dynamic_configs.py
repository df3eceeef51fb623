"""Dynamic broker configs (KIP-226) over the wire: AlterConfigs and IncrementalAlterConfigs
on BROKER resources (this node's id, or "" for the cluster-wide default) change the
store's defaults at once, for every topic without its own value; DescribeConfigs reports
each key's source and synonyms as Kafka does; bad requests get Kafka's per-resource
errors; the changes survive a restart of `pylog serve`.
"""

from __future__ import annotations

import time

import pytest

import pylog
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient

from .process import ServeProcess, wait_until

BROKER, TOPIC = 4, 2
SET, DELETE, APPEND, SUBTRACT = range(4)
TOPIC_CONFIG, DYNAMIC_BROKER, DYNAMIC_DEFAULT, STATIC, DEFAULT = 1, 2, 3, 4, 5
INVALID_CONFIG, INVALID_REQUEST = 40, 42
HOUR_MS = 3_600_000


@pytest.fixture
def broker(tmp_path):
    """A store opened with static settings (log.retention.hours=2, a fast retention
    check), served on a free port."""
    store = pylog.open(str(tmp_path / "store"), log_retention_hours=2,
                       log_retention_check_interval_ms=100)
    served = pylog.Broker(store, listen="127.0.0.1:0").start()
    try:
        yield served
    finally:
        served.shutdown()
        store.close()


def incremental(client, name, *ops, resource_type=BROKER, validate_only=False):
    """IncrementalAlterConfigs of one resource: ops are (operation, key, value)."""
    req = m.IncrementalAlterConfigsRequest(validate_only=validate_only, resources=[
        m.IncrementalAlterConfigsRequestAlterConfigsResource(
            resource_type=resource_type, resource_name=name, configs=[
                m.IncrementalAlterConfigsRequestAlterableConfig(name=k, config_operation=op, value=v)
                for op, k, v in ops])])
    (res,) = client.request(44, req).responses
    return res.error_code, res.error_message


def describe(client, name, resource_type=BROKER, keys=None):
    req = m.DescribeConfigsRequest(include_synonyms=True, include_documentation=True, resources=[
        m.DescribeConfigsRequestDescribeConfigsResource(resource_type=resource_type,
                                                        resource_name=name, configuration_keys=keys)])
    (res,) = client.request(32, req).results
    assert res.error_code == 0, res.error_message
    return {c.name: c for c in res.configs}


def synonyms(entry):
    return [(s.name, s.value, s.source) for s in entry.synonyms]


def test_dynamic_default_retention_deletes_old_records_of_topics_without_their_own(broker):
    store = broker.store
    old = int(time.time() * 1000) - HOUR_MS          # inside the static 2 h, outside 1 min
    store.create_topic("follows", 1)
    store.create_topic("own", 1, {"retention.ms": str(4 * HOUR_MS)})
    for topic in ("follows", "own"):
        store.log(topic, 0).append_records([b"old"] * 10, timestamps=[old] * 10)
    time.sleep(0.3)                                  # retention ran: nothing is due yet
    assert store.log("follows", 0).log_start_offset == 0
    with ProtocolClient(broker.bootstrap_servers) as client:
        assert incremental(client, "", (SET, "log.retention.ms", "60000")) == (0, None)
        # No restart: the next retention check deletes what is older than a minute.
        assert wait_until(lambda: store.log("follows", 0).log_start_offset == 10)
        assert store.log("own", 0).log_start_offset == 0          # its own retention.ms wins
        entry = describe(client, "follows", TOPIC)["retention.ms"]
        assert (entry.value, entry.config_source) == ("60000", DYNAMIC_DEFAULT)
        assert synonyms(entry) == [("log.retention.ms", "60000", DYNAMIC_DEFAULT),
                                   ("log.retention.hours", "2", STATIC),
                                   ("log.retention.ms", "604800000", DEFAULT)]
        entry = describe(client, "own", TOPIC)["retention.ms"]
        assert (entry.value, entry.config_source) == (str(4 * HOUR_MS), TOPIC_CONFIG)
        assert synonyms(entry)[0] == ("retention.ms", str(4 * HOUR_MS), TOPIC_CONFIG)


def test_describe_reports_sources_synonyms_and_what_is_dynamic(broker):
    store = broker.store
    with ProtocolClient(broker.bootstrap_servers) as client:
        assert incremental(client, "", (SET, "log.retention.ms", "600000"),
                           (SET, "log.segment.bytes", "1048576")) == (0, None)
        assert incremental(client, "0", (SET, "log.retention.ms", "300000"),
                           (SET, "max.connections", "500")) == (0, None)
        configs = describe(client, "0")
        retention = configs["log.retention.ms"]
        assert (retention.value, retention.config_source, retention.read_only) == \
            ("300000", DYNAMIC_BROKER, False)
        assert synonyms(retention) == [("log.retention.ms", "300000", DYNAMIC_BROKER),
                                       ("log.retention.ms", "600000", DYNAMIC_DEFAULT),
                                       ("log.retention.hours", "2", STATIC),
                                       ("log.retention.ms", "604800000", DEFAULT)]
        assert retention.config_type == 5 and "older than" in retention.documentation
        hours = configs["log.retention.hours"]
        assert (hours.value, hours.config_source, hours.read_only) == ("2", STATIC, True)
        segment = configs["log.segment.bytes"]
        assert (segment.value, segment.config_source) == ("1048576", DYNAMIC_DEFAULT)
        assert (configs["max.connections"].value, configs["max.connections"].config_source) == \
            ("500", DYNAMIC_BROKER)
        assert broker.server_config["max.connections"] == 500
        for key in ("log.dirs", "node.id", "listeners", "num.partitions"):
            assert configs[key].read_only, key
        assert configs["log.dirs"].value == store.log_dirs[0]
        assert configs["log.dirs"].config_source == STATIC
        assert (configs["num.partitions"].value, configs["num.partitions"].config_source) == \
            ("1", DEFAULT)
        # The resource "" holds the cluster-wide dynamic defaults, and nothing else.
        defaults = describe(client, "")
        assert {k: (c.value, c.config_source) for k, c in defaults.items()} == {
            "log.retention.ms": ("600000", DYNAMIC_DEFAULT),
            "log.segment.bytes": ("1048576", DYNAMIC_DEFAULT)}
        # Kafka's configuration_keys filter.
        assert list(describe(client, "0", keys=["log.segment.bytes"])) == ["log.segment.bytes"]
        # A topic created now takes the per-broker value; its own override still wins.
        store.create_topic("later", 1, {"segment.bytes": "2048"})
        config = store.describe_topic("later").config
        assert (config["retention.ms"], config["segment.bytes"]) == (300_000, 2048)
        assert store.log("later", 0).config.retention_ms == 300_000
        # DELETE falls back to the next layer down.
        assert incremental(client, "0", (DELETE, "log.retention.ms", None)) == (0, None)
        assert store.log("later", 0).config.retention_ms == 600_000
        assert incremental(client, "", (DELETE, "log.retention.ms", None)) == (0, None)
        assert store.log("later", 0).config.retention_ms == 2 * HOUR_MS     # static again
        assert describe(client, "0")["log.retention.ms"].config_source == STATIC


def test_bad_requests_get_kafkas_errors_and_change_nothing(broker):
    store = broker.store
    with ProtocolClient(broker.bootstrap_servers) as client:
        cases = [
            (("0", (SET, "log.retention.msx", "1")), INVALID_CONFIG,
             "unknown broker config 'log.retention.msx'; did you mean 'log.retention.ms'?"),
            (("0", (SET, "log.dirs", "/elsewhere")), INVALID_REQUEST,
             "Cannot update these configs dynamically: log.dirs"),
            (("0", (SET, "node.id", "3")), INVALID_REQUEST, "node.id"),
            (("", (SET, "listeners", "PLAINTEXT://127.0.0.1:1")), INVALID_REQUEST, "listeners"),
            (("0", (SET, "log.retention.hours", "1")), INVALID_REQUEST,
             "log.retention.hours: set log.retention.ms instead"),
            (("0", (SET, "log.retention.ms", "soon")), INVALID_REQUEST,
             "log.retention.ms = 'soon': expected an integer"),
            (("0", (SET, "log.segment.bytes", "1")), INVALID_REQUEST, "must be at least 14"),
            (("0", (SET, "log.cleaner.threads", "4")), INVALID_REQUEST, "one log cleaner thread"),
            (("7", (SET, "log.retention.ms", "1")), INVALID_REQUEST,
             "Unexpected broker id, expected 0, but received 7"),
            (("zero", (SET, "log.retention.ms", "1")), INVALID_REQUEST, "must be an integer"),
            (("0", (SET, "log.retention.ms", "1"), (SET, "log.retention.ms", "2")),
             INVALID_REQUEST, "duplicate config keys"),
            (("0", (SET, "log.retention.ms", None)), INVALID_REQUEST, "Null value"),
            (("0", (APPEND, "log.retention.ms", "1")), INVALID_CONFIG, "not a list config"),
            (("0", (7, "log.retention.ms", "1")), INVALID_REQUEST, "Unknown operations type 7"),
        ]
        for (name, *ops), code, words in cases:
            error, message = incremental(client, name, *ops)
            assert (error, words in (message or "")) == (code, True), (ops, error, message)
        # validate_only checks everything and changes nothing.
        assert incremental(client, "", (SET, "log.retention.ms", "1000"),
                           validate_only=True) == (0, None)
        assert incremental(client, "", (SET, "log.retention.ms", "-5"),
                           validate_only=True)[0] == INVALID_REQUEST
        assert store.dynamic_broker_configs == {"broker": {}, "default": {}}
        # APPEND and SUBTRACT on the list key, from its default (delete).
        assert incremental(client, "", (APPEND, "log.cleanup.policy", "compact")) == (0, None)
        assert store.defaults.cleanup_policy == ("delete", "compact")
        assert incremental(client, "", (SUBTRACT, "log.cleanup.policy", "delete")) == (0, None)
        assert store.defaults.cleanup_policy == ("compact",)
        # AlterConfigs replaces a level's whole set; one bad resource leaves the other's.
        req = m.AlterConfigsRequest(validate_only=False, resources=[
            m.AlterConfigsRequestAlterConfigsResource(resource_type=BROKER, resource_name=name,
                                                      configs=[m.AlterConfigsRequestAlterableConfig(
                                                          name=k, value=v)])
            for name, k, v in (("", "log.roll.ms", "60000"), ("0", "log.dirs", "/x"))])
        errors = [(r.resource_name, r.error_code) for r in client.request(33, req).responses]
        assert errors == [("", 0), ("0", INVALID_REQUEST)]
        assert store.dynamic_broker_configs == {"broker": {}, "default": {"log.roll.ms": "60000"}}
        # A resource named twice is refused, both times.
        req.resources[1] = req.resources[0]
        assert [r.error_code for r in client.request(33, req).responses] == [INVALID_REQUEST] * 2


def test_max_connections_changes_without_a_restart(broker):
    with ProtocolClient(broker.bootstrap_servers) as client:
        assert incremental(client, "0", (SET, "max.connections", "1")) == (0, None)
        with pytest.raises(OSError):                  # closed on accept
            ProtocolClient(broker.bootstrap_servers, timeout=5).close()
        assert incremental(client, "0", (DELETE, "max.connections", None)) == (0, None)
        ProtocolClient(broker.bootstrap_servers).close()


def test_confluent_admin_alters_and_describes_broker_configs(broker):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    node = ConfigResource("broker", "0", incremental_configs=[
        ConfigEntry("log.segment.bytes", "1048576", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([node])[node].result(30)
    assert broker.store.defaults.segment_bytes == 1 << 20
    res = ConfigResource("broker", "0")
    entry = admin.describe_configs([res])[res].result(30)["log.segment.bytes"]
    assert (entry.value, entry.source, entry.is_read_only) == ("1048576", DYNAMIC_BROKER, False)
    bad = ConfigResource("broker", "0", incremental_configs=[
        ConfigEntry("log.dirs", "/x", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as raised:
        admin.incremental_alter_configs([bad])[bad].result(30)
    assert "Cannot update these configs dynamically: log.dirs" in raised.value.args[0].str()


def test_dynamic_configs_survive_a_restart_of_pylog_serve(tmp_path):
    dirs = f"{tmp_path / 'a'},{tmp_path / 'b'}"
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource
    with ServeProcess(dirs, "log.retention.hours=2") as served:
        admin = AdminClient({"bootstrap.servers": served.bootstrap})
        node = ConfigResource("broker", "0", incremental_configs=[
            ConfigEntry("log.retention.ms", "120000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry("message.max.bytes", "200000", incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([node])[node].result(30)
        with ProtocolClient(served.bootstrap) as client:
            assert incremental(client, "", (SET, "log.segment.bytes", "1048576")) == (0, None)
    for d in ("a", "b"):                                 # a copy in every log dir
        assert (tmp_path / d / "pylog-broker-configs.json").exists()
    with ServeProcess(dirs, "log.retention.hours=2") as served:
        with ProtocolClient(served.bootstrap) as client:
            configs = describe(client, "0")
            assert {k: (configs[k].value, configs[k].config_source) for k in (
                "log.retention.ms", "message.max.bytes", "log.segment.bytes")} == {
                "log.retention.ms": ("120000", DYNAMIC_BROKER),
                "message.max.bytes": ("200000", DYNAMIC_BROKER),
                "log.segment.bytes": ("1048576", DYNAMIC_DEFAULT)}
            # A new topic follows them; message.max.bytes refuses a bigger batch.
            client.metadata(["after"], allow_auto_create=True)
            big = pylog.records.encode_batch([b"x" * 300_000])
            part = client.produce("after", 0, big)
            assert part.error_code == 10          # MESSAGE_TOO_LARGE
    with pylog.open(dirs) as store:                     # and the store on its own
        assert store.describe_topic("after").config["retention.ms"] == 120_000
