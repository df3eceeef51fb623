#!/usr/bin/env python3
"""Generates pylog's Kafka protocol codec from Kafka's JSON message definitions.

    python tools/protocol_codegen.py          # writes src/pylog/protocol/messages.py
    python tools/protocol_codegen.py --check  # exit 1 if the committed file is stale,
                                              # 3 if Kafka's schemas cannot be had

Sources: the message schemas of two pinned Apache Kafka releases, as Kafka ships them: the
JSON files under common/message/ inside each release's kafka-clients jar (the files of
clients/src/main/resources/common/message/ in apache/kafka):
  - KAFKA_VERSION (4.1.0, the release tools/kafka runs as the reference broker): every
    message at every version it defines;
  - OLD_KAFKA_VERSION (3.9.0, the last release that defines every version from 0): only
    the versions Kafka 4.0 removed (KIP-896) that pylog's broker still serves (Produce 0-2,
    which librdkafka 2.0 needs to compress; CreateTopics 0-1, OffsetCommit 0-1, ...).
Where a message lost versions in 4.x, the two schemas are merged into one: every field
present, nullable and tagged at a version below 4.x's lowest as 3.9.0 says, at the others
as 4.x says. The merge is checked, not trusted: at every version the merged schema's fields
(names, types, tags, defaults, nesting, in order) must equal those of the release that
version comes from, or the generator stops; and at every version both releases define,
they must agree (Kafka never changes a released version), so moving the pin changes no
version pylog already speaks. A message only 4.x has (ConsumerGroupHeartbeat, ShareFetch,
...) comes from 4.x alone. The generated classes therefore know more
versions than pylog serves; which versions the broker advertises is pylog/protocol/api.py
SUPPORTED alone.

The jars come from Maven Central (``mvn dependency:copy``) into
${PYLOG_KAFKA_CACHE:-~/.cache/pylog} and are checked against their pinned sha256 before
they are read; they never go into the repository.

    python tools/protocol_codegen.py --fetch  # fetch (if needed) and print the jars' paths

Adding an API: add its name (Kafka's, without Request/Response: "EndTxn") to MESSAGES
(or a data schema's name to DATA), run the generator, list the versions pylog serves in
pylog/protocol/api.py SUPPORTED, and handle it in the broker. Every JSON of the release is
in the jar, so no file needs copying; tests/protocol/test_codec.py then checks the new
classes against kafka-python's codec for every version both know. Moving to a newer Kafka:
change KAFKA_VERSION and KAFKA_CLIENTS_SHA256 (``sha256sum`` of the jar Maven fetched),
regenerate, and read the diff of messages.py.

Each message becomes a class with ``read(reader, version)`` and ``write(writer, version)``
written out field by field, with the version conditions inline (Kafka's own generator,
MessageDataGenerator, does the same in Java). The primitives (int32, compact strings,
tagged fields, records) live in pylog/protocol/codec.py. A ``records`` field is read as a
zero-copy memoryview of the request and written either from bytes or, for zero-copy
fetch, as a file region the connection sends with sendfile(2).
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "src" / "pylog" / "protocol" / "messages.py"

#: The Kafka releases pylog's codec is generated from, with the sha256 of their
#: kafka-clients jars on Maven Central (org.apache.kafka:kafka-clients:VERSION).
KAFKA_VERSION = "4.1.0"
KAFKA_CLIENTS_SHA256 = "eb74709dc3be35e06208827860c87a94872e8a4b00f466880670785c85a20627"
OLD_KAFKA_VERSION = "3.9.0"     # only for the versions KAFKA_VERSION no longer defines
OLD_KAFKA_CLIENTS_SHA256 = "15c1e137f2c2c94398e27abc4060a03b6bde10bf9fac15e8f70c02320b202f18"
PINNED = {KAFKA_VERSION: KAFKA_CLIENTS_SHA256, OLD_KAFKA_VERSION: OLD_KAFKA_CLIENTS_SHA256}
SCHEMA_DIR = "common/message/"
SCHEMAS_UNAVAILABLE = 3     # exit status when a jar cannot be had (no Maven, offline)

# The messages pylog generates: the broker's APIs, the consumer protocol's data.
MESSAGES = [
    "Produce", "Fetch", "ListOffsets", "Metadata", "OffsetCommit", "OffsetFetch",
    "FindCoordinator", "JoinGroup", "Heartbeat", "LeaveGroup", "SyncGroup", "DescribeGroups",
    "ListGroups", "SaslHandshake", "ApiVersions", "CreateTopics", "DeleteTopics", "DeleteRecords",
    "InitProducerId", "DescribeConfigs", "AlterConfigs", "CreatePartitions", "DeleteGroups",
    "IncrementalAlterConfigs", "SaslAuthenticate", "DescribeUserScramCredentials",
    "AlterUserScramCredentials", "DescribeCluster", "OffsetForLeaderEpoch", "OffsetDelete",
    "GetTelemetrySubscriptions", "PushTelemetry",
    "CreateAcls", "DescribeAcls", "DeleteAcls", "DescribeClientQuotas", "AlterClientQuotas",
    # Transactions (coordinator/transactions.py, broker/transactions.py)
    "AddPartitionsToTxn", "AddOffsetsToTxn", "EndTxn", "WriteTxnMarkers", "TxnOffsetCommit",
    "DescribeProducers", "DescribeTransactions", "ListTransactions",
    # The consumer rebalance protocol, KIP-848 (coordinator/consumer_group.py)
    "ConsumerGroupHeartbeat", "ConsumerGroupDescribe",
    # Log dirs (storage/log_dir_moves.py, broker/log_dirs.py)
    "DescribeLogDirs", "AlterReplicaLogDirs", "AlterPartitionReassignments",
    "ListPartitionReassignments",
    # Share groups, KIP-932 (coordinator/share_group.py, broker/share_groups.py)
    "ShareGroupHeartbeat", "ShareGroupDescribe", "ShareFetch", "ShareAcknowledge",
    "DescribeShareGroupOffsets", "AlterShareGroupOffsets", "DeleteShareGroupOffsets",
]
DATA = ["ConsumerProtocolSubscription", "ConsumerProtocolAssignment"]

PRIMITIVE_READ = {"int8": "r.int8()", "int16": "r.int16()", "uint16": "r.uint16()",
                  "int32": "r.int32()", "uint32": "r.uint32()", "int64": "r.int64()",
                  "float64": "r.float64()", "bool": "r.bool()", "uuid": "r.uuid()"}
PRIMITIVE_DEFAULT = {"int8": "0", "int16": "0", "uint16": "0", "int32": "0", "uint32": "0",
                     "int64": "0", "float64": "0.0", "bool": "False", "uuid": "ZERO_UUID"}


class SchemasUnavailable(Exception):
    """A pinned kafka-clients jar is neither cached nor fetchable (no Maven, no network)."""


def clients_jar(version: str) -> Path:
    """The pinned kafka-clients jar of `version`, fetched with Maven into the cache when
    absent, and checked against its pinned sha256 (a different file is an error, never used)."""
    cache = Path(os.environ.get("PYLOG_KAFKA_CACHE") or Path.home() / ".cache" / "pylog")
    jar = cache / f"kafka-clients-{version}" / f"kafka-clients-{version}.jar"
    if not jar.exists():
        mvn = shutil.which("mvn")
        if mvn is None:
            raise SchemasUnavailable(f"{jar} is absent and Maven (mvn) is not installed to fetch it")
        artifact = f"org.apache.kafka:kafka-clients:{version}"
        jar.parent.mkdir(parents=True, exist_ok=True)    # also mvn's cwd: no pom.xml there
        run = subprocess.run([mvn, "-q", "-B", "dependency:copy", f"-Dartifact={artifact}",
                              f"-DoutputDirectory={jar.parent}"],
                             capture_output=True, text=True, cwd=jar.parent)
        if run.returncode != 0 or not jar.exists():
            raise SchemasUnavailable(f"mvn could not fetch {artifact}:\n{run.stdout}{run.stderr}")
    digest = hashlib.sha256(jar.read_bytes()).hexdigest()
    if digest != PINNED[version]:
        raise SystemExit(f"protocol_codegen: {jar} has sha256 {digest}, not the pinned "
                         f"{PINNED[version]}: delete it and run again")
    return jar


@functools.cache
def schema_files(version: str) -> dict[str, bytes]:
    """Kafka `version`'s message schemas by name ("ProduceRequest"): every JSON under
    common/message/ of its kafka-clients jar."""
    with zipfile.ZipFile(clients_jar(version)) as z:
        return {n[len(SCHEMA_DIR):-len(".json")]: z.read(n) for n in z.namelist()
                if n.startswith(SCHEMA_DIR) and n.endswith(".json") and "/" not in n[len(SCHEMA_DIR):]}


def read_schema(version: str, name: str) -> tuple[dict, str] | None:
    """(schema, sha256 prefix of the file) of `name` in Kafka `version`; None if absent."""
    text = schema_files(version).get(name)
    if text is None:
        return None
    stripped = "\n".join(re.sub(r"^\s*//.*$", "", line) for line in text.decode().splitlines())
    return json.loads(stripped), hashlib.sha256(text).hexdigest()[:16]


def load(name: str) -> tuple[dict, str, str]:
    """(schema, source label, sha256s) of Kafka's message `name`: KAFKA_VERSION's, merged
    with OLD_KAFKA_VERSION's where that defines versions below KAFKA_VERSION's lowest."""
    new = read_schema(KAFKA_VERSION, name)
    if new is None:
        files = schema_files(KAFKA_VERSION)
        raise SystemExit(f"protocol_codegen: Kafka {KAFKA_VERSION} has no message schema {name}.json "
                         f"(it has {len(files)}: {', '.join(sorted(files)[:6])}, ...)")
    schema, sha = new
    old = read_schema(OLD_KAFKA_VERSION, name)
    if old is None:
        return schema, f"Apache Kafka {KAFKA_VERSION}", sha
    # A version both releases define is the same bytes in both (Kafka never changes a
    # released version): so moving the pin changes no version pylog already speaks.
    old_valid, valid = parse_range(old[0]["validVersions"]), parse_range(schema["validVersions"])
    for v in range(max(old_valid[0], valid[0]), min(old_valid[1], valid[1]) + 1):
        if project(old[0], v) != project(schema, v):
            raise SystemExit(f"protocol_codegen: {name} v{v} differs between Kafka "
                             f"{OLD_KAFKA_VERSION} and {KAFKA_VERSION}")
    if old_valid[0] >= valid[0]:
        return schema, f"Apache Kafka {KAFKA_VERSION}", sha
    merged = merge_schemas(old[0], schema)
    removed = f"version {old_valid[0]}" if old_valid[0] == valid[0] - 1 else \
        f"versions {old_valid[0]}-{valid[0] - 1}"
    return (merged, f"Apache Kafka {KAFKA_VERSION}, {removed} from {OLD_KAFKA_VERSION}",
            f"{sha} / {old[1]}")


# ---------------------------------------------------------------- the two releases merged

def version_set(text: str | None, valid: tuple[int, int]) -> set[int]:
    """The versions within `valid` that Kafka's range text ("3+", "0-4", "none") covers."""
    rng = parse_range(text)
    return set() if rng is None else set(range(max(rng[0], valid[0]), min(rng[1], valid[1]) + 1))


