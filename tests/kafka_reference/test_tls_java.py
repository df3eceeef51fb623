"""Kafka's Java clients and tools over TLS against pylog, with PEM trust and key stores
(``ssl.truststore.type=PEM``, ``ssl.keystore.type=PEM``): kafka-topics administers,
the console producer and consumer (Kafka's Java producer and consumer) produce, consume
and join a group, kafka-consumer-groups describes it, over SSL and mutual TLS. A client
without a trusted certificate, and a broker with an untrusted or expired one, fail as
against Kafka's own broker (SslAuthenticationException: SSL handshake failed), which
runs beside pylog here with the same certificates. And the mTLS principal's
distinguished name is the text Java's X500Principal gives."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import pytest

import pylog
from broker.tls_certs import CLIENT_DN, KEY_PASSWORD, make_certs
from pylog.broker.tls_principal import subject_name

from .support import KafkaBroker, free_port, java_command, kafka_libs, run_tool, unavailable


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def broker(tmp_path_factory, certs):
    store = pylog.open(str(tmp_path_factory.mktemp("pylog")))
    config = {"listeners": "SSL://127.0.0.1:0,MTLS://127.0.0.1:0",
              "listener.security.protocol.map": "SSL:SSL,MTLS:SSL",
              "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server),
              "ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs.ca),
              "listener.name.mtls.ssl.client.auth": "required",
              "listener.name.mtls.ssl.principal.mapping.rules": "RULE:^CN=([^,]*),.*$/$1/,DEFAULT",
              "group.initial.rebalance.delay.ms": 0}
    b = pylog.Broker(store, config=config).start()
    try:
        yield store, b
    finally:
        b.shutdown()
        store.close()


def client_config(path: Path, certs, mtls: bool, ca: Path | None = None) -> str:
    """A Java client's properties: trust the test CA (PEM), and present the client's
    key and certificate (PEM, the key encrypted as Kafka wants a PEM key file) with mtls."""
    lines = ["security.protocol=SSL", "ssl.truststore.type=PEM",
             f"ssl.truststore.location={ca or certs.ca}"]
    if mtls:
        lines += ["ssl.keystore.type=PEM", f"ssl.keystore.location={certs.client_encrypted}",
                  f"ssl.key.password={KEY_PASSWORD}"]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("listener", ["SSL", "MTLS"])
def test_java_tools_administer_produce_consume_and_group_over_tls(broker, certs, tmp_path, listener):
    store, b = broker
    props = client_config(tmp_path / "client.properties", certs, listener == "MTLS")
    boot = ["--bootstrap-server", b.bootstrap(listener)]
    topic, group = f"java-{listener.lower()}", f"java-group-{listener.lower()}"
    run_tool("kafka-topics", *boot, "--command-config", props, "--create", "--topic", topic,
             "--partitions", "2", "--replication-factor", "1")
    assert store.partition_count(topic) == 2
    assert topic in run_tool("kafka-topics", *boot, "--command-config", props, "--list").stdout.split()
    lines = "".join(f"k{i}:value {i}\n" for i in range(40))
    run_tool("kafka-console-producer", *boot, "--producer.config", props, "--topic", topic,
             "--property", "parse.key=true", "--property", "key.separator=:", input=lines)
    stored = sorted(r.value for p in range(2) for r in store.log(topic, p).read(0).records())
    assert stored == sorted(b"value %d" % i for i in range(40))
    out = run_tool("kafka-console-consumer", *boot, "--consumer.config", props, "--topic", topic,
                   "--from-beginning", "--max-messages", "40", "--group", group).stdout
    assert sorted(out.splitlines()) == sorted(f"value {i}" for i in range(40))
    described = run_tool("kafka-consumer-groups", *boot, "--command-config", props, "--describe",
                         "--group", group).stdout
    assert topic in described
    assert [store.coordinator.committed(group, topic, p) for p in range(2)] == \
        [store.log(topic, p).log_end_offset for p in range(2)]


def _console_produce_fails(bootstrap: str, props: str, topic: str, log4j: Path) -> str:
    """What Kafka's console producer reports (its log included) sending one record."""
    cmd = java_command("kafka-console-producer", "--bootstrap-server", bootstrap,
                       "--producer.config", props, "--topic", topic,
                       "--producer-property", "max.block.ms=8000",
                       "--producer-property", "delivery.timeout.ms=8000",
                       "--producer-property", "request.timeout.ms=7000")
    cmd[cmd.index("-Dlog4j.configuration=file:/dev/null")] = f"-Dlog4j.configuration=file:{log4j}"
    run = subprocess.run(cmd, input="never\n", capture_output=True, text=True, timeout=120)
    return run.stdout + run.stderr


