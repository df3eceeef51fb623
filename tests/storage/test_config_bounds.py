"""Size configs are bounded as Kafka bounds them, and no topic config can take a
log dir offline (issue 12, items 2 and 7)."""

import os

import pytest

from log_support import all_records
from pylog import records
from pylog.errors import ConfigError
from pylog.storage import BrokerConfig, LogConfig, LogManager
from pylog.storage.log import Log
from pylog.storage.segment import LogSegment

INT_MAX = (1 << 31) - 1

# Kafka's INT-typed configs (TopicConfig / ServerConfigs): at most Int.MaxValue.
TOPIC_INTS = ["segment.bytes", "segment.index.bytes", "index.interval.bytes", "max.message.bytes"]
BROKER_INTS = ["num.partitions", "num.recovery.threads.per.data.dir", "offsets.topic.num.partitions",
               "offsets.topic.segment.bytes", "log.segment.bytes", "message.max.bytes"]


@pytest.mark.parametrize("key", TOPIC_INTS)
def test_topic_int_configs_stop_at_int_max(key):
    assert LogConfig({key: INT_MAX})[key] == INT_MAX
    with pytest.raises(ConfigError, match=f"{key} = {1 << 31}: must be at most {INT_MAX} \\(Kafka's INT"):
        LogConfig({key: 1 << 31})


@pytest.mark.parametrize("key", BROKER_INTS)
def test_broker_int_configs_stop_at_int_max(key):
    with pytest.raises(ConfigError, match=f"{key} = 4294967296: must be at most {INT_MAX}"):
        BrokerConfig({key: 4 << 30})


def test_long_configs_stop_at_long_max():
    LogConfig({"retention.ms": (1 << 63) - 1})
    with pytest.raises(ConfigError, match="retention.ms = .*must be at most 9223372036854775807"):
        LogConfig({"retention.ms": 1 << 63})


def test_a_4_gib_segment_is_refused_by_the_store(tmp_path):
    """segment.bytes = 4 GiB was accepted; records past 2 GiB then failed every read
    with EINVAL (index positions are int32)."""
    with LogManager(str(tmp_path), background=False) as manager:
        with pytest.raises(ConfigError, match="segment.bytes"):
            manager.create_topic("t", 1, {"segment.bytes": 4 << 30})
        manager.create_topic("t", 1)
        with pytest.raises(ConfigError, match="segment.bytes"):
            manager.alter_topic_config("t", {"segment.bytes": 4 << 30})
        assert manager.list_topics() == ["t"]


def test_segment_index_bytes_needs_one_time_index_entry():
    with pytest.raises(ConfigError, match="segment.index.bytes = 11: must be at least 12"):
        LogConfig({"segment.index.bytes": 11})


@pytest.mark.parametrize("index_bytes", [12, 16, 23, 24])
def test_tiny_indexes_roll_instead_of_failing(tmp_path, index_bytes):
    """segment.index.bytes of 8-23 made the first append roll an empty segment, fail
    with "...00000000000000000000.log already exists" and take the dir offline."""
    config = {"segment.index.bytes": index_bytes, "index.interval.bytes": 0}
    with LogManager(str(tmp_path), background=False) as manager:
        manager.create_topic("tiny", 1, config)
        manager.create_topic("other", 1)
        log = manager.log("tiny", 0)
        for i in range(20):
            log.append(records.encode_batch([b"v%d" % i, b"w%d" % i]))
        assert manager.offline_log_dirs == {}
        assert len(log.segments) > 1
        assert [r.value for r in all_records(log)] == [x for i in range(20) for x in (b"v%d" % i, b"w%d" % i)]
        for offset in range(40):
            assert log.read(offset, 100).records()[0].offset <= offset
        manager.log("other", 0).append(records.encode_batch([b"fine"]))
    with LogManager(str(tmp_path), background=False) as again:
        assert len(all_records(again.log("tiny", 0))) == 40


def test_a_failed_roll_leaves_no_half_made_segment(log_dir, monkeypatch):
    log = Log(log_dir, {"segment.bytes": 200})
    log.append(records.encode_batch([b"x" * 100]))

    def broken(self):
        raise OSError(5, "simulated failure while finishing the old segment")
    monkeypatch.setattr(LogSegment, "on_become_inactive", broken)
    with pytest.raises(OSError):
        log.append(records.encode_batch([b"y" * 100]))
    assert sorted(n for n in os.listdir(log_dir) if n.endswith((".log", ".index", ".timeindex"))) == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex"]
    monkeypatch.undo()
    log.append(records.encode_batch([b"y" * 100]))          # the next roll works
    assert log.log_end_offset == 2 and len(log.segments) == 2
    log.close()