def range_text(versions: set[int], top: int) -> str | None:
    """Kafka's range text for a contiguous set of versions ("2+" when it reaches `top`)."""
    if not versions:
        return None
    lo, hi = min(versions), max(versions)
    if len(versions) != hi - lo + 1:
        raise SystemExit(f"protocol_codegen: merged versions {sorted(versions)} are not contiguous")
    return f"{lo}+" if hi >= top else (f"{lo}" if lo == hi else f"{lo}-{hi}")


RANGE_KEYS = ("versions", "nullableVersions", "taggedVersions")


def merge_fields(old: list[dict], new: list[dict], cut: int, valid: tuple[int, int],
                 old_valid: tuple[int, int], new_valid: tuple[int, int]) -> list[dict]:
    """`new`'s fields, with each field's ranges below `cut` taken from `old`, and the fields
    only `old` has (those of removed versions) put back after their predecessor in `old`."""
    old_by = {f["name"]: f for f in old}
    new_by = {f["name"]: f for f in new}
    order = [f["name"] for f in new]
    for i, f in enumerate(old):
        if f["name"] not in new_by:
            before = [g["name"] for g in old[:i] if g["name"] in order]
            order.insert(order.index(before[-1]) + 1 if before else 0, f["name"])
    out = []
    for name in order:
        o, n = old_by.get(name), new_by.get(name)
        f = dict(n if n is not None else o)
        for key in RANGE_KEYS:
            below = {v for v in version_set(o.get(key), old_valid) if v < cut} if o else set()
            above = {v for v in version_set(n.get(key), new_valid) if v >= cut} if n else set()
            text = range_text(below | above, valid[1])
            if text is None:
                f.pop(key, None)
            else:
                f[key] = text
        if "versions" not in f:
            continue
        if o is not None and n is not None and (o.get("fields") or n.get("fields")):
            f["fields"] = merge_fields(o.get("fields", []), n.get("fields", []), cut, valid,
                                       old_valid, new_valid)
        out.append(f)
    return out


