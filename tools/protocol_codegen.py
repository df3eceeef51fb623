#!/usr/bin/env python3
"""Generates pylog's Kafka protocol codec from Kafka's JSON message definitions.

    python tools/protocol_codegen.py          # writes src/pylog/protocol/messages.py
    python tools/protocol_codegen.py --check  # exit 1 if the committed file is stale

Sources, in order (the first file of a name wins):
  1. ../shared/reference/kafka-protocol-data/kafka-3.9-message-json/ (Apache Kafka 3.9,
     every version from 0; see SOURCE.txt there);
  2. the schemas kafka-python ships (kafka/protocol/schemas/resources/, Kafka 4.x JSON)
     for the APIs the first set lacks (DeleteGroups, CreatePartitions, AlterConfigs,
     IncrementalAlterConfigs, DeleteRecords, Describe/AlterUserScramCredentials, ...).
     kafka-python is pinned in the dev extra.

Each message becomes a class with ``read(reader, version)`` and ``write(writer, version)``
written out field by field, with the version conditions inline (Kafka's own generator,
MessageDataGenerator, does the same in Java). The primitives (int32, compact strings,
tagged fields, records) live in pylog/protocol/codec.py. A ``records`` field is read as a
zero-copy memoryview of the request and written either from bytes or, for zero-copy
fetch, as a file region the connection sends with sendfile(2).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "src" / "pylog" / "protocol" / "messages.py"
KAFKA_39 = ROOT.parent / "shared" / "reference" / "kafka-protocol-data" / "kafka-3.9-message-json"

# The messages pylog generates: the broker's APIs, the consumer protocol's data.
MESSAGES = [
    "Produce", "Fetch", "ListOffsets", "Metadata", "OffsetCommit", "OffsetFetch",
    "FindCoordinator", "JoinGroup", "Heartbeat", "LeaveGroup", "SyncGroup", "DescribeGroups",
    "ListGroups", "SaslHandshake", "ApiVersions", "CreateTopics", "DeleteTopics", "DeleteRecords",
    "InitProducerId", "DescribeConfigs", "AlterConfigs", "CreatePartitions", "DeleteGroups",
    "IncrementalAlterConfigs", "SaslAuthenticate", "DescribeUserScramCredentials",
    "AlterUserScramCredentials", "DescribeCluster",
    "CreateAcls", "DescribeAcls", "DeleteAcls", "DescribeClientQuotas", "AlterClientQuotas",
]
DATA = ["ConsumerProtocolSubscription", "ConsumerProtocolAssignment"]

PRIMITIVE_READ = {"int8": "r.int8()", "int16": "r.int16()", "uint16": "r.uint16()",
                  "int32": "r.int32()", "uint32": "r.uint32()", "int64": "r.int64()",
                  "float64": "r.float64()", "bool": "r.bool()", "uuid": "r.uuid()"}
PRIMITIVE_DEFAULT = {"int8": "0", "int16": "0", "uint16": "0", "int32": "0", "uint32": "0",
                     "int64": "0", "float64": "0.0", "bool": "False", "uuid": "ZERO_UUID"}


def kafka_python_schemas() -> Path | None:
    try:
        import kafka.protocol.schemas.resources as res
    except ImportError:
        return None
    return Path(res.__file__).parent


def load(name: str) -> tuple[dict, str, str]:
    """(schema, source label, sha256 of the file) of Kafka's JSON file `name`."""
    for base, label in ((KAFKA_39, "Apache Kafka 3.9 (shared/reference)"),
                        (kafka_python_schemas(), "Apache Kafka 4.x via kafka-python 3.0.12")):
        if base is not None and (base / f"{name}.json").exists():
            text = (base / f"{name}.json").read_text()
            stripped = "\n".join(re.sub(r"^\s*//.*$", "", line) for line in text.splitlines())
            return json.loads(stripped), label, hashlib.sha256(text.encode()).hexdigest()[:16]
    raise SystemExit(f"protocol_codegen: no schema {name}.json in {KAFKA_39} or kafka-python")


def snake(name: str) -> str:
    s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()


def parse_range(text: str | None) -> tuple[int, int] | None:
    """Kafka's version range: "3+", "0-12", "5", "none" -> (lo, hi) or None."""
    if text is None or text == "none":
        return None
    if text.endswith("+"):
        return int(text[:-1]), 1 << 15
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


def cond(rng: tuple[int, int] | None, within: tuple[int, int]) -> str:
    """A Python condition on `v` for `rng`, simplified for the versions `within` can be."""
    if rng is None or rng[0] > within[1] or rng[1] < within[0]:
        return "False"
    parts = []
    if rng[0] > within[0]:
        parts.append(f"v >= {rng[0]}")
    if rng[1] < within[1]:
        parts.append(f"v <= {rng[1]}")
    return " and ".join(parts) or "True"


