"""Apache Kafka itself, for tests and benchmarks: its tool classes run against pylog (or a
real Kafka broker), and a real single-node Kafka broker in KRaft mode.

The jars come from Maven Central through tools/kafka/fetch (tools/kafka/pom.xml pins the
version) into a cache dir. Where Java or the jars are missing, tests skip with the reason;
in CI (``CI=true``) they fail instead: the CI machine must run them.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import select
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FETCH = ROOT / "tools" / "kafka" / "fetch"

TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "kafka-dump-log": "kafka.tools.DumpLogSegments",
    "kafka-storage": "kafka.tools.StorageTool",
    "kafka-server": "kafka.Kafka",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
}


def unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"CI must run Apache Kafka's checks: {reason}")
    pytest.skip(reason)


def kafka_libs() -> Path:
    """The jars' dir (fetched on first use)."""
    if shutil.which("java") is None:
        unavailable("java is not installed (Java 17+ runs Apache Kafka)")
    try:
        out = subprocess.run([str(FETCH)], check=True, capture_output=True, text=True, timeout=900)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
        unavailable(f"could not fetch Apache Kafka's jars with tools/kafka/fetch: {exc}")
    return Path(out.stdout.strip())


def java_command(tool: str, *args: str) -> list[str]:
    """The command line that runs one of Kafka's tools in a JVM of its own (the client
    compiler only and one GC thread: a short run's start costs less CPU)."""
    libs = kafka_libs()
    return ["java", "-Xmx512m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
            "-Dlog4j.configuration=file:/dev/null",
            "-cp", f"{libs}/*", TOOLS.get(tool, tool), *args]