def merge_schemas(old: dict, new: dict) -> dict:
    """One schema that reads and writes `old`'s versions below `new`'s lowest as `old`
    does and the rest as `new` does; checked field by field at every version."""
    old_valid, new_valid = parse_range(old["validVersions"]), parse_range(new["validVersions"])
    cut = new_valid[0]
    if old_valid[1] < cut - 1:
        raise SystemExit(f"protocol_codegen: {new['name']}: {OLD_KAFKA_VERSION} ends at v{old_valid[1]}, "
                         f"{KAFKA_VERSION} starts at v{cut}: a gap")
    valid = (old_valid[0], new_valid[1])
    merged = dict(new, validVersions=f"{valid[0]}-{valid[1]}")
    flex = ({v for v in version_set(old.get("flexibleVersions"), old_valid) if v < cut}
            | {v for v in version_set(new.get("flexibleVersions"), new_valid) if v >= cut})
    merged["flexibleVersions"] = range_text(flex, valid[1]) or "none"
    merged["fields"] = merge_fields(old["fields"], new["fields"], cut, valid, old_valid, new_valid)
    structs = {s["name"]: s for s in old.get("commonStructs", [])}
    for s in new.get("commonStructs", []):
        o = structs.get(s["name"])
        structs[s["name"]] = s if o is None else dict(
            s, fields=merge_fields(o["fields"], s["fields"], cut, valid, old_valid, new_valid))
    if structs:
        merged["commonStructs"] = list(structs.values())
    for v in range(valid[0], valid[1] + 1):
        source = old if v < cut else new
        if project(merged, v) != project(source, v):
            raise SystemExit(f"protocol_codegen: {new['name']} v{v}: the merged schema differs "
                             f"from {OLD_KAFKA_VERSION if v < cut else KAFKA_VERSION}'s")
    return merged