@pytest.fixture(scope="module")
def kafka(tmp_path_factory, certs):
    """Apache Kafka with the same SSL set-up: an SSL listener requiring client
    certificates (the test CA's), and one presenting the expired certificate."""
    kafka_libs()
    work = tmp_path_factory.mktemp("kafka")
    port, controller = free_port(), free_port()
    mtls, expired = free_port(), free_port()
    expired_store = work / "expired-enc.pem"
    subprocess.run(["openssl", "pkcs8", "-topk8", "-in", str(certs.dir / "expired.key"), "-out",
                    str(work / "expired-enc.key"), "-v1", "PBE-SHA1-3DES", "-passout",
                    f"pass:{KEY_PASSWORD}"], check=True, capture_output=True)
    expired_store.write_text((work / "expired-enc.key").read_text()
                             + (certs.dir / "expired.pem").read_text() + certs.ca.read_text())
    broker = KafkaBroker(work, KafkaBroker.FOR_TESTS, **{
        "listeners": f"PLAINTEXT://127.0.0.1:{port},MTLS://127.0.0.1:{mtls},"
                     f"EXPIRED://127.0.0.1:{expired},CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port},MTLS://127.0.0.1:{mtls},"
                                f"EXPIRED://127.0.0.1:{expired}",
        "controller.quorum.voters": f"1@127.0.0.1:{controller}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,MTLS:SSL,EXPIRED:SSL,"
                                          "CONTROLLER:PLAINTEXT",
        "ssl.keystore.type": "PEM", "ssl.keystore.location": str(certs.server_encrypted),
        "ssl.key.password": KEY_PASSWORD, "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs.ca),
        "listener.name.mtls.ssl.client.auth": "required",
        "listener.name.expired.ssl.keystore.location": str(expired_store)})
    broker.port = port
    broker.mtls, broker.expired = f"127.0.0.1:{mtls}", f"127.0.0.1:{expired}"
    broker.bootstrap = f"127.0.0.1:{port}"
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


