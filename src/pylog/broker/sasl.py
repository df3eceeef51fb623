"""SaslHandshake and SaslAuthenticate on a listener without SASL, answered as Kafka answers
them on a PLAINTEXT listener.

Kafka lists both APIs in ApiVersions on every listener and, where the listener does not
authenticate, its request handler answers them with ILLEGAL_SASL_STATE (34): there is
no SASL exchange this connection could be in (measured against Kafka 4.1: SaslHandshake
v0-1 answer 34 with no mechanisms, SaslAuthenticate v0-2 answer 34 with Kafka's message
below, and the connection stays open). A client configured for SASL therefore fails
with Kafka's error, naming the state, instead of a closed connection.
"""

from __future__ import annotations

from pylog.protocol import messages as m

__all__ = ["sasl_handshake", "sasl_authenticate"]

ILLEGAL_SASL_STATE = 34


def sasl_handshake(broker, conn, header, req):
    return m.SaslHandshakeResponse(error_code=ILLEGAL_SASL_STATE, mechanisms=[])


def sasl_authenticate(broker, conn, header, req):
    return m.SaslAuthenticateResponse(
        error_code=ILLEGAL_SASL_STATE, auth_bytes=b"",
        error_message="SaslAuthenticate request received after successful authentication")