def run_tool(tool: str, *args: str, input: str | None = None, timeout: float = 120,
             check: bool = True) -> subprocess.CompletedProcess:
    """Runs one of Kafka's command-line tools (by its script name) to completion: its
    unmodified main class, in this process's tool JVM (`ToolJvm`), or in a JVM of its own
    with PYLOG_KAFKA_TOOLS=jvm-each."""
    if os.environ.get("PYLOG_KAFKA_TOOLS") == "jvm-each":
        run = subprocess.run(java_command(tool, *args), input=input, capture_output=True,
                             text=True, timeout=timeout)
    else:
        run = ToolJvm.shared().run(TOOLS.get(tool, tool), args, input or "", timeout)
    if check and run.returncode != 0:
        raise AssertionError(f"{tool} {' '.join(args)} failed ({run.returncode}):\n"
                             f"{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    return run


def compiled(source: Path, libs: Path | None = None) -> str:
    """A Java source file of tests/kafka_reference/java compiled against Kafka's jars (or
    the jars in `libs`), once
    per machine (the source launcher compiles at every start: seconds on a loaded
    machine). The classes' dir is named by the hash of the source and the jars' dir, and
    renamed into place whole, so processes compiling at once agree on one copy."""
    if shutil.which("javac") is None:
        unavailable(f"no JDK (javac) to compile {source.name}")
    libs = libs or kafka_libs()
    key = hashlib.sha256(source.read_bytes() + str(libs).encode()).hexdigest()[:16]
    done = libs.parent / f"{source.stem}-{key}"
    if not done.is_dir():
        out = tempfile.mkdtemp(prefix=f"{source.stem}-", dir=libs.parent)
        javac = subprocess.run(["javac", "-nowarn", "-cp", f"{libs}/*", "-d", out, str(source)],
                               capture_output=True, text=True, timeout=300)
        if javac.returncode != 0:
            shutil.rmtree(out, ignore_errors=True)
            raise AssertionError(f"javac {source.name} failed:\n{javac.stderr[-3000:]}")
        try:
            os.rename(out, done)
        except OSError:                  # another process's copy is in place: the same classes
            shutil.rmtree(out, ignore_errors=True)
    return str(done)


class ToolJvm:
    """One JVM per test process that runs Kafka's tools one after another (KafkaTools.java):
    a tool's own JVM start (class loading, compilation) was seconds per run, most of
    tests/kafka_reference's time. Each run is the tool's unmodified main class with its
    arguments and stdin; its exit status is what it passed to Exit.exit. Runs are
    serialised; a run past its timeout kills the JVM (the next run starts another)."""

    _shared: ToolJvm | None = None
    _shared_lock = threading.Lock()

    @classmethod
    def shared(cls) -> ToolJvm:
        with cls._shared_lock:
            if cls._shared is None:
                cls._shared = cls()
                atexit.register(cls._shared.close)
            return cls._shared

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.command = ["java", "-Xmx512m", "-XX:+UseSerialGC", "-Dlog4j.configuration=file:/dev/null",
                        "-cp", f"{compiled(ROOT / 'tests' / 'kafka_reference' / 'java' / 'KafkaTools.java')}"
                               f":{kafka_libs()}/*", "KafkaTools"]

    def run(self, main_class: str, args, input: str, timeout: float) -> subprocess.CompletedProcess:
        words = [main_class, *args]
        request = struct.pack(">i", len(words)) + b"".join(_string(w.encode()) for w in words) \
            + _string(input.encode())
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                self.stderr = tempfile.TemporaryFile()
                self.proc = subprocess.Popen(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                             stderr=self.stderr)
            deadline = time.monotonic() + timeout
            try:
                self.proc.stdin.write(request)
                self.proc.stdin.flush()
                status, = struct.unpack(">i", self._read(4, deadline))
                out = self._read(struct.unpack(">i", self._read(4, deadline))[0], deadline)
                err = self._read(struct.unpack(">i", self._read(4, deadline))[0], deadline)
            except subprocess.TimeoutExpired:
                self._kill()
                raise subprocess.TimeoutExpired(words, timeout) from None
            except (OSError, EOFError) as exc:
                self.stderr.seek(0)
                died = self.stderr.read()[-3000:].decode(errors="replace")
                self._kill()
                raise RuntimeError(f"the Kafka tools' JVM died running {' '.join(words)}: {exc}\n"
                                   f"{died}") from None
        return subprocess.CompletedProcess(["java", *words], status, out.decode(errors="replace"),
                                           err.decode(errors="replace"))

    def _read(self, n: int, deadline: float) -> bytes:
        fd = self.proc.stdout.fileno()
        data = bytearray()
        while len(data) < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise subprocess.TimeoutExpired("KafkaTools", 0)
            chunk = os.read(fd, n - len(data))
            if not chunk:
                raise EOFError("the JVM closed its output")
            data += chunk
        return bytes(data)

    def _kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def close(self) -> None:
        with self.lock:
            if self.proc is not None and self.proc.poll() is None:
                self.proc.stdin.close()              # end of requests: it returns from main
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    pass
            self._kill()


def _string(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def create_topics(bootstrap: str, topics: dict[str, int],
                  configs: dict[str, dict[str, str]] | None = None) -> None:
    """Creates `topics` (name -> partitions; `configs`: name -> topic configs) in a Kafka
    broker with one CreateTopics request of librdkafka's admin client: a fixture's set-up,
    where starting kafka-topics' JVM per topic proved nothing and cost seconds each."""
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(name, partitions, 1, config=(configs or {}).get(name, {}))
                                   for name, partitions in topics.items()], operation_timeout=60)
    for future in futures.values():
        future.result(120)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _PortTaken(Exception):
    """Another process bound a port chosen for Kafka before Kafka did."""