def test_refused_handshakes_fail_as_against_kafka(broker, kafka, certs, tmp_path):
    """The Java producer without a client certificate against a listener requiring one,
    and against a broker whose certificate expired: the same SslAuthenticationException
    from pylog as from Kafka, with the same cause (CertificateExpiredException with the
    date; an SSLHandshakeException for the missing certificate, whose TLS 1.3 alert is
    OpenSSL's certificate_required where Java's broker sends bad_certificate), and
    pylog stores nothing."""
    store, b = broker
    store.create_topic("never", 1)
    run_tool("kafka-topics", "--bootstrap-server", kafka.bootstrap, "--create", "--topic", "never",
             "--partitions", "1", "--replication-factor", "1")
    plain = client_config(tmp_path / "plain.properties", certs, False)
    log4j = tmp_path / "log4j.properties"
    log4j.write_text("log4j.rootLogger=ERROR, err\n"
                     "log4j.appender.err=org.apache.log4j.ConsoleAppender\n"
                     "log4j.appender.err.Target=System.err\n"
                     "log4j.appender.err.layout=org.apache.log4j.PatternLayout\n"
                     "log4j.appender.err.layout.ConversionPattern=%p %m%n\n")
    time.sleep(1.1)                      # the expired certificate's notAfter has passed
    with pylog.open(tmp_path / "expired") as other, pylog.Broker(other, config={
            "listeners": "SSL://127.0.0.1:0", "ssl.keystore.type": "PEM",
            "ssl.keystore.location": str(certs.expired)}) as expired:
        other.create_topic("never", 1)
        cases = {"no client certificate": (b.bootstrap("MTLS"), kafka.mtls),
                 "expired broker certificate": (expired.bootstrap("SSL"), kafka.expired)}
        for case, (at_pylog, at_kafka) in cases.items():
            said = {who: _console_produce_fails(where, plain, "never", log4j)
                    for who, where in (("pylog", at_pylog), ("kafka", at_kafka))}
            found = {who: _failure(text) for who, text in said.items()}
            assert found["pylog"][0] == found["kafka"][0], (case, found)
            assert found["pylog"][1].split(":")[0] == found["kafka"][1].split(":")[0], (case, found)
        assert list(other.log("never", 0).read(0).records()) == []
    assert list(store.log("never", 0).read(0).records()) == []


def _failure(text: str) -> tuple[str, str]:
    """(the client's exception line, its root cause) from a Java client's log."""
    import re
    exception = re.search(r"(org\.apache\.kafka\.common\.errors\.\w+)", text)
    causes = re.findall(r"Caused by: ([^\n]*)", text)
    return (exception.group(1) if exception else "", causes[-1] if causes else "")


DN_JAVA = """
import java.io.FileInputStream;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
public class Dn {
    public static void main(String[] args) throws Exception {
        CertificateFactory f = CertificateFactory.getInstance("X.509");
        for (String path : args) {
            try (FileInputStream in = new FileInputStream(path)) {
                X509Certificate c = (X509Certificate) f.generateCertificate(in);
                System.out.println(c.getSubjectX500Principal().getName());
            }
        }
    }
}
"""

SUBJECTS = [  # openssl -subj syntax: backslash escapes; with -multivalue-rdn, + joins an RDN
    "/C=US/O=Acme, Inc./OU=payments/CN=alice",
    r"/CN=a\+b=c;d<e>f\"g\\h/OU= leading and trailing /O=#hash",
    "/DC=com/DC=example/UID=u123+CN=svc.kafka/emailAddress=svc@example.com",
    "/CN=J\u00fcrgen \u00dcnicode/L=Z\u00fcrich/ST=ZH/street=Bahnhofstrasse 1/serialNumber=42/title=Dr",
]


def test_distinguished_names_are_the_text_java_gives(tmp_path, certs):
    """pylog writes a certificate's subject as Java's X500Principal.getName() (the text
    Kafka's ssl.principal.mapping.rules see): RDN order, escapes, keywords, OIDs as
    #hex, multi-valued RDNs and UTF-8."""
    if shutil.which("javac") is None:
        unavailable("no JDK: the oracle is a Java source file")
    paths = []
    for i, subject in enumerate(SUBJECTS):
        key, cert = tmp_path / f"{i}.key", tmp_path / f"{i}.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:P-256", "-nodes", "-keyout", str(key), "-out", str(cert),
                        "-days", "2", "-utf8", "-multivalue-rdn", "-subj", subject],
                       check=True, capture_output=True)
        paths.append(cert)
    source = tmp_path / "Dn.java"
    source.write_text(DN_JAVA)
    run = subprocess.run(["java", str(source), *map(str, paths)], capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr.decode()
    java = run.stdout.decode("utf-8").splitlines()
    import ssl
    ours = [subject_name(ssl.PEM_cert_to_DER_cert(p.read_text())) for p in paths]
    assert ours == java
    assert java[0] == CLIENT_DN