def project(schema: dict, v: int):
    """What a schema says about version `v`, as comparable data: whether it is flexible and
    its fields present at `v` in order, each with everything that shapes its bytes."""
    structs = {s["name"]: s for s in schema.get("commonStructs", [])}

    def at(text: str | None) -> bool:
        rng = parse_range(text)
        return rng is not None and rng[0] <= v <= rng[1]

    def fields(fs: list[dict]) -> list:
        out = []
        for f in fs:
            if not at(f["versions"]):
                continue
            inner = f["type"].removeprefix("[]")
            body = f.get("fields") or (structs[inner]["fields"] if inner in structs else None)
            tagged = at(f.get("taggedVersions"))
            out.append((f["name"], f["type"], at(f.get("nullableVersions")), tagged,
                        f.get("tag") if tagged else None, f.get("default"),
                        fields(body) if body else None))
        return out

    return at(schema.get("flexibleVersions")), fields(schema["fields"])


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
    ap.add_argument("--fetch", action="store_true", help="fetch Kafka's jars; print their paths")
    args = ap.parse_args()
    try:
        if args.fetch:
            for version in PINNED:
                print(clients_jar(version))
            return 0
        text = generate()
    except SchemasUnavailable as e:
        print(f"protocol_codegen: Kafka's message schemas: {e}", file=sys.stderr)
        return SCHEMAS_UNAVAILABLE
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
