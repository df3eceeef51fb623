#!/usr/bin/env python3
"""Generates pylog's table of Kafka's error codes from Kafka's own ``Errors`` enum.

    python tools/error_codes_codegen.py          # writes src/pylog/error_codes.py
    python tools/error_codes_codegen.py --check  # exit 1 if the committed file is stale,
                                                 # 3 if Kafka's jar cannot be had

Source: ``org/apache/kafka/common/protocol/Errors.class`` in the kafka-clients jar that
tools/protocol_codegen.py pins (KAFKA_VERSION, fetched and sha256-checked there). Errors is
compiled Java, so this reads the class file: each enum constant is built in the static
initializer as ``new Errors(NAME, ordinal, code, message, SomeException::new)``, and the
bytecode of that call is read back instruction by instruction (a shape it does not expect
stops the generator rather than guessing). ``retriable`` is Kafka's too: the exception
class of the constructor reference derives from ``RetriableException`` (its superclasses
are read from the same jar).
"""

from __future__ import annotations

import argparse
import struct
import sys
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import protocol_codegen  # noqa: E402  (the jar pin and its fetching)

ROOT = protocol_codegen.ROOT
OUT = ROOT / "src" / "pylog" / "error_codes.py"
ERRORS_CLASS = "org/apache/kafka/common/protocol/Errors"
RETRIABLE = "org/apache/kafka/common/errors/RetriableException"


