"""The store's dynamic broker configs (KIP-226): precedence, live logs, persistence in
every log dir, and opening whatever the files hold."""

from __future__ import annotations

import json
import logging
import os

import pytest
from log_support import T0

from pylog.common.config import ConfigDef
from pylog.errors import ConfigError

HOUR_MS = 3_600_000


def table(path: str) -> dict:
    with open(os.path.join(path, "pylog-broker-configs.json")) as f:
        return json.load(f)


def test_precedence_topic_then_broker_then_default_then_static(dirs, open_manager):
    store = open_manager(dirs[:1], log_retention_hours=2)
    store.create_topic("plain", 1)
    store.create_topic("own", 1, {"retention.ms": 5000})
    assert store.log("plain", 0).config.retention_ms == 2 * HOUR_MS            # static
    store.alter_broker_configs("default", {"log.retention.ms": 60_000})
    assert store.log("plain", 0).config.retention_ms == 60_000                 # dynamic default
    store.alter_broker_configs("broker", {"log.retention.ms": 30_000})
    assert store.log("plain", 0).config.retention_ms == 30_000                 # per broker
    assert store.log("own", 0).config.retention_ms == 5000                     # topic override
    store.alter_broker_configs("broker", {})
    assert store.log("plain", 0).config.retention_ms == 60_000
    assert store.dynamic_broker_configs == {"broker": {}, "default": {"log.retention.ms": "60000"}}


def test_a_change_reaches_live_logs_at_once(dirs, open_manager, clock):
    store = open_manager(dirs[:1])
    store.create_topic("t", 1)
    lg = store.log("t", 0)
    lg.append_records([b"x" * 100] * 10, timestamps=[T0] * 10)
    assert len(lg.segments) == 1
    store.alter_broker_configs("default", {"log.segment.bytes": 1024, "log.retention.ms": 1000})
    for _ in range(5):                           # new segments roll at the new size
        lg.append_records([b"x" * 100] * 8, timestamps=[T0] * 8)
    assert len(lg.segments) == 6
    clock.advance(2000)                          # and retention uses the new time
    assert lg.apply_retention(clock() + 1) == 6
    # Cleaner and loader sizes Kafka makes dynamic change too.
    store.alter_broker_configs("default", {"log.cleaner.backoff.ms": 10,
                                           "num.recovery.threads.per.data.dir": 4})
    assert store.config["log.cleaner.backoff.ms"] == 10
    assert store.config["num.recovery.threads.per.data.dir"] == 4


def test_bad_changes_raise_and_change_nothing(dirs, open_manager):
    store = open_manager(dirs[:2])
    store.create_topic("t", 1)
    with pytest.raises(ConfigError, match="unknown dynamic broker config 'log.retention.msx'; "
                                          "did you mean 'log.retention.ms'"):
        store.alter_broker_configs("default", {"log.retention.msx": 1})
    with pytest.raises(ConfigError, match="cannot update log.dirs dynamically: it is read-only"):
        store.alter_broker_configs("broker", {"log.dirs": "/elsewhere"})
    with pytest.raises(ConfigError, match="set log.roll.ms instead"):
        store.alter_broker_configs("broker", {"log.roll.hours": 1})
    with pytest.raises(ConfigError, match="log.segment.bytes = 3: must be at least 14"):
        store.alter_broker_configs("broker", {"log.segment.bytes": 3})
    with pytest.raises(ValueError, match="config level must be 'broker' or 'default'"):
        store.alter_broker_configs("cluster", {"log.retention.ms": 1})
    store.alter_broker_configs("default", {"log.retention.ms": 1}, validate_only=True)
    assert store.dynamic_broker_configs == {"broker": {}, "default": {}}
    assert store.log("t", 0).config.retention_ms == 7 * 24 * HOUR_MS
    assert not any(os.path.exists(os.path.join(d, "pylog-broker-configs.json")) for d in dirs[:2])


def test_persisted_in_every_dir_and_applied_at_the_next_open(dirs, open_manager):
    store = open_manager(dirs[:2], log_retention_hours=2)
    store.create_topic("t", 1)
    store.alter_broker_configs("default", {"log.segment.bytes": "1048576"})
    store.alter_broker_configs("broker", {"log.retention.ms": "60000", "log.cleanup.policy":
                                          "delete, compact"})
    store.close()
    for d in dirs[:2]:
        assert table(d) == {"version": 1, "epoch": 2,
                            "broker": {"log.cleanup.policy": "delete,compact",
                                       "log.retention.ms": "60000"},
                            "default": {"log.segment.bytes": "1048576"}}
    store = open_manager(dirs[:2], log_retention_hours=2)
    config = store.log("t", 0).config
    assert (config.retention_ms, config.segment_bytes, config.cleanup_policy) == \
        (60_000, 1 << 20, ("delete", "compact"))
    assert store.static_config == {"log.retention.hours": 2}


def test_the_newest_copy_wins_and_stale_or_corrupt_copies_are_rewritten(dirs, open_manager, caplog):
    store = open_manager(dirs[:3])
    store.alter_broker_configs("default", {"log.retention.ms": "1000"})
    store.alter_broker_configs("default", {"log.retention.ms": "2000"})
    store.close()
    stale = {"version": 1, "epoch": 1, "broker": {}, "default": {"log.retention.ms": "1000"}}
    with open(os.path.join(dirs[0], "pylog-broker-configs.json"), "w") as f:
        json.dump(stale, f)
    with open(os.path.join(dirs[1], "pylog-broker-configs.json"), "w") as f:
        f.write('{"version": 1, "epoch": ')
    with caplog.at_level(logging.WARNING, logger="pylog.storage"):
        store = open_manager(dirs[:3])
    assert "ignoring a corrupt dynamic broker config file" in caplog.text
    assert store.defaults.retention_ms == 2000
    assert [table(d)["default"] for d in dirs[:3]] == [{"log.retention.ms": "2000"}] * 3


def test_a_stored_value_that_no_longer_validates_is_ignored_at_open(dirs, open_manager, caplog):
    os.makedirs(dirs[0])
    with open(os.path.join(dirs[0], "pylog-broker-configs.json"), "w") as f:
        json.dump({"version": 1, "epoch": 3, "broker": {"log.segment.bytes": "12"},
                   "default": {"log.retention.ms": "5000", "max.connections": "10"}}, f)
    with caplog.at_level(logging.WARNING, logger="pylog.storage"):
        store = open_manager(dirs[:1], clock=lambda: T0)
    assert "log.segment.bytes = '12': must be at least 14" in caplog.text
    assert store.defaults.segment_bytes == 1 << 30 and store.defaults.retention_ms == 5000
    # A key of a layer above (the broker's) is kept for it.
    seen = []
    store.add_reconfigurable({"max.connections": ConfigDef("max.connections", "int32", 1, "")},
                             seen.append)
    assert seen == [{"max.connections": "10"}]
    store.alter_broker_configs("default", {"max.connections": "20"})
    assert seen[-1] == {"max.connections": "20"}
    store.remove_reconfigurable(seen.append)
    with pytest.raises(ConfigError, match="unknown dynamic broker config 'max.connections'"):
        store.alter_broker_configs("default", {"max.connections": "30"})
