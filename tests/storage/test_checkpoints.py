"""Kafka's log-dir files, byte for byte: offset checkpoints, the clean-shutdown
marker, meta.properties, partition.metadata (docs/FORMAT.md, section 11)."""

import os

import pytest

from pylog.errors import CorruptCheckpointError
from pylog.storage import checkpoints, files


def read(path):
    with open(path, "rb") as f:
        return f.read()


class TestOffsetCheckpoint:
    def test_bytes_are_kafkas_format(self, tmp_path):
        """Version line, count line, then 'topic partition offset' lines, sorted, LF-terminated."""
        path = str(tmp_path / files.RECOVERY_POINT_CHECKPOINT_FILE)
        checkpoints.write_offset_checkpoint(path, {("clicks", 3): 98765, ("clicks", 0): 170210,
                                                   ("a.b_c-d", 10): 0})
        assert b"0\n3\na.b_c-d 10 0\nclicks 0 170210\nclicks 3 98765\n" == read(path)

    def test_empty_checkpoint(self, tmp_path):
        path = str(tmp_path / "cp")
        checkpoints.write_offset_checkpoint(path, {})
        assert b"0\n0\n" == read(path)
        assert {} == checkpoints.read_offset_checkpoint(path)

    def test_round_trip_and_no_tmp_left(self, tmp_path):
        path = str(tmp_path / "cp")
        entries = {("t", p): p * 1000 for p in range(100)}
        checkpoints.write_offset_checkpoint(path, entries)
        assert entries == checkpoints.read_offset_checkpoint(path)
        assert ["cp"] == os.listdir(tmp_path)

    def test_reads_entries_in_any_order(self, tmp_path):
        """Kafka's writer (CheckpointFile) iterates a hash map, so entries come in any
        order; these bytes are written by hand in that layout (not by Kafka)."""
        path = tmp_path / "cp"
        path.write_bytes(b"0\n2\nclicks 3 98765\nclicks 0 170210\n")
        assert {("clicks", 3): 98765, ("clicks", 0): 170210} == checkpoints.read_offset_checkpoint(str(path))

    def test_missing_file_is_empty(self, tmp_path):
        assert {} == checkpoints.read_offset_checkpoint(str(tmp_path / "nope"))

    @pytest.mark.parametrize("content, words", [
        (b"1\n0\n", "version"),
        (b"0\n2\nt 0 1\n", "says 2 entries but has 1"),
        (b"0\n1\nt 0 1\nt 1 2\n", "says 1 entries but has 2"),
        (b"0\n1\nt 0\n", "line 3"),
        (b"0\n1\nt x 1\n", "non-numeric"),
        (b"0\n", "truncated"),
        (b"0\nmany\n", "not a number"),
    ])
    def test_reader_rejects_bad_files(self, tmp_path, content, words):
        """A wrong version, a short line or a count that does not match is an error naming the file."""
        path = tmp_path / "cp"
        path.write_bytes(content)
        with pytest.raises(CorruptCheckpointError) as err:
            checkpoints.read_offset_checkpoint(str(path))
        assert words in str(err.value) and str(path) in str(err.value)


def test_clean_shutdown_marker_bytes(tmp_path):
    """Kafka's CleanShutdownFileHandler content; deleting it is durable and idempotent."""
    checkpoints.write_clean_shutdown(str(tmp_path))
    assert b'{"version":0,"brokerEpoch":-1}' == read(tmp_path / ".kafka_cleanshutdown")
    assert checkpoints.read_clean_shutdown(str(tmp_path))
    checkpoints.delete_clean_shutdown(str(tmp_path))
    checkpoints.delete_clean_shutdown(str(tmp_path))
    assert not checkpoints.read_clean_shutdown(str(tmp_path))


def test_meta_properties_round_trip(tmp_path):
    """KRaft v1 keys; a Kafka v0 file (broker.id) reads too."""
    meta = checkpoints.MetaProperties("IDt_PTCIQv6nxyra_CMU3A", 3, "6l2-3z-ASIuNNXGkk5ULRA")
    meta.write(str(tmp_path))
    text = read(tmp_path / "meta.properties").decode()
    assert text.startswith("#\n#")
    lines = text.splitlines()[2:]
    assert ["version=1", "cluster.id=IDt_PTCIQv6nxyra_CMU3A", "node.id=3",
            "directory.id=6l2-3z-ASIuNNXGkk5ULRA"] == lines
    back = checkpoints.MetaProperties.read(str(tmp_path))
    assert ("IDt_PTCIQv6nxyra_CMU3A", 3, "6l2-3z-ASIuNNXGkk5ULRA") == (
        back.cluster_id, back.node_id, back.directory_id)
    (tmp_path / "meta.properties").write_text("#\nversion=0\nbroker.id=7\ncluster.id=abc\n")
    assert 7 == checkpoints.MetaProperties.read(str(tmp_path)).node_id


def test_partition_metadata_bytes(tmp_path):
    checkpoints.write_partition_metadata(str(tmp_path), "vcnz1j1fRtSUB8yuJdPQfA")
    assert b"version: 0\ntopic_id: vcnz1j1fRtSUB8yuJdPQfA\n" == read(tmp_path / "partition.metadata")
    assert "vcnz1j1fRtSUB8yuJdPQfA" == checkpoints.read_partition_metadata(str(tmp_path))


def test_random_uuid_looks_like_kafkas():
    """22 characters of URL-safe base64, never starting with '-'."""
    ids = {checkpoints.random_uuid() for _ in range(200)}
    assert 200 == len(ids)
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)


def test_atomic_write_over_a_stale_longer_tmp_leaves_exactly_the_new_bytes(tmp_path):
    """A crash can leave ``<file>.tmp`` behind, longer than the next content: the
    next write must truncate it (a cosmic-ray survivor without O_TRUNC)."""
    path = str(tmp_path / "state")
    with open(path + ".tmp", "wb") as f:
        f.write(b"x" * 10_000)
    files.write_file_atomically(path, b"new\n")
    with open(path, "rb") as f:
        assert f.read() == b"new\n"
    assert not os.path.exists(path + ".tmp")
    umask = os.umask(0)
    os.umask(umask)
    fresh = str(tmp_path / "fresh")
    files.write_file_atomically(fresh, b"x")
    assert os.stat(fresh).st_mode & 0o777 == 0o644 & ~umask       # Kafka's mode
