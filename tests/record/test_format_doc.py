"""docs/FORMAT.md's worked examples are true.

FORMAT.md marks each worked example with two HTML comments:

    <!-- format-example: NAME -->       followed by a ```python block that
                                        sets ``batch`` (the call that is documented)
    <!-- format-example-hex: NAME -->   followed by a ```text block: the
                                        annotated hex dump of ``batch``

A dump line is ``POS  HEX HEX ...  annotation``: POS is the decimal position
of the first byte, bytes are two hex digits separated by single spaces, and
the annotation follows at least two spaces. Lines starting with ``#`` are
comments. Any other line is an error, and so is a POS that does not equal
the number of bytes before it, so a mistyped dump cannot pass by being
skipped.

The tests check each dump three ways: against pylog's encoder (running the
documented call), against an independent reader (kafka-python's
DefaultRecordBatch), and against an independent CRC-32C (the ``crc32c``
package), including the claims about which bytes the CRC covers.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import crc32c
import pytest

with warnings.catch_warnings():
    # kafka-python's package import uses importlib.resources.open_text, which
    # warns from importlib (not from kafka.*, which pyproject already ignores).
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch

from pylog import records

DOC = Path(__file__).resolve().parents[2] / "docs" / "FORMAT.md"

_LINE = re.compile(r"^(\d+)  ([0-9a-f]{2}(?: [0-9a-f]{2})*)(?: {2,}(.*))?$")
_ANNOTATION = re.compile(r"^([A-Za-z]+) = (-?(?:0x[0-9a-fA-F]+|\d+))\b")


def _fenced_after(text: str, marker: str, language: str) -> str:
    """The body of the first ```language block after the marker comment."""
    start = text.find(marker)
    if start < 0:
        raise LookupError(f"{marker!r} not found in {DOC}")
    match = re.compile(r"```" + language + r"\n(.*?)\n```", re.S).search(text, start)
    if match is None:
        raise LookupError(f"no ```{language} block after {marker!r}")
    return match.group(1)