class Gen:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.emitted: set[str] = set()

    def out(self, line: str = "") -> None:
        self.lines.append(line)

    def message(self, schema: dict, label: str, sha: str) -> None:
        name = schema["name"]
        valid = parse_range(schema["validVersions"])
        flex = parse_range(schema.get("flexibleVersions"))
        structs = {s["name"]: s for s in schema.get("commonStructs", [])}
        self.struct(name, schema["fields"], valid, flex, structs, prefix="",
                    top=schema, label=label, sha=sha)

    def struct(self, name: str, fields: list[dict], valid, flex, structs, prefix: str,
               top: dict | None = None, label: str = "", sha: str = "") -> str:
        cls = name if top is not None else f"{prefix}{name}"
        # Nested struct classes first (their names are prefixed by the message's).
        msg_prefix = name if top is not None else prefix
        kinds: dict[str, tuple[str, str | None]] = {}
        for f in fields:
            kinds[f["name"]] = self.kind(f, valid, flex, structs, msg_prefix)
        if cls in self.emitted:
            return cls
        self.emitted.add(cls)
        o = self.out
        o()
        o()
        o(f"class {cls}(Struct):")
        if top is not None:
            o(f'    """{name} (api key {top.get("apiKey", "-")}, versions {top["validVersions"]}, '
              f'flexible {top.get("flexibleVersions", "none")}): {label}, sha256 {sha}."""')
            o()
            o(f"    API_KEY = {top.get('apiKey', -1)}")
            o(f"    VERSIONS = {valid}")
            o(f"    FLEXIBLE = {flex[0] if flex else None}")
        names = [snake(f["name"]) for f in fields]
        o(f"    __slots__ = {tuple(names)!r}")
        o("    _FIELDS = (" + "".join(f"({snake(f['name'])!r}, {self.default(f, kinds[f['name']])}), "
                               for f in fields) + ")")
        o("    # (field, kind, struct class, versions, nullable versions, tagged versions)")
        o("    _SCHEMA = (" + "".join(
            f"({snake(f['name'])!r}, {kinds[f['name']][0]!r}, {kinds[f['name']][1]!r}, "
            f"{parse_range(f['versions'])}, {parse_range(f.get('nullableVersions'))}, "
            f"{parse_range(f.get('taggedVersions'))}), " for f in fields) + ")")
        o()
        # read
        o("    @classmethod")
        o("    def read(cls, r, v):")
        o("        self = cls.__new__(cls)")
        o(f"        flex = {cond(flex, valid) if flex else 'False'}")
        tagged = []
        for f in fields:
            attr = snake(f["name"])
            present = parse_range(f["versions"])
            tv = parse_range(f.get("taggedVersions"))
            if tv is not None:
                tagged.append(f)
                o(f"        self.{attr} = {self.default(f, kinds[f['name']])}")
                continue
            c = cond(present, valid)
            expr = self.read_expr(f, kinds[f["name"]], valid)
            if c == "True":
                o(f"        self.{attr} = {expr}")
            else:
                o(f"        self.{attr} = {expr} if {c} else {self.default(f, kinds[f['name']])}")
        if flex:
            if tagged:
                o("        if flex:")
                o("            for tag, sub in r.tagged_fields():")
                for f in tagged:
                    c = cond(parse_range(f["taggedVersions"]), valid)
                    o(f"                if tag == {f['tag']} and {c}:")
                    o(f"                    self.{snake(f['name'])} = "
                      f"{self.read_expr(f, kinds[f['name']], valid, reader='sub', flex='True')}")
            else:
                o("        if flex:")
                o("            r.skip_tagged_fields()")
        o("        return self")
        o()
        # write
        o("    def write(self, w, v):")
        o(f"        flex = {cond(flex, valid) if flex else 'False'}")
        for f in fields:
            if f.get("taggedVersions"):
                continue
            c = cond(parse_range(f["versions"]), valid)
            stmt = self.write_stmt(f, kinds[f["name"]], valid, f"self.{snake(f['name'])}")
            if c == "True":
                o(f"        {stmt}")
            elif c != "False":
                o(f"        if {c}:")
                o(f"            {stmt}")
        if flex:
            if tagged:
                o("        if flex:")
                o("            tags = []")
                for f in tagged:
                    attr = f"self.{snake(f['name'])}"
                    c = cond(parse_range(f["taggedVersions"]), valid)
                    o(f"            if {c} and {attr} != {self.default(f, kinds[f['name']])}:")
                    o("                sub = w.sub()")
                    o(f"                {self.write_stmt(f, kinds[f['name']], valid, attr, writer='sub', flex='True')}")
                    o(f"                tags.append(({f['tag']}, sub))")
                o("            w.tagged_fields(tags)")
            else:
                o("        if flex:")
                o("            w.empty_tagged_fields()")
        return cls

    def kind(self, f: dict, valid, flex, structs, prefix) -> tuple[str, str | None]:
        """(kind, struct class): kind is a primitive name, 'string', 'bytes', 'records',
        'struct', '[]prim' or '[]struct'."""
        t = f["type"]
        if t.startswith("[]"):
            inner = t[2:]
            if inner in PRIMITIVE_READ or inner in ("string", "bytes"):
                return f"[]{inner}", None
            body = f.get("fields") or structs[inner]["fields"]
            return "[]struct", self.struct(inner, body, valid, flex, structs, prefix)
        if t in PRIMITIVE_READ or t in ("string", "bytes", "records"):
            return t, None
        body = f.get("fields") or structs[t]["fields"]
        return "struct", self.struct(t, body, valid, flex, structs, prefix)

    def default(self, f: dict, kind: tuple[str, str | None]) -> str:
        k, cls = kind
        d = f.get("default")
        if k.startswith("[]"):
            return "None" if d == "null" else "[]"
        if k == "struct":
            # A tagged struct is absent (None) unless set; written only when set.
            absent = f.get("nullableVersions") or f.get("taggedVersions")
            return "None" if absent else f"{cls}()"
        if k in ("string",):
            if d is None:
                return "''"
            return "None" if d == "null" else repr(d)
        if k in ("bytes", "records"):
            return "None" if f.get("nullableVersions") else "b''"
        if d is None or d == "":
            return PRIMITIVE_DEFAULT[k]
        if k == "bool":
            return "True" if str(d).lower() == "true" else "False"
        if k == "float64":
            return repr(float(d))
        if k == "uuid":
            return "ZERO_UUID"
        return str(d if isinstance(d, int) else int(d, 0))

    def nullable(self, f: dict, valid) -> str:
        return cond(parse_range(f.get("nullableVersions")), valid)

    def read_expr(self, f, kind, valid, reader="r", flex="flex") -> str:
        k, cls = kind
        n = self.nullable(f, valid)
        if k in PRIMITIVE_READ:
            return PRIMITIVE_READ[k].replace("r.", f"{reader}.", 1)
        if k in ("string", "bytes", "records"):
            base = f"{reader}.{k}({flex}"
            if n == "False":
                return base + ")"
            if n == "True":
                return base + ", True)"
            return base + f", {n})"
        null = "" if n == "False" else (", True" if n == "True" else f", {n}")
        if k == "struct":
            if n == "False":
                return f"{cls}.read({reader}, v)"
            return f"({cls}.read({reader}, v) if {reader}.int8() >= 0 else None)"
        inner = k[2:]
        if inner == "struct":
            return f"{reader}.struct_array({flex}, {cls}, v{null})"
        fn = PRIMITIVE_READ.get(inner, f"{reader}.{inner}()").replace("()", "").replace("r.", f"{reader}.", 1)
        if inner in ("string", "bytes"):
            return f"{reader}.array({flex}, lambda: {reader}.{inner}({flex}){null})"
        return f"{reader}.array({flex}, {fn}{null})"

    def write_stmt(self, f, kind, valid, value, writer="w", flex="flex") -> str:
        k, cls = kind
        n = self.nullable(f, valid)
        if k in PRIMITIVE_READ:
            return f"{writer}.{k}({value})"
        if k in ("string", "bytes", "records"):
            return f"{writer}.{k}({value}, {flex})"
        if k == "struct":
            if n == "False":
                return f"{value}.write({writer}, v)"
            return f"{writer}.nullable_struct({value}, v)"
        inner = k[2:]
        if inner == "struct":
            return f"{writer}.struct_array({value}, {flex}, v)"
        if inner in ("string", "bytes"):
            return f"{writer}.array({value}, {flex}, lambda x: {writer}.{inner}(x, {flex}))"
        return f"{writer}.array({value}, {flex}, {writer}.{inner})"


