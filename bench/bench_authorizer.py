"""The authorizer's cost: produce and fetch requests per second against `pylog serve`
with ACLs off (no authorizer) and on (Kafka's StandardAuthorizer, 1,000 ACLs), and the
cost of one decision in-process (cached, and computed over the 1,000 ACLs).

    .venv/bin/python bench/bench_authorizer.py              # ~1 min
    .venv/bin/python bench/bench_authorizer.py --markdown   # the table for bench/RESULTS.md

The broker is a child process (tests/broker/process.py); one client connection sends
small requests one at a time for --seconds each (produce: one 100-byte record, acks=1;
fetch: max_wait_ms 0 from offset 0, 1 KiB), 1-s samples interleaved off/on, medians (this VM is shared: single samples vary 2-4x). With ACLs
on, the client (User:ANONYMOUS on a PLAINTEXT listener) is allowed by a prefixed ALLOW
among 1,000 ACLs: 600 literal topic ACLs of other principals, 300 prefixed ones, 100 on
groups.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from broker.process import ServeProcess  # noqa: E402

import pylog  # noqa: E402
from pylog.common.acl import AclBinding  # noqa: E402
from pylog.protocol import messages as m  # noqa: E402
from pylog.protocol.client import ProtocolClient  # noqa: E402

AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
TOPIC = "bench-acl"


def acls() -> list[AclBinding]:
    out = [AclBinding(2, f"other-topic-{i}", 3, f"User:u{i % 50}", "*", 3 + i % 3, 3) for i in range(600)]
    out += [AclBinding(2, f"pre-{i}-", 4, f"User:u{i % 50}", "*", 3, 2 + i % 2) for i in range(298)]
    out += [AclBinding(3, f"group-{i}", 3, f"User:u{i % 50}", "*", 3, 3) for i in range(100)]
    out += [AclBinding(2, "bench-", 4, "User:ANONYMOUS", "*", op, 3) for op in (3, 4)]   # READ, WRITE
    return out


def start(data: str, on: bool) -> ServeProcess:
    extra = [f"authorizer.class.name={AUTHORIZER}", "allow.everyone.if.no.acl.found=true"] if on else []
    return ServeProcess(data, *extra)


def load(broker: ServeProcess) -> None:
    with ProtocolClient(broker.bootstrap) as client:
        client.metadata([TOPIC], allow_auto_create=True)
        answer = client.request(30, m.CreateAclsRequest(creations=[m.CreateAclsRequestAclCreation(
            resource_type=b.resource_type, resource_name=b.resource_name,
            resource_pattern_type=b.pattern_type, principal=b.principal, host=b.host,
            operation=b.operation, permission_type=b.permission) for b in acls()]))
        assert all(r.error_code == 0 for r in answer.results), answer.results[:3]


def rate(broker: ServeProcess, seconds: float, kind: str) -> float:
    batch = pylog.records.encode_batch([b"x" * 100])
    with ProtocolClient(broker.bootstrap) as client:
        client.produce(TOPIC, 0, batch)
        count, deadline = 0, time.perf_counter() + seconds
        started = time.perf_counter()
        while time.perf_counter() < deadline:
            for _ in range(50):
                if kind == "produce":
                    assert client.produce(TOPIC, 0, batch, acks=1).error_code == 0
                else:
                    assert client.fetch(TOPIC, 0, 0, max_bytes=1024).error_code == 0
            count += 50
        return count / (time.perf_counter() - started)


def decision_cost() -> tuple[float, float]:
    """(µs per cached decision, µs per decision computed over the 1,000 ACLs)."""
    from pylog.broker.authorizer import StandardAuthorizer
    with tempfile.TemporaryDirectory() as d, pylog.open(d) as store:
        store.create_acls(acls())
        authorizer = StandardAuthorizer(store, frozenset(), False)
        n = 200_000
        t = time.perf_counter()
        for _ in range(n):
            authorizer.authorize("User:ANONYMOUS", "127.0.0.1", 4, 2, "bench-acl")
        cached = (time.perf_counter() - t) / n * 1e6
        names = [f"bench-{i}" for i in range(20_000)]
        t = time.perf_counter()
        for name in names:                                   # every name new: computed
            authorizer.authorize("User:ANONYMOUS", "127.0.0.1", 4, 2, name)
        computed = (time.perf_counter() - t) / len(names) * 1e6
        return cached, computed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seconds", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    results: dict[tuple[str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        brokers = {"off": start(f"{tmp}/off", False), "on": start(f"{tmp}/on", True)}
        try:
            load(brokers["on"])
            with ProtocolClient(brokers["off"].bootstrap) as client:
                client.metadata([TOPIC], allow_auto_create=True)
            for _ in range(args.rounds):
                for kind in ("produce", "fetch"):
                    for mode, broker in brokers.items():
                        results.setdefault((kind, mode), []).append(rate(broker, args.seconds, kind))
        finally:
            for b in brokers.values():
                b.stop()
    cached, computed = decision_cost()
    rows = []
    for kind in ("produce", "fetch"):
        off, on = (statistics.median(results[(kind, mode)]) for mode in ("off", "on"))
        rows.append((kind, off, on, on / off))
    if args.markdown:
        print("| requests | ACLs off (req/s) | ACLs on, 1,000 ACLs (req/s) | on / off |")
        print("|---|---:|---:|---:|")
        for kind, off, on, ratio in rows:
            print(f"| {kind} | {off:,.0f} | {on:,.0f} | {ratio:.2f} |")
        print(f"\nOne decision in-process: {cached:.2f} µs cached, {computed:.1f} µs computed over "
              f"1,000 ACLs.")
    else:
        for (kind, mode), values in sorted(results.items()):
            print(f"{kind:8s} {mode:3s} rounds: " + ", ".join(f"{v:,.0f}" for v in values))
        for kind, off, on, ratio in rows:
            print(f"{kind:8s} off {off:9,.0f} req/s   on {on:9,.0f} req/s   on/off {ratio:.2f}")
        print(f"decision: {cached:.2f} us cached, {computed:.1f} us computed over 1,000 ACLs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
