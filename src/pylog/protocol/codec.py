"""The primitives of Kafka's wire format, for the generated messages (messages.py).

Non-flexible versions: strings have an int16 length, bytes and arrays an int32 one,
-1 meaning null. Flexible versions (KIP-482): lengths are ``uvarint(n + 1)`` with 0
meaning null, and every struct ends with a block of tagged fields.

:class:`Reader` works over one request's buffer. It never allocates what a length
claims before checking that many bytes remain, so a hostile length costs nothing; a
short or inconsistent body raises :class:`MalformedMessageError` naming the byte.
``records`` are zero-copy memoryviews of the request.

A length check alone does not bound what a request costs: a 4 MB frame holds 2 million
one-byte array elements, each a Python object of ~100-300 bytes once decoded and
answered. So a Reader has an element budget (``max_elements``): every array element and
tagged field of the message is charged against it when its count is read, *before*
anything is allocated for them, and a count past the budget raises
:class:`TooManyElementsError` (the broker's ``pylog.request.max.elements``).

:class:`Writer` builds a response as a list of parts: bytes, and file regions
(objects with ``size`` and ``send_to``, e.g. pylog's FileSlice) that the connection
sends with sendfile(2) between them: Kafka's SendBuilder/MultiRecordsSend.
"""

from __future__ import annotations

import struct

from pylog.common.varint import uvarint_bytes
from pylog.errors import PylogError

__all__ = ["MalformedMessageError", "Reader", "Struct", "TooManyElementsError", "Writer", "ZERO_UUID",
           "uvarint_bytes"]

ZERO_UUID = b"\x00" * 16

_i8 = struct.Struct(">b")
_u8 = struct.Struct(">B")
_i16 = struct.Struct(">h")
_u16 = struct.Struct(">H")
_i32 = struct.Struct(">i")
_u32 = struct.Struct(">I")
_i64 = struct.Struct(">q")
_f64 = struct.Struct(">d")


class MalformedMessageError(PylogError, ValueError):
    """A request body that does not parse as the version its header names."""


class TooManyElementsError(MalformedMessageError):
    """A message whose arrays (and tagged fields) hold more elements than the reader's
    budget: refused when the count that crosses it is read, before it is allocated."""

    def __init__(self, what: str, count: int, pos: int, used: int, budget: int) -> None:
        super().__init__(f"{what} of {count} elements at byte {pos} takes the message past "
                         f"{budget} elements ({used} before it)")
        self.count = count
        self.used = used              # elements decoded before this array
        self.budget = budget

    @property
    def needed(self) -> int:
        """At least this many elements: the request's size on the budget's scale."""
        return self.used + self.count


class Struct:
    """Base of the generated message classes: keyword construction with Kafka's
    defaults (``_FIELDS``: (name, default)), equality and repr for tests and logs."""

    __slots__ = ()
    _FIELDS: tuple = ()

    def __init__(self, **values) -> None:
        for name, default in self._FIELDS:
            if name in values:
                setattr(self, name, values.pop(name))
            elif isinstance(default, (list, Struct)):
                setattr(self, name, type(default)())     # a fresh one: defaults are shared
            else:
                setattr(self, name, default)
        if values:
            raise TypeError(f"{type(self).__name__} has no field(s) {sorted(values)}")

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and all(
            getattr(self, n) == getattr(other, n) for n, _ in self._FIELDS)

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}={getattr(self, n)!r}" for n, _ in self._FIELDS)
        return f"{type(self).__name__}({inner})"

    def encode(self, version: int) -> bytes:
        """This struct alone as bytes (tests, consumer protocol data)."""
        w = Writer()
        self.write(w, version)
        return w.getvalue()

    @classmethod
    def decode(cls, data, version: int):
        return cls.read(Reader(data), version)