def generate() -> str:
    gen = Gen()
    apis = []
    for base in MESSAGES:
        for kind in ("Request", "Response"):
            schema, label, sha = load(base + kind)
            gen.message(schema, label, sha)
        apis.append((schema["apiKey"], base))
    for name in DATA:
        schema, label, sha = load(name)
        gen.message(schema, label, sha)
    head = [
        '"""Kafka protocol messages. GENERATED by tools/protocol_codegen.py from Kafka\'s JSON',
        "message definitions: do not edit; run the generator (a test fails when this is stale).",
        "",
        "Every class reads and writes every version Kafka defines for it; names are Kafka's in",
        'snake_case (``ThrottleTimeMs`` -> ``throttle_time_ms``)."""',
        "",
        "# ruff: noqa: E501",
        "",
        "from __future__ import annotations",
        "",
        "from .codec import ZERO_UUID, Struct",
        "",
        "__all__ = [" + ", ".join(repr(f"{b}{k}") for b in MESSAGES for k in ("Request", "Response"))
        + ", " + ", ".join(repr(d) for d in DATA) + ", 'REQUESTS', 'RESPONSES']",
    ]
    tail = ["", "", "# api key -> request class, response class",
            "REQUESTS = {" + ", ".join(f"{k}: {b}Request" for k, b in apis) + "}",
            "RESPONSES = {" + ", ".join(f"{k}: {b}Response" for k, b in apis) + "}", ""]
    return "\n".join(head + gen.lines + tail)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed file is stale")
    args = ap.parse_args()
    text = generate()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT} is stale: run python tools/protocol_codegen.py", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