def parse_dump(block: str) -> tuple[bytes, list[tuple[int, bytes, str]]]:
    """Bytes and (position, bytes, annotation) lines of an annotated hex dump."""
    data = bytearray()
    lines = []
    for number, line in enumerate(block.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise ValueError(f"dump line {number} is not 'POS  HEX ...  annotation': {line!r}")
        position = int(match.group(1))
        if position != len(data):
            raise ValueError(f"dump line {number} says position {position}, "
                             f"but {len(data)} bytes precede it")
        chunk = bytes.fromhex(match.group(2))
        lines.append((position, chunk, match.group(3) or ""))
        data += chunk
    return bytes(data), lines


def load_example(name: str, text: str | None = None) -> tuple[bytes, bytes, list]:
    """(bytes the documented call returns, bytes of the dump, dump lines)."""
    text = DOC.read_text(encoding="utf-8") if text is None else text
    code = _fenced_after(text, f"<!-- format-example: {name} -->", "python")
    dump = _fenced_after(text, f"<!-- format-example-hex: {name} -->", "text")
    namespace: dict = {}
    exec(compile(code, f"{DOC}:{name}", "exec"), namespace)  # noqa: S102 - our own doc
    documented, lines = parse_dump(dump)
    return namespace["batch"], documented, lines


def header_annotations(lines) -> dict[str, int]:
    """``field = value`` annotations of the 61-byte header lines."""
    out = {}
    for position, _chunk, note in lines:
        match = _ANNOTATION.match(note)
        if position < records.RECORD_BATCH_OVERHEAD and match:
            out[match.group(1)] = int(match.group(2), 0)
    return out


def kafka_python_header(batch: DefaultRecordBatch) -> dict[str, int]:
    """The header fields as kafka-python reads them, under FORMAT.md's names."""
    return {
        "baseOffset": batch.base_offset,
        "length": batch.size_in_bytes - records.LOG_OVERHEAD,
        "partitionLeaderEpoch": batch.leader_epoch,
        "magic": batch.magic,
        "crc": batch.crc,
        "attributes": batch.attributes,
        "lastOffsetDelta": batch.last_offset_delta,
        "baseTimestamp": batch.first_timestamp,
        "maxTimestamp": batch.max_timestamp,
        "producerId": batch.producer_id,
        "producerEpoch": batch.producer_epoch,
        "baseSequence": batch.base_sequence,
        "recordsCount": batch.records_count,
    }


HEADER_FIELDS = ["baseOffset", "length", "partitionLeaderEpoch", "magic", "crc", "attributes",
                 "lastOffsetDelta", "baseTimestamp", "maxTimestamp", "producerId",
                 "producerEpoch", "baseSequence", "recordsCount"]


@pytest.mark.parametrize("name", ["batch", "control"])
class TestWorkedExample:
    def test_dump_is_what_the_encoder_writes(self, name):
        """The hex dump equals the bytes of the documented call, byte for byte."""
        encoded, documented, _ = load_example(name)
        assert encoded.hex(" ") == documented.hex(" ")

    def test_header_annotations_match_kafka_python(self, name):
        """Every header field is annotated once, with the value kafka-python reads."""
        _, documented, lines = load_example(name)
        annotated = header_annotations(lines)
        assert HEADER_FIELDS == list(annotated)
        assert kafka_python_header(DefaultRecordBatch(documented)) == annotated

    def test_header_lines_sit_at_the_documented_positions(self, name):
        """Field positions in the dump are those of section 2's table."""
        _, _, lines = load_example(name)
        positions = {_ANNOTATION.match(note).group(1): (pos, len(chunk))
                     for pos, chunk, note in lines if _ANNOTATION.match(note) and pos < 61}
        expected = {"baseOffset": (0, 8), "length": (8, 4), "partitionLeaderEpoch": (12, 4),
                    "magic": (16, 1), "crc": (17, 4), "attributes": (21, 2),
                    "lastOffsetDelta": (23, 4), "baseTimestamp": (27, 8),
                    "maxTimestamp": (35, 8), "producerId": (43, 8), "producerEpoch": (51, 2),
                    "baseSequence": (53, 4), "recordsCount": (57, 4)}
        assert expected == positions

    def test_crc_is_crc32c_of_bytes_21_to_end(self, name):
        """The stored CRC is the plain CRC-32C of attributes..end (an independent CRC)."""
        _, documented, _ = load_example(name)
        assert int.from_bytes(documented[17:21], "big") == crc32c.crc32c(documented[21:])
        assert DefaultRecordBatch(documented).validate_crc()

    def test_crc_does_not_cover_bytes_0_to_20(self, name):
        """baseOffset, length, partitionLeaderEpoch and magic can change under a valid CRC;
        any byte from 21 on cannot."""
        _, documented, _ = load_example(name)
        # baseOffset (0-7) and partitionLeaderEpoch (12-15): a flip leaves a batch that
        # both kafka-python's and pylog's CRC checks accept. (length and magic change
        # the framing itself, so they are not flipped here.)
        for position in list(range(0, 8)) + list(range(12, 16)):
            changed = bytearray(documented)
            changed[position] ^= 0x01
            assert DefaultRecordBatch(bytes(changed)).validate_crc(), position
            (batch,) = records.iter_batches(bytes(changed))       # validates the CRC
            assert batch.base_offset == int.from_bytes(changed[0:8], "big", signed=True)
        for position in range(21, len(documented)):
            changed = bytearray(documented)
            changed[position] ^= 0x01
            assert not DefaultRecordBatch(bytes(changed)).validate_crc(), position


def test_batch_example_decodes_to_the_documented_records():
    """kafka-python and pylog both read section 3's table of records from the dump."""
    _, documented, _ = load_example("batch")
    expected = [
        (0, 1700000000000, b"k", b"hello", [("h", b"v")]),
        (1, 1700000000001, None, None, []),
    ]
    kafka = DefaultRecordBatch(documented)
    assert not kafka.is_control_batch
    assert expected == [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in kafka]
    ours = [r for batch in records.iter_batches(documented) for r in batch.records()]
    assert expected == [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in ours]


def test_control_example_decodes_to_a_commit_marker():
    """The control example is a transactional control batch holding a commit marker."""
    _, documented, _ = load_example("control")
    kafka = DefaultRecordBatch(documented)
    assert kafka.is_control_batch and kafka.is_transactional
    assert [(10, b"\x00\x00\x00\x01", b"\x00\x00\x00\x00\x00\x03")] == \
        [(r.offset, r.key, r.value) for r in kafka]
    (batch,) = records.iter_batches(documented)
    assert "commit" == batch.control_type


class TestTheCheckCanFail:
    """The parser and comparisons above reject a doc that is wrong."""

    def _doc_with(self, old: str, new: str) -> str:
        text = DOC.read_text(encoding="utf-8")
        assert old in text
        return text.replace(old, new, 1)

    def test_a_changed_byte_no_longer_matches(self):
        """Flipping one byte of the dump makes it differ from the encoder."""
        text = self._doc_with("073  02                       headerCount",
                              "073  03                       headerCount")
        encoded, documented, _ = load_example("batch", text)
        assert encoded != documented

    def test_a_wrong_position_is_an_error(self):
        """A position that does not match the bytes before it is rejected."""
        text = self._doc_with("084  00", "085  00")
        with pytest.raises(ValueError, match="says position 85"):
            load_example("batch", text)

    def test_a_malformed_line_is_an_error(self):
        """A line that is neither a comment nor a dump line is rejected, not skipped."""
        text = self._doc_with("061  20 ", "061 20  ")
        with pytest.raises(ValueError, match="is not 'POS  HEX"):
            load_example("batch", text)

    def test_a_wrong_annotation_disagrees_with_kafka_python(self):
        """An annotated value that is not what the bytes say fails the header check."""
        text = self._doc_with("recordsCount = 2", "recordsCount = 3")
        _, documented, lines = load_example("batch", text)
        assert kafka_python_header(DefaultRecordBatch(documented)) != header_annotations(lines)
