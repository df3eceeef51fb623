"""Listeners as Kafka names them: several at once, each advertising its own address to
the clients connected to it (Metadata, FindCoordinator, DescribeCluster), the config
keys' errors in Kafka's words, and SASL listeners serving nothing before SASL."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys

import pytest

import pylog
from pylog.broker import ServerConfig
from pylog.errors import ConfigError
from pylog.protocol import encode_request
from pylog.protocol import messages as m
from pylog.protocol.client import ProtocolClient


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_each_listener_advertises_its_own_address(tmp_path):
    """Three PLAINTEXT listeners (named INSIDE, OUTSIDE and REPLICATION through the
    protocol map) on one broker: a client on each is told that listener's address, by
    Metadata, FindCoordinator and DescribeCluster; OUTSIDE advertises the name it is
    given in advertised.listeners, the others their own address."""
    outside = free_port()
    config = {"listeners": f"INSIDE://127.0.0.1:0,OUTSIDE://127.0.0.1:{outside},"
                           f"REPLICATION://127.0.0.1:0",
              "advertised.listeners": f"OUTSIDE://localhost:{outside}",
              "listener.security.protocol.map": "INSIDE:PLAINTEXT,OUTSIDE:PLAINTEXT,"
                                                "REPLICATION:PLAINTEXT",
              "inter.broker.listener.name": "REPLICATION"}
    with pylog.open(tmp_path) as store, pylog.Broker(store, config=config) as broker:
        ports = {listener.name: listener.port for listener in broker.listeners}
        assert ports["OUTSIDE"] == outside and len(set(ports.values())) == 3
        assert broker.bootstrap_servers == f"127.0.0.1:{ports['INSIDE']}"   # the first
        expected = {"INSIDE": ("127.0.0.1", ports["INSIDE"]), "OUTSIDE": ("localhost", outside),
                    "REPLICATION": ("127.0.0.1", ports["REPLICATION"])}
        for name, (host, port) in expected.items():
            with ProtocolClient(f"127.0.0.1:{ports[name]}") as client:
                (advertised,) = client.metadata().brokers
                assert (advertised.host, advertised.port) == (host, port), name
                found = client.request(10, m.FindCoordinatorRequest(key="g", key_type=0,
                                                                    coordinator_keys=["g"]))
                coordinator = found.coordinators[0] if found.coordinators else found
                assert (coordinator.host, coordinator.port) == (host, port), name
                cluster = client.request(60, m.DescribeClusterRequest())
                assert [(b.host, b.port) for b in cluster.brokers] == [(host, port)], name


def test_pylog_serve_listens_on_every_listener_of_server_properties(tmp_path):
    """A server.properties with two listeners: `pylog serve` binds both and prints them."""
    plain, other = free_port(), free_port()
    props = tmp_path / "server.properties"
    props.write_text(f"log.dirs={tmp_path / 'data'}\n"
                     f"listeners=PLAINTEXT://127.0.0.1:{plain},OTHER://127.0.0.1:{other}\n"
                     f"listener.security.protocol.map=PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT\n")
    proc = subprocess.Popen([sys.executable, "-m", "pylog.cli", "serve", "--config", str(props),
                             "--log-level", "warning"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        assert first.strip().endswith(f" on 127.0.0.1:{plain}"), first
        assert f"OTHER://127.0.0.1:{other}" in proc.stdout.readline()
        for port in (plain, other):
            with ProtocolClient(f"127.0.0.1:{port}") as client:
                assert client.metadata().brokers[0].port == port
    finally:
        proc.terminate()
        proc.communicate(timeout=30)


@pytest.mark.parametrize("config, message", [
    ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"},
     "each listener must have a different name (PLAINTEXT appears twice)"),
    ({"listeners": "A://127.0.0.1:9092,B://127.0.0.1:9092",
      "listener.security.protocol.map": "A:PLAINTEXT,B:SSL"},
     "each listener must have a different port (A and B both use 9092)"),
    ({"listeners": "INTERNAL://:9092"}, "no security protocol defined for listener INTERNAL"),
    ({"listeners": "A://:9092", "listener.security.protocol.map": "A:TLS"},
     "'TLS' is not a security protocol (one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)"),
    ({"listener.security.protocol.map": "PLAINTEXT"},
     "'PLAINTEXT' is not LISTENER_NAME:SECURITY_PROTOCOL"),
    ({"listeners": "PLAINTEXT://127.0.0.1"}, "'127.0.0.1' is not host:port"),
    ({"listeners": "PLAINTEXT://127.0.0.1:99999"}, "is not host:port"),
    ({"advertised.listeners": "SSL://broker:9093"},
     "SSL is not in listeners: advertised.listeners listener names must be equal to or a "
     "subset of the ones defined in listeners"),
    ({"advertised.listeners": "PLAINTEXT://0.0.0.0:9092"},
     "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0"),
    ({"inter.broker.listener.name": "REPLICATION"},
     "inter.broker.listener.name = 'REPLICATION': it must be a listener name defined"),
    ({"inter.broker.listener.name": "PLAINTEXT", "security.inter.broker.protocol": "PLAINTEXT"},
     "Only one of inter.broker.listener.name and security.inter.broker.protocol should be set"),
    ({"security.inter.broker.protocol": "SSL"}, "no listener named SSL"),
    ({"listener.name.outside.ssl.keystore.location": "/x.pem"},
     "listener.name.outside.ssl.keystore.location: no listener is named 'outside' "
     "(listeners has PLAINTEXT"),
    ({"listener.name.plaintext.log.retention.ms": "5"},
     "listener.name.plaintext.log.retention.ms: not a key a listener sets for itself"),
    ({"ssl.client.auth": "always"},
     "ssl.client.auth = 'always': must be one of required, requested, none"),
])
def test_listener_configs_refused_with_the_rule_named(config, message):
    with pytest.raises(ConfigError) as err:
        ServerConfig(config)
    assert message in str(err.value)


def test_bare_host_port_is_a_plaintext_listener():
    (listener,) = ServerConfig({"listeners": "127.0.0.1:9092"}).listeners
    assert (listener.name, listener.security_protocol, listener.host, listener.port) == \
        ("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9092)
    names = ServerConfig({"listeners": "plaintext://[::1]:9092, ssl_outside://:9093",
                          "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,"
                                                            "SSL_OUTSIDE:SSL"}).listeners
    assert [(x.name, x.security_protocol, x.host) for x in names] == \
        [("PLAINTEXT", "PLAINTEXT", "::1"), ("SSL_OUTSIDE", "SSL", "")]


def _frame(s: socket.socket) -> bytes | None:
    s.settimeout(10)
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    size = struct.unpack(">i", head)[0]
    data = b""
    while len(data) < size:
        data += s.recv(size - len(data))
    return data


def test_a_sasl_listener_serves_nothing_before_authentication(tmp_path):
    """On a SASL_PLAINTEXT listener, ApiVersions is answered; a Metadata request before
    SASL authenticates closes the connection (Kafka: "Unexpected Kafka request of type
    METADATA during SASL handshake"), and no topic is created by it."""
    config = {"listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"}
    with pylog.open(tmp_path) as store, pylog.Broker(store, config=config) as broker:
        host, port = broker.bootstrap("SASL_PLAINTEXT").split(":")
        with socket.create_connection((host, int(port))) as s:
            s.sendall(encode_request(18, 3, 1, "t", m.ApiVersionsRequest(
                client_software_name="t", client_software_version="1")))
            assert _frame(s) is not None
            s.sendall(encode_request(3, 4, 2, "t", m.MetadataRequest(
                topics=[m.MetadataRequestMetadataRequestTopic(name="made-by-metadata")],
                allow_auto_topic_creation=True)))
            assert _frame(s) is None                      # closed
        assert "made-by-metadata" not in store.list_topics()
        with ProtocolClient(broker.bootstrap("PLAINTEXT")) as client:   # PLAINTEXT serves
            assert client.metadata().brokers