class KafkaBroker:
    """A real Apache Kafka broker, single node, KRaft, on free ports of 127.0.0.1.

    A free port is only free until someone binds it: tests running beside this one (other
    pytest-xdist workers) bind ports of their own all the time. So the broker counts as
    started only when the answer on its port carries its own cluster id, and a fresh
    broker whose port was taken meanwhile starts again on other ports."""

    #: JVM options for a broker that only serves tests: the client compiler only and one GC
    #: thread start it on about two thirds of the CPU (benchmarks keep the JVM's defaults).
    FOR_TESTS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")

    def __init__(self, workdir: Path, jvm_options: tuple[str, ...] = (), **config: str) -> None:
        self.config = config
        self.jvm_options = list(jvm_options)
        self.cluster_id: str | None = None
        self.log_dir = workdir / "kafka-logs"
        self.properties = workdir / "server.properties"
        self._choose_ports()
        # Kafka logs through slf4j to reload4j (log4j 1.x): its warnings and errors go to
        # the broker's output file, where tests look for them.
        self.log4j = workdir / "log4j.properties"
        self.log4j.write_text("log4j.rootLogger=WARN, out\n"
                              "log4j.appender.out=org.apache.log4j.ConsoleAppender\n"
                              "log4j.appender.out.layout=org.apache.log4j.PatternLayout\n"
                              "log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n\n")
        self.proc: subprocess.Popen | None = None

    def _choose_ports(self) -> None:
        self.port = free_port()
        self.controller_port = free_port()
        while self.controller_port == self.port:
            self.controller_port = free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        settings = {
            "process.roles": "broker,controller", "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{self.controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.listener.names": "CONTROLLER", "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs": str(self.log_dir), "num.partitions": "1",
            "offsets.topic.replication.factor": "1", "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1", "group.initial.rebalance.delay.ms": "0",
            **self.config,
        }
        self.properties.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))

    def start(self, timeout: float = 300, format: bool = True) -> KafkaBroker:
        """Formats the storage (unless restarting on it) and starts the broker; a fresh
        broker whose port another process took first starts again on other ports. The
        deadline is generous: beside busy xdist workers a start took over 120 s."""
        for _ in range(3):
            if format:
                shutil.rmtree(self.log_dir, ignore_errors=True)     # a failed try's format
                self.cluster_id = _random_cluster_id()
                run_tool("kafka-storage", "format", "-t", self.cluster_id, "-c",
                         str(self.properties))
            try:
                return self._run(timeout)
            except _PortTaken as exc:
                if not format:          # its ports are in its stored metadata: no moving
                    raise RuntimeError(f"Kafka could not restart: {exc}") from None
                self._choose_ports()
        raise RuntimeError("Kafka's ports were taken by other processes three times running")

    def _run(self, timeout: float) -> KafkaBroker:
        self.stdout = open(self.properties.with_suffix(".log"), "a")
        self.proc = subprocess.Popen(["java", "-Xmx1G", "-Xms1G", *self.jvm_options,
                                      f"-Dlog4j.configuration=file:{self.log4j}",
                                      "-cp", f"{kafka_libs()}/*", TOOLS["kafka-server"],
                                      str(self.properties)], stdout=self.stdout, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stdout.close()
                logged = self.properties.with_suffix(".log").read_text()[-3000:]
                if "Address already in use" in logged:
                    raise _PortTaken(f"port {self.port} or {self.controller_port}: {logged}")
                raise RuntimeError(f"Kafka exited with {self.proc.returncode}: {logged}")
            # Ready when it answers Metadata with itself as a broker (a Python probe: a
            # JVM tool per attempt would add its own start-up to the broker's), and with
            # its own cluster id: not another test's broker that took the port.
            try:
                from pylog.protocol.client import ProtocolClient
                with ProtocolClient(self.bootstrap, timeout=5) as client:
                    answer = client.metadata()
            except Exception:           # not up yet (refused, or no answer)
                answer = None
            if answer is not None and self.cluster_id not in (None, answer.cluster_id):
                self.stop()
                raise _PortTaken(f"port {self.port} answers for cluster {answer.cluster_id}")
            if answer is not None and answer.brokers:
                return self
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"Kafka did not start in {timeout}s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "stdout", None):
            self.stdout.close()

    def output(self) -> str:
        """What the broker logged (warnings and errors) since it was first started."""
        return self.properties.with_suffix(".log").read_text()


def _random_cluster_id() -> str:
    """A Kafka Uuid; never one that starts with '-' (kafka-storage's parser would take it
    for an option: a 1-in-64 failure seen in CI)."""
    import base64
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text
