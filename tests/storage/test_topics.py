"""Topics: names validated as Kafka does, create/delete/list/describe/alter/
create_partitions, configs validated, everything persisted across restarts."""

import json
import os

import pytest

from pylog.errors import (
    ConfigError,
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidTopicError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from pylog.storage import files
from pylog.storage.topics import validate_topic_name


def read(path):
    with open(path, "rb") as f:
        return f.read()


@pytest.mark.parametrize("name, words", [
    ("../x", "'/'"),
    ("a/b", "'/'"),
    ("x" * 250, "longer than 249"),
    ("", "empty"),
    (".", "cannot be '.'"),
    ("..", "cannot be '..'"),
    ("a b", "' '"),
    ("tab\tx", "'\\t'"),
    ("nul\0x", "'\\x00'"),
    ("ünï", "'ïü'"),
    ("ok\n", "'\\n'"),
    (42, "must be a string"),
])
def test_hostile_topic_names_are_rejected(dirs, open_manager, name, words):
    """No name can reach outside a log dir; the error says what is wrong."""
    manager = open_manager(dirs[:1])
    with pytest.raises(InvalidTopicError) as err:
        manager.create_topic(name, 1)
    assert words in str(err.value)
    assert [] == manager.list_topics()
    assert sorted(os.listdir(dirs[0])) == sorted(
        [".lock", "meta.properties", "pylog-topics.json", "recovery-point-offset-checkpoint",
         "log-start-offset-checkpoint"])


@pytest.mark.parametrize("name", ["a", "x" * 249, "a.b_c-D9", "...", "-", "_x"])
def test_legal_names(name):
    assert name == validate_topic_name(name)


def test_longest_name_gets_a_partition_dir(dirs, open_manager):
    manager = open_manager(dirs[:1])
    manager.create_topic("x" * 249, 3)
    manager.delete_topic("x" * 249)        # the -delete dir name is cut to fit 255 bytes
    assert [] == manager.list_topics()


def test_renamed_dir_names_fit_255_bytes_and_keep_what_fits():
    uid = "0" * 32
    assert files.renamed_dir_name("clicks", 3, uid, "-delete") == f"clicks-3.{uid}-delete"
    long = files.renamed_dir_name("x" * 249, 12, uid, "-delete")
    assert len(long) == 255 and long == "x" * (255 - len(f"-12.{uid}-delete")) + f"-12.{uid}-delete"
    assert files.renamed_dir_name("y" * 300, 1, "u" * 300, "-stray").startswith("y-1.")


def test_segment_file_names_refuse_negative_offsets():
    assert files.filename_prefix_from_offset(0) == "0" * 20
    for bad in (-1, -2):
        with pytest.raises(ValueError, match="negative"):
            files.filename_prefix_from_offset(bad)


def test_create_describe_list(dirs, open_manager):
    manager = open_manager(dirs)
    described = manager.create_topic("clicks", 4, {"retention.ms": 86_400_000, "compression_type": "zstd"})
    assert "clicks" == described.name
    assert 22 == len(described.topic_id)
    assert [0, 1, 2, 3] == [p.partition for p in described.partitions]
    assert all(p.online and p.log_end_offset == 0 for p in described.partitions)
    assert {"retention.ms": "86400000", "compression.type": "zstd"} == described.overrides
    assert 86_400_000 == described.config["retention.ms"]
    assert 1 << 30 == described.config["segment.bytes"]          # default
    assert ["clicks"] == manager.list_topics()
    assert 86_400_000 == manager.log("clicks", 2).config.retention_ms


def test_create_errors(dirs, open_manager):
    manager = open_manager(dirs[:1])
    manager.create_topic("t", 2)
    with pytest.raises(TopicAlreadyExistsError):
        manager.create_topic("t", 2)
    manager.create_topic("a_b", 1)
    with pytest.raises(InvalidTopicError, match="collides"):
        manager.create_topic("a.b", 1)
    with pytest.raises(InvalidPartitionsError):
        manager.create_topic("zero", 0)
    with pytest.raises(InvalidPartitionsError):
        manager.create_topic("neg", -3)
    with pytest.raises(InvalidReplicationFactorError):
        manager.create_topic("rf", 1, replication_factor=3)
    with pytest.raises(InvalidTopicError, match="internal"):
        manager.create_topic("__consumer_offsets", 1)
    with pytest.raises(ConfigError, match="unknown topic config 'retention.msx'.*retention.ms"):
        manager.create_topic("bad", 1, {"retention.msx": 5})
    with pytest.raises(ConfigError, match=r"retention.bytes = -5: must be at least -1"):
        manager.create_topic("bad", 1, {"retention.bytes": -5})
    with pytest.raises(ConfigError, match="segment.bytes = 'big': expected an integer"):
        manager.create_topic("bad", 1, {"segment.bytes": "big"})
    assert ["a_b", "t"] == manager.list_topics()


def test_unknown_topic_and_partition(dirs, open_manager):
    manager = open_manager(dirs[:1])
    manager.create_topic("t", 2)
    with pytest.raises(UnknownTopicOrPartitionError, match="'nope' does not exist"):
        manager.log("nope", 0)
    with pytest.raises(UnknownTopicOrPartitionError, match="partitions 0..1, not 2"):
        manager.log("t", 2)
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.delete_topic("nope")


def test_broker_defaults_use_log_prefixed_names(dirs, open_manager):
    manager = open_manager(dirs[:1], {"log.retention.hours": 2, "log.segment.bytes": 1 << 20,
                                      "num.partitions": 3})
    manager.create_topic("t")
    assert 3 == len(manager.describe_topic("t").partitions)
    assert 2 * 3600_000 == manager.log("t", 0).config.retention_ms
    assert 1 << 20 == manager.log("t", 0).config.segment_bytes


def test_broker_config_errors(dirs, open_manager):
    with pytest.raises(ConfigError, match="unknown broker config 'log.retention.hourz'"):
        open_manager(dirs[:1], {"log.retention.hourz": 1})
    with pytest.raises(ConfigError, match="num.recovery.threads.per.data.dir = 0: must be at least 1"):
        open_manager(dirs[:1], {"num.recovery.threads.per.data.dir": 0})
    with pytest.raises(ConfigError, match="same directory twice"):
        open_manager([dirs[0], dirs[0] + "/"])


def test_alter_config_merges_and_applies_to_live_logs(dirs, open_manager):
    manager = open_manager(dirs[:1])
    manager.create_topic("t", 2, {"retention.ms": 1000, "segment.bytes": 1 << 20})
    manager.alter_topic_config("t", {"retention.ms": 5000, "retention.bytes": 1 << 30})
    assert {"retention.ms": "5000", "segment.bytes": "1048576", "retention.bytes": "1073741824"} == \
        manager.describe_topic("t").overrides
    assert 5000 == manager.log("t", 1).config.retention_ms
    manager.alter_topic_config("t", {"segment.bytes": None})          # back to the default
    assert 1 << 30 == manager.log("t", 0).config.segment_bytes
    manager.alter_topic_config("t", {"cleanup.policy": "compact"}, replace=True)
    assert {"cleanup.policy": "compact"} == manager.describe_topic("t").overrides
    with pytest.raises(ConfigError, match="cleanup.policy"):
        manager.alter_topic_config("t", {"cleanup.policy": "shred"})
    assert {"cleanup.policy": "compact"} == manager.describe_topic("t").overrides


def test_create_partitions(dirs, open_manager):
    manager = open_manager(dirs)
    manager.create_topic("t", 2)
    manager.create_partitions("t", 5)
    assert 5 == len(manager.describe_topic("t").partitions)
    manager.log("t", 4).append_records([b"x"])
    with pytest.raises(InvalidPartitionsError, match="must be larger"):
        manager.create_partitions("t", 5)
    with pytest.raises(InvalidPartitionsError, match="must be larger"):
        manager.create_partitions("t", 3)


def test_topics_and_configs_survive_restart(dirs, open_manager):
    manager = open_manager(dirs)
    manager.create_topic("clicks", 4, {"retention.ms": 86_400_000, "cleanup.policy": "delete,compact",
                                       "preallocate": True, "min.cleanable.dirty.ratio": 0.25})
    manager.create_topic("views", 1)
    manager.create_topic("gone", 2)
    manager.create_partitions("views", 3)
    manager.alter_topic_config("views", {"segment.bytes": 1 << 20})
    manager.delete_topic("gone")
    ids = {t: manager.describe_topic(t).topic_id for t in manager.list_topics()}
    manager.log("clicks", 3).append_records([b"a", b"b"], keys=[b"1", b"2"])   # compacted: keyed
    manager.close()
    again = open_manager(dirs)
    assert ["clicks", "views"] == again.list_topics()
    assert ids == {t: again.describe_topic(t).topic_id for t in again.list_topics()}
    clicks = again.log("clicks", 0).config
    assert (86_400_000, ("delete", "compact"), True, 0.25) == (
        clicks.retention_ms, clicks.cleanup_policy, clicks.preallocate, clicks.min_cleanable_dirty_ratio)
    assert 3 == len(again.describe_topic("views").partitions)
    assert 1 << 20 == again.log("views", 2).config.segment_bytes
    assert 2 == again.log("clicks", 3).log_end_offset
    with pytest.raises(UnknownTopicOrPartitionError):
        again.log("gone", 0)
    # Every dir holds the same copy of the table.
    tables = [json.loads(read(os.path.join(d, "pylog-topics.json"))) for d in dirs]
    assert all(t == tables[0] for t in tables)


def test_newest_topic_table_copy_wins(dirs, open_manager):
    """A dir that missed changes (an older epoch) is brought up to date."""
    manager = open_manager(dirs)
    manager.create_topic("a", 1)
    stale = read(os.path.join(dirs[2], "pylog-topics.json"))
    manager.create_topic("b", 1)
    manager.close()
    with open(os.path.join(dirs[2], "pylog-topics.json"), "wb") as f:
        f.write(stale)
    again = open_manager(dirs)
    assert ["a", "b"] == again.list_topics()
    assert b'"b"' in read(os.path.join(dirs[2], "pylog-topics.json"))


def test_delete_topic_removes_dirs_after_the_delay(dirs, open_manager, clock):
    manager = open_manager(dirs[:1])
    manager.create_topic("t", 2, {"file.delete.delay.ms": 60_000})
    log = manager.log("t", 0)
    log.append_records([b"x"] * 3)
    slice_ = log.read(0)
    manager.delete_topic("t")
    names = os.listdir(dirs[0])
    assert not any(n.startswith("t-") and n[2:].isdigit() for n in names)
    assert 2 == len([n for n in names if n.endswith("-delete")])
    assert [b"x"] * 3 == [r.value for r in slice_.records()]      # in-flight reader unharmed
    with pytest.raises(UnknownTopicOrPartitionError, match="was deleted"):
        log.append_records([b"y"])
    with pytest.raises(UnknownTopicOrPartitionError):
        manager.log("t", 0)
    clock.advance(60_001)
    manager.run_background_tasks()
    assert not [n for n in os.listdir(dirs[0]) if n.endswith("-delete")]
    manager.create_topic("t", 1)                                   # the name is free again
    assert 0 == manager.log("t", 0).log_end_offset


def test_unfinished_delete_and_strays_are_handled_on_open(dirs, open_manager):
    """A -delete dir left by a crash is removed; a partition dir no topic claims is set aside."""
    manager = open_manager(dirs[:1])
    manager.create_topic("t", 1)
    manager.close()
    os.makedirs(os.path.join(dirs[0], "t-0.0123abcd-delete"))
    os.makedirs(os.path.join(dirs[0], "ghost-0"))
    again = open_manager(dirs[:1])
    names = os.listdir(dirs[0])
    assert "t-0.0123abcd-delete" not in names
    assert "ghost-0" not in names
    assert 1 == len([n for n in names if n.startswith("ghost-0.") and n.endswith("-stray")])
    assert ["t"] == again.list_topics()


def test_adopts_partition_dirs_when_there_is_no_topic_table(dirs, open_manager):
    """A lost topic table (Kafka's own log dirs have none either): topics are rebuilt
    from the partition dirs."""
    manager = open_manager(dirs[:2])
    manager.create_topic("t", 3)
    manager.log("t", 2).append_records([b"x"])
    manager.close()
    for d in dirs[:2]:
        os.remove(os.path.join(d, "pylog-topics.json"))
    again = open_manager(dirs[:2])
    assert ["t"] == again.list_topics()
    assert 1 == again.log("t", 2).log_end_offset


def test_topic_epoch_grows_with_every_topic_change_and_its_cell_follows(dirs, open_manager):
    """topic_epoch grows with each create, add-partitions and delete; the one-item
    cell the producer reads in C (topic_epoch_cell) is the same object throughout
    and always holds the same value, also after a reopen."""
    m = open_manager(dirs)
    cell = m.topic_epoch_cell
    seen = [m.topic_epoch]
    for change in (lambda: m.create_topic("a", 1), lambda: m.create_partitions("a", 2),
                   lambda: m.delete_topic("a")):
        change()
        assert m.topic_epoch > seen[-1]
        assert m.topic_epoch_cell is cell and cell[0] == m.topic_epoch
        seen.append(m.topic_epoch)
    m.close()
    reopened = open_manager(dirs)
    assert reopened.topic_epoch_cell[0] == reopened.topic_epoch == seen[-1]