class Reader:
    """Reads Kafka primitives from a buffer, from ``pos`` (checked against ``end``),
    decoding at most ``max_elements`` array elements and tagged fields in all."""

    __slots__ = ("buf", "pos", "end", "left", "max_elements")

    def __init__(self, data, pos: int = 0, end: int | None = None,
                 max_elements: int | None = None) -> None:
        self.buf = memoryview(data).cast("B") if not isinstance(data, memoryview) else data
        self.pos = pos
        self.end = len(self.buf) if end is None else end
        self.max_elements = (1 << 62) if max_elements is None else max_elements
        self.left = self.max_elements          # elements this message may still decode

    def remaining(self) -> int:
        return self.end - self.pos

    def _need(self, n: int, what: str) -> int:
        pos = self.pos
        if n < 0 or pos + n > self.end:
            raise MalformedMessageError(
                f"{what} of {n} bytes at byte {pos} runs past the end of the message "
                f"({self.end} bytes)" if n >= 0 else f"negative length {n} for {what} at byte {pos}")
        self.pos = pos + n
        return pos

    def int8(self) -> int:
        return _i8.unpack_from(self.buf, self._need(1, "int8"))[0]

    def bool(self) -> bool:
        return _i8.unpack_from(self.buf, self._need(1, "bool"))[0] != 0

    def int16(self) -> int:
        return _i16.unpack_from(self.buf, self._need(2, "int16"))[0]

    def uint16(self) -> int:
        return _u16.unpack_from(self.buf, self._need(2, "uint16"))[0]

    def int32(self) -> int:
        return _i32.unpack_from(self.buf, self._need(4, "int32"))[0]

    def uint32(self) -> int:
        return _u32.unpack_from(self.buf, self._need(4, "uint32"))[0]

    def int64(self) -> int:
        return _i64.unpack_from(self.buf, self._need(8, "int64"))[0]

    def float64(self) -> float:
        return _f64.unpack_from(self.buf, self._need(8, "float64"))[0]

    def uuid(self) -> bytes:
        p = self._need(16, "uuid")
        return bytes(self.buf[p:p + 16])

    def uvarint(self) -> int:
        value = shift = 0
        buf, pos, end = self.buf, self.pos, self.end
        while True:
            if pos >= end:
                raise MalformedMessageError(f"varint at byte {self.pos} runs past the end of the message")
            b = buf[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                break
            shift += 7
            if shift > 28:
                raise MalformedMessageError(f"varint at byte {self.pos} is longer than 5 bytes")
        self.pos = pos
        return value

    def _length(self, flex: bool, wide: bool) -> int:
        """A length prefix: -1 for null."""
        if flex:
            return self.uvarint() - 1
        return self.int32() if wide else self.int16()

    def string(self, flex: bool, nullable: bool = False) -> str | None:
        n = self._length(flex, False)
        if n < 0:
            if nullable and n == -1:
                return None
            raise MalformedMessageError(f"null or negative-length string at byte {self.pos}")
        p = self._need(n, "string")
        try:
            return str(self.buf[p:p + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise MalformedMessageError(f"string at byte {p} is not UTF-8: {exc}") from None

    def bytes(self, flex: bool, nullable: bool = False) -> bytes | None:
        n = self._length(flex, True)
        if n < 0:
            if nullable and n == -1:
                return None
            raise MalformedMessageError(f"null or negative-length bytes at byte {self.pos}")
        p = self._need(n, "bytes")
        return bytes(self.buf[p:p + n])

    def records(self, flex: bool, nullable: bool = False) -> memoryview | None:
        n = self._length(flex, True)
        if n < 0:
            if nullable and n == -1:
                return None
            raise MalformedMessageError(f"null or negative-length records at byte {self.pos}")
        p = self._need(n, "records")
        return self.buf[p:p + n]

    def _count(self, flex: bool, nullable: bool) -> int:
        n = self._length(flex, True)
        if n < 0:
            if nullable and n == -1:
                return -1
            raise MalformedMessageError(f"null or negative-length array at byte {self.pos}")
        if n > self.end - self.pos:      # every element takes at least one byte
            raise MalformedMessageError(f"array of {n} elements at byte {self.pos} cannot fit in "
                                        f"the {self.end - self.pos} bytes left")
        self._charge(n, "array")
        return n

    def _charge(self, n: int, what: str) -> None:
        """Takes `n` elements from the budget (before they are decoded)."""
        if n > self.left:
            raise TooManyElementsError(what, n, self.pos, self.max_elements - self.left,
                                       self.max_elements)
        self.left -= n

    def array(self, flex: bool, read_one, nullable: bool = False) -> list | None:
        n = self._count(flex, nullable)
        return None if n < 0 else [read_one() for _ in range(n)]

    def struct_array(self, flex: bool, cls, version: int, nullable: bool = False) -> list | None:
        n = self._count(flex, nullable)
        return None if n < 0 else [cls.read(self, version) for _ in range(n)]

    def tagged_fields(self):
        """Yields (tag, Reader over the field) for each tagged field. The field's
        reader spends this reader's element budget."""
        count = self.uvarint()
        self._charge(count, "tagged fields")
        for _ in range(count):
            tag = self.uvarint()
            size = self.uvarint()
            p = self._need(size, "tagged field")
            sub = Reader(self.buf, p, p + size)
            sub.max_elements, sub.left = self.max_elements, self.left
            yield tag, sub
            self.left = sub.left

    def skip_tagged_fields(self) -> None:
        for _ in self.tagged_fields():
            pass


_SMALL_UVARINTS = [uvarint_bytes(i) for i in range(128)]


class Writer:
    """Builds a message: bytes in ``buf``, file regions as separate parts."""

    __slots__ = ("buf", "_parts")

    def __init__(self) -> None:
        self.buf = bytearray()
        self._parts: list = []

    def sub(self) -> Writer:
        return Writer()

    def int8(self, v: int) -> None:
        self.buf += _i8.pack(v)

    def bool(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def int16(self, v: int) -> None:
        self.buf += _i16.pack(v)

    def uint16(self, v: int) -> None:
        self.buf += _u16.pack(v)

    def int32(self, v: int) -> None:
        self.buf += _i32.pack(v)

    def uint32(self, v: int) -> None:
        self.buf += _u32.pack(v)

    def int64(self, v: int) -> None:
        self.buf += _i64.pack(v)

    def float64(self, v: float) -> None:
        self.buf += _f64.pack(v)

    def uuid(self, v: bytes) -> None:
        if len(v) != 16:
            raise ValueError(f"a uuid is 16 bytes, not {len(v)}")
        self.buf += v

    def uvarint(self, n: int) -> None:
        self.buf += _SMALL_UVARINTS[n] if n < 128 else uvarint_bytes(n)

    def _length(self, n: int, flex: bool, wide: bool) -> None:
        if flex:
            self.uvarint(n + 1)
        elif wide:
            self.buf += _i32.pack(n)
        else:
            self.buf += _i16.pack(n)

    def string(self, v: str | None, flex: bool) -> None:
        if v is None:
            self._length(-1, flex, False)
            return
        data = v.encode()
        self._length(len(data), flex, False)
        self.buf += data

    def bytes(self, v, flex: bool) -> None:
        if v is None:
            self._length(-1, flex, True)
            return
        self._length(len(v), flex, True)
        self.buf += v

    def records(self, v, flex: bool) -> None:
        """Record batches: bytes-like (copied in) or a file region (sent with sendfile)."""
        if v is None:
            self._length(-1, flex, True)
            return
        if isinstance(v, (bytes, bytearray, memoryview)):
            self._length(len(v), flex, True)
            self.buf += v
            return
        self._length(v.size, flex, True)
        if v.size:
            self._parts.append(self.buf)
            self._parts.append(v)
            self.buf = bytearray()

    def array(self, items, flex: bool, write_one) -> None:
        if items is None:
            self._length(-1, flex, True)
            return
        self._length(len(items), flex, True)
        for item in items:
            write_one(item)

    def struct_array(self, items, flex: bool, version: int) -> None:
        if items is None:
            self._length(-1, flex, True)
            return
        self._length(len(items), flex, True)
        for item in items:
            item.write(self, version)

    def nullable_struct(self, value, version: int) -> None:
        if value is None:
            self.int8(-1)
        else:
            self.int8(1)
            value.write(self, version)

    def empty_tagged_fields(self) -> None:
        self.buf.append(0)

    def tagged_fields(self, tags: list[tuple[int, Writer]]) -> None:
        self.uvarint(len(tags))
        for tag, sub in tags:
            data = sub.getvalue()
            self.uvarint(tag)
            self.uvarint(len(data))
            self.buf += data

    def getvalue(self) -> bytes:
        if self._parts:
            raise ValueError("a message holding file regions has no single bytes value: use parts()")
        return bytes(self.buf)

    def parts(self) -> list:
        """The message as bytes and file regions, in order."""
        return [*self._parts, self.buf] if self._parts else [self.buf]

    def size(self) -> int:
        return sum(len(p) if isinstance(p, (bytes, bytearray)) else p.size for p in self._parts) \
            + len(self.buf)
