"""Authentication cost: connection set-ups per second against `pylog serve`, and the
broker's CPU per set-up, for an unauthenticated connection (PLAINTEXT listener) beside
SASL/PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 (SASL_PLAINTEXT listener).

    .venv/bin/python bench/bench_sasl.py              # ~1.5 min
    .venv/bin/python bench/bench_sasl.py --markdown   # the table for bench/RESULTS.md

Each set-up is what a client does before its first request: connect, ApiVersions, and
for SASL the handshake and the mechanism's exchange (PLAIN: one SaslAuthenticate; SCRAM:
two), then close. One client thread, one connection at a time, for --seconds per mode.
SCRAM's client side costs a PBKDF2 of the password (4096 iterations: milliseconds), which
would hide the broker's cost: the "cached" rows salt once per user, as RFC 5802 allows a
client to; the "full" row salts every time, as Kafka's clients do. The broker's CPU per
set-up comes from its /proc/PID/stat (user + system time over the run) and is the
authentication cost this issue asks for: the broker keeps StoredKey/ServerKey, so its
SCRAM work is a few HMACs and hashes, no PBKDF2.
"""

from __future__ import annotations

import argparse
import base64
import os
import socket
import struct
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))
sys.path.insert(0, str(HERE))

from report import cpu_report, cpu_snapshot, render  # noqa: E402

import pylog  # noqa: E402
from pylog.common import scram  # noqa: E402
from pylog.protocol import decode_response, encode_request  # noqa: E402
from pylog.protocol import messages as m  # noqa: E402

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_bench="bench-secret";')


class Conn:
    def __init__(self, address) -> None:
        self.sock = socket.create_connection(address)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation = 0

    def request(self, key: int, version: int, body):
        self.correlation += 1
        self.sock.sendall(encode_request(key, version, self.correlation, "bench", body))
        size = struct.unpack(">i", self._exactly(4))[0]
        return decode_response(key, version, self._exactly(size))[1]

    def _exactly(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    def close(self) -> None:
        self.sock.close()


_salted_cache: dict = {}


def set_up(address, mode: str) -> None:
    """One connection through to its first request's readiness, then closed."""
    c = Conn(address)
    try:
        assert c.request(18, 3, m.ApiVersionsRequest(client_software_name="bench",
                                                    client_software_version="1")).error_code == 0
        if mode == "plaintext":
            return
        mechanism = "PLAIN" if mode == "plain" else mode.split(" ")[0].upper()
        assert c.request(17, 1, m.SaslHandshakeRequest(mechanism=mechanism)).error_code == 0
        if mechanism == "PLAIN":
            ok = c.request(36, 2, m.SaslAuthenticateRequest(auth_bytes=b"\0bench\0bench-secret"))
            assert ok.error_code == 0, ok.error_message
            return
        mech = scram.MECHANISMS[mechanism]
        nonce = base64.b64encode(os.urandom(18))
        bare = b"n=bench,r=" + nonce
        first = c.request(36, 2, m.SaslAuthenticateRequest(auth_bytes=b"n,," + bare))
        server_first = bytes(first.auth_bytes)
        fields = dict(item.split(b"=", 1) for item in server_first.split(b","))
        key = (mechanism, fields[b"s"], fields[b"i"])
        salted = _salted_cache.get(key) if mode.endswith("cached") else None
        if salted is None:
            salted = scram.salted_password(mech, "bench-secret", base64.b64decode(fields[b"s"]),
                                           int(fields[b"i"]))
            _salted_cache[key] = salted
        without_proof = b"c=biws,r=" + fields[b"r"]
        proof = scram.client_proof(mech, salted, b",".join((bare, server_first, without_proof)))
        final = c.request(36, 2, m.SaslAuthenticateRequest(
            auth_bytes=without_proof + b",p=" + base64.b64encode(proof)))
        assert final.error_code == 0, final.error_message
    finally:
        c.close()


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(broker, mode: str, seconds: float) -> dict:
    host, port = broker.bootstrap.rsplit(":", 1)
    address = (host, int(port))
    for _ in range(20):                                   # warm up (and fill the salt cache)
        set_up(address, mode)
    cpu0, machine0 = cpu_seconds(broker.pid), cpu_snapshot()
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        set_up(address, mode)
        n += 1
    elapsed = time.perf_counter() - t0
    others, _ = cpu_report(machine0, cpu_snapshot())
    return {"mode": mode, "n": n, "per_s": n / elapsed, "ms": elapsed / n * 1000,
            "broker_ms": (cpu_seconds(broker.pid) - cpu0) / n * 1000, "others": others}


def main() -> None:
    from broker.process import ServeProcess
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every mode, interleaved; medians")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    rows = []
    modes = ("plaintext", "plain", "scram-sha-256 cached", "scram-sha-512 cached", "scram-sha-512 full")
    runs: dict[str, list[dict]] = {mode: [] for mode in modes}
    with tempfile.TemporaryDirectory(prefix="pylog-bench-sasl-") as tmp:
        data = os.path.join(tmp, "sasl")
        with pylog.open(data) as store:
            for name in scram.MECHANISMS:
                mech = scram.MECHANISMS[name]
                store.alter_user_scram_credentials(upsertions=[("bench", name, scram.new_credential(mech, "bench-secret"))])
        with ServeProcess(os.path.join(tmp, "plain")) as plain, \
                ServeProcess(data, "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
                             f"listener.name.sasl_plaintext.plain.sasl.jaas.config={PLAIN_JAAS}",
                             listen="SASL_PLAINTEXT://127.0.0.1:0") as sasl:
            for r in range(args.rounds):
                for mode in modes:
                    runs[mode].append(measure(plain if mode == "plaintext" else sasl, mode, args.seconds))
                print(f"round {r + 1}: done", file=sys.stderr, flush=True)
    results = []
    for mode in modes:
        by_rate = sorted(runs[mode], key=lambda x: x["per_s"])
        middle = by_rate[len(by_rate) // 2]
        middle["n"] = sum(x["n"] for x in runs[mode])
        middle["broker_ms"] = sorted(x["broker_ms"] for x in runs[mode])[len(by_rate) // 2]
        middle["others"] = max(x["others"] for x in runs[mode])
        results.append(middle)
    what = {"plaintext": "PLAINTEXT listener: connect + ApiVersions",
            "plain": "SASL/PLAIN", "scram-sha-256 cached": "SCRAM-SHA-256 (client salts once)",
            "scram-sha-512 cached": "SCRAM-SHA-512 (client salts once)",
            "scram-sha-512 full": "SCRAM-SHA-512 (client salts each time, as Kafka's clients)"}
    for r in results:
        rows.append([what[r["mode"]], r["n"], f"{r['per_s']:.0f}", f"{r['ms']:.2f}",
                     f"{r['broker_ms']:.2f}", f"{r['others']:.0f}%"])
    print(render("Connection set-ups against pylog serve, one client, one connection at a time",
                 ["set-up", "set-ups (all rounds)", "per second (median)", "ms each, client's view",
                  "broker CPU ms each (median)", "CPU used by other processes (worst)"], rows, args.markdown,
                 text_columns=1,
                 notes=[f"{args.rounds} rounds of {args.seconds:.0f} s per mode, interleaved, each after "
                        f"20 warm-up set-ups; SCRAM users have 4096 iterations (Kafka's default and "
                        f"minimum)",
                        f"machine: {os.cpu_count()} CPUs (shared)"]))


if __name__ == "__main__":
    main()