class ClassFile:
    """The parts of a JVM class file this needs: constant pool, super class, methods'
    code, bootstrap methods (JVM spec, chapter 4)."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 10
        count = self.u2(8)
        self.pool: list = [None] * count
        i = 1
        while i < count:
            tag = data[self.pos]
            self.pos += 1
            if tag == 1:                                    # Utf8
                n = self.u2()
                self.pool[i] = ("utf8", data[self.pos:self.pos + n].decode("utf-8", "replace"))
                self.pos += n
            elif tag in (3, 4):                             # Integer, Float
                self.pool[i] = ("int", struct.unpack_from(">i", data, self.pos)[0])
                self.pos += 4
            elif tag in (5, 6):                             # Long, Double: two slots
                self.pos += 8
                i += 1
            elif tag in (7, 8, 16, 19, 20):                 # Class, String, MethodType, Module, Package
                self.pool[i] = ({7: "class", 8: "string"}.get(tag, "other"), self.u2())
            elif tag == 15:                                 # MethodHandle: kind, reference
                kind = data[self.pos]
                self.pos += 1
                self.pool[i] = ("handle", kind, self.u2())
            elif tag in (9, 10, 11, 12, 17, 18):            # refs, NameAndType, (Invoke)Dynamic
                self.pool[i] = ("pair", self.u2(), self.u2())
            else:
                raise SystemExit(f"error_codes_codegen: constant pool tag {tag} unknown")
            i += 1
        self.pos += 2                                       # access flags
        self.this, self.super = self.u2(), self.u2()
        interfaces = self.u2()
        self.pos += 2 * interfaces
        for _ in range(self.u2()):                          # fields
            self.pos += 6
            self.attributes()
        self.code: dict[str, bytes] = {}
        for _ in range(self.u2()):                          # methods
            self.pos += 2
            name = self.utf8(self.u2())
            self.pos += 2
            attrs = self.attributes()
            if "Code" in attrs:
                body = attrs["Code"]
                n = struct.unpack_from(">I", body, 4)[0]
                self.code[name] = body[8:8 + n]
        attrs = self.attributes()
        self.bootstrap: list[tuple[int, list[int]]] = []
        if "BootstrapMethods" in attrs:
            b, p = attrs["BootstrapMethods"], 2
            for _ in range(struct.unpack_from(">H", b, 0)[0]):
                ref, n = struct.unpack_from(">HH", b, p)
                self.bootstrap.append((ref, list(struct.unpack_from(f">{n}H", b, p + 4))))
                p += 4 + 2 * n

    def u2(self, at: int | None = None) -> int:
        if at is not None:
            self.pos = at
        v = struct.unpack_from(">H", self.data, self.pos)[0]
        self.pos += 2
        return v

    def attributes(self) -> dict[str, bytes]:
        out = {}
        for _ in range(self.u2()):
            name = self.utf8(self.u2())
            n = struct.unpack_from(">I", self.data, self.pos)[0]
            out[name] = self.data[self.pos + 4:self.pos + 4 + n]
            self.pos += 4 + n
        return out

    def utf8(self, i: int) -> str:
        return self.pool[i][1]

    def class_name(self, i: int) -> str:
        return self.utf8(self.pool[i][1])

    def constructed_class(self, indy: int) -> str | None:
        """The class ``X`` of the ``X::new`` an invokedynamic constant stands for (None
        for a lambda: NONE's ``message -> null``)."""
        bsm = self.bootstrap[self.pool[indy][1]]
        for arg in bsm[1]:
            entry = self.pool[arg]
            if entry[0] == "handle" and entry[1] == 8:      # REF_newInvokeSpecial
                return self.class_name(self.pool[entry[2]][1])
        return None


def read_errors(jar: Path) -> list[tuple[str, int, str | None, bool]]:
    """(name, code, message, retriable) of every constant of Kafka's Errors, in order."""
    with zipfile.ZipFile(jar) as z:
        cls = ClassFile(z.read(ERRORS_CLASS + ".class"))

        def retriable(name: str | None) -> bool:
            while name is not None and name != "java/lang/Object":
                if name == RETRIABLE:
                    return True
                c = ClassFile(z.read(name + ".class")) if name.startswith("org/apache/kafka/") else None
                if c is None:
                    return False
                name = c.class_name(c.super)
            return False

        code, pc, stack, out, lambdas = cls.code["<clinit>"], 0, [], [], set()
        while pc < len(code):
            op = code[pc]
            if op == 0xBB:                                  # new
                stack, pc = [], pc + 3
            elif op == 0x59:                                # dup
                pc += 1
            elif 0x02 <= op <= 0x08:                        # iconst_m1 .. iconst_5
                stack.append(op - 3)
                pc += 1
            elif op == 0x10:                                # bipush
                stack.append(struct.unpack_from(">b", code, pc + 1)[0])
                pc += 2
            elif op == 0x11:                                # sipush
                stack.append(struct.unpack_from(">h", code, pc + 1)[0])
                pc += 3
            elif op in (0x12, 0x13):                        # ldc, ldc_w
                i = code[pc + 1] if op == 0x12 else struct.unpack_from(">H", code, pc + 1)[0]
                entry = cls.pool[i]
                stack.append(cls.utf8(entry[1]) if entry[0] == "string" else entry[1])
                pc += 2 if op == 0x12 else 3
            elif op == 0x01:                                # aconst_null
                stack.append(None)
                pc += 1
            elif op == 0xBA:                                # invokedynamic: Foo::new
                exc = cls.constructed_class(struct.unpack_from(">H", code, pc + 1)[0])
                stack.append(("new", exc))
                if exc is None:
                    lambdas.add(stack[0])
                pc += 5
            elif op == 0xB7:                                # invokespecial Errors.<init>
                if len(stack) != 5 or not isinstance(stack[0], str) or stack[4][0] != "new":
                    raise SystemExit(f"error_codes_codegen: unexpected constructor arguments {stack}")
                name, _ordinal, value, message, (_, exc) = stack
                out.append((name, value, message, retriable(exc)))
                pc += 3
            elif op == 0xB3:                                # putstatic
                pc += 3
            else:                                           # past the constants ($VALUES ...)
                break
    if len(out) < 100 or out[0][0] != "UNKNOWN_SERVER_ERROR" or out[1] != ("NONE", 0, None, False) \
            or [r for r in out[2:] if r[0] in lambdas]:
        raise SystemExit(f"error_codes_codegen: {ERRORS_CLASS} read wrong: {out[:3]}")
    return out


def generate() -> str:
    jar = protocol_codegen.clients_jar(protocol_codegen.KAFKA_VERSION)
    rows = read_errors(jar)
    lines = [
        f'"""Kafka\'s error codes (Errors.java of Kafka {protocol_codegen.KAFKA_VERSION}). GENERATED by',
        "tools/error_codes_codegen.py from the kafka-clients jar: do not edit; run the generator",
        "(a test fails when this is stale).",
        "",
        "``ErrorCode`` is the number a response's ``error_code`` field carries, under Kafka's",
        "name; ``ERROR_INFO`` holds, per code, Kafka's default message and whether Kafka's",
        'exception for it is retriable (derives from RetriableException)."""',
        "",
        "# ruff: noqa: E501",
        "",
        "from __future__ import annotations",
        "",
        "from enum import IntEnum",
        "from typing import NamedTuple",
        "",
        '__all__ = ["ErrorCode", "ErrorInfo", "ERROR_INFO"]',
        "",
        "",
        "class ErrorCode(IntEnum):",
        '    """Kafka\'s error codes by Kafka\'s names (``ErrorCode.NOT_LEADER_OR_FOLLOWER == 6``)."""',
        "",
    ]
    lines += [f"    {name} = {value}" for name, value, _, _ in rows]
    lines += [
        "",
        "",
        "class ErrorInfo(NamedTuple):",
        "    message: str | None",
        "    retriable: bool",
        "",
        "",
        "ERROR_INFO: dict[ErrorCode, ErrorInfo] = {",
    ]
    lines += [f"    ErrorCode.{name}: ErrorInfo({message!r}, {retriable}),"
              for name, _, message, retriable in rows]
    lines += ["}", ""]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed file is stale")
    args = ap.parse_args()
    try:
        text = generate()
    except protocol_codegen.SchemasUnavailable as e:
        print(f"error_codes_codegen: Kafka's kafka-clients jar: {e}", file=sys.stderr)
        return protocol_codegen.SCHEMAS_UNAVAILABLE
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run python tools/error_codes_codegen.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
