"""SASL authentication of a connection (Kafka's SaslServerAuthenticator), and the SASL
requests on a connection that is not authenticating.

A connection to a SASL listener (SASL_PLAINTEXT, or SASL_SSL once its TLS handshake is
done) starts unauthenticated: its
:class:`Authenticator` sees every frame until the exchange completes, and lets through
only what Kafka's does, in Kafka's order:

    ApiVersions (optional, once; again after an UNSUPPORTED_VERSION answer, KIP-511)
    SaslHandshake (the mechanism; v1+: the tokens come in SaslAuthenticate requests,
                   v0: as raw size-prefixed tokens, answered the same way, KIP-43)
    SaslAuthenticate ... until the mechanism completes

Anything else before that closes the connection, as Kafka's does ("Unexpected Kafka
request of type ... during SASL handshake"). Bounds before authentication: a frame
above ``sasl.server.max.receive.size`` (Kafka's, 512 KiB) closes the connection before
it is read; a connection not authenticated ``pylog.connections.authentication.timeout.ms``
after it connected is closed (a loop timer; Kafka has no such bound).

Failures, as Kafka answers them: an unknown mechanism gets UNSUPPORTED_SASL_MECHANISM
(33) with the enabled ones; bad credentials SASL_AUTHENTICATION_FAILED (58) with
Kafka's message; both after ``connection.failed.authentication.delay.ms``, and the
connection closes. Then ``conn.principal`` is ``User:<name>`` (Kafka's
KafkaPrincipal), for the authorizer.

KIP-368 (``connections.max.reauth.ms`` > 0): SaslAuthenticate v1+ tells the client the
session's lifetime; past it, any request but a SaslHandshake closes the connection
(Kafka's expired-connection kill); a SaslHandshake (at most one a second) starts a
re-authentication with the same mechanism, which must end with the same principal.

On a listener without SASL (PLAINTEXT), and after authentication, SaslHandshake and
SaslAuthenticate are answered ILLEGAL_SASL_STATE (34) as Kafka's request handler answers
them (measured against Kafka 4.1 on a PLAINTEXT listener: SaslHandshake v0-1 with no
mechanisms, SaslAuthenticate v0-2 with the message below; the connection stays open).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import struct
from dataclasses import dataclass

from pylog.common import jaas, scram
from pylog.errors import ConfigError, ErrorCode, SaslAuthenticationError
from pylog.protocol import API_NAMES, ApiKey, MalformedMessageError, decode_request, frame_response
from pylog.protocol import messages as m

from .config import Listener, ServerConfig
from .sasl_mechanisms import PlainServer, ScramServer
from .tls_principal import ANONYMOUS

__all__ = ["SaslConfig", "Authenticator", "sasl_handshake", "sasl_authenticate", "ANONYMOUS"]

log = logging.getLogger(__name__)

#: Kafka's KafkaChannel.MIN_REAUTH_INTERVAL_ONE_SECOND_NANOS.
MIN_REAUTH_INTERVAL_S = 1.0
#: A pre-authentication request holds a few strings: more elements than this is not one.
_PRE_AUTH_ELEMENTS = 64

_i32 = struct.Struct(">i")
_api_key = struct.Struct(">h")


# ================================================================ handlers (after auth)

def sasl_handshake(broker, conn, header, req):
    return m.SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])


def sasl_authenticate(broker, conn, header, req):
    return m.SaslAuthenticateResponse(
        error_code=ErrorCode.ILLEGAL_SASL_STATE, auth_bytes=b"",
        error_message="SaslAuthenticate request received after successful authentication")


# ================================================================ configuration

@dataclass(frozen=True)
class SaslConfig:
    """One SASL listener's settings, resolved from the broker's keys (listener- and
    mechanism-prefixed ones first, as Kafka does)."""

    listener: Listener
    mechanisms: tuple[str, ...]
    plain_users: dict[str, str]
    reauth_ms: dict[str, int]            # per mechanism; 0: no session expiry
    max_receive_size: int
    failure_delay_s: float
    timeout_s: float

    @classmethod
    def of(cls, config: ServerConfig, listener: Listener) -> SaslConfig:
        """Raises ConfigError naming the key when the listener cannot authenticate
        anyone as configured."""
        prefix = f"listener.name.{listener.name.lower()}."
        if config["sasl.jaas.config"] is not None:
            raise ConfigError(
                f"sasl.jaas.config: a broker reads it only prefixed with the listener and the "
                f"mechanism, as Kafka's does (which ignores it with a warning): set "
                f"{prefix}plain.sasl.jaas.config")
        mechanisms = tuple(dict.fromkeys(config.for_listener("sasl.enabled.mechanisms", listener)))
        users: dict[str, str] = {}
        if "PLAIN" in mechanisms:
            users = _plain_users(config, listener)
        return cls(listener, mechanisms, users,
                   {mech: config.for_listener("connections.max.reauth.ms", listener, mech)
                    for mech in mechanisms},
                   config.for_listener("sasl.server.max.receive.size", listener),
                   config["connection.failed.authentication.delay.ms"] / 1000,
                   config["pylog.connections.authentication.timeout.ms"] / 1000)


def _plain_users(config: ServerConfig, listener: Listener) -> dict[str, str]:
    """PLAIN's users: listener.name.<l>.plain.sasl.jaas.config, else the JAAS file's
    <l>.KafkaServer or KafkaServer section (Kafka's JaasContext.loadServerContext)."""
    key = f"listener.name.{listener.name.lower()}.plain.sasl.jaas.config"
    if key in config:
        module, _ = entry = jaas.parse_jaas_config(config[key], key)
        if module != jaas.PLAIN_LOGIN_MODULE:
            raise ConfigError(f"{key}: PLAIN's login module is {jaas.PLAIN_LOGIN_MODULE}, not {module}")
        users = jaas.plain_users([entry])
        where = key
    elif config["pylog.sasl.jaas.file"]:
        path = config["pylog.sasl.jaas.file"]
        sections = jaas.parse_jaas_file(path)
        name = next((n for n in (f"{listener.name.lower()}.KafkaServer", "KafkaServer") if n in sections),
                    None)
        if name is None:
            raise ConfigError(f"pylog.sasl.jaas.file = {path!r}: no {listener.name.lower()}.KafkaServer "
                              f"or KafkaServer section")
        users = jaas.plain_users(sections[name])
        where = f"section {name} of {path}"
    else:
        raise ConfigError(f"PLAIN is in sasl.enabled.mechanisms but no PLAIN users are configured: "
                          f"set {key} = {jaas.PLAIN_LOGIN_MODULE} required user_<name>=\"<password>\"; "
                          f"(or pylog.sasl.jaas.file)")
    if not users:
        raise ConfigError(f"{where}: {jaas.PLAIN_LOGIN_MODULE} has no user_<name>=\"<password>\" option")
    return users


# ================================================================ the exchange

class State(enum.Enum):
    HANDSHAKE_OR_VERSIONS = "handshake or versions"    # the first request
    HANDSHAKE = "handshake"                            # after ApiVersions
    AUTHENTICATE = "authenticate"                      # tokens, until the mechanism completes
    REAUTH_HANDSHAKE = "re-authentication handshake"
    REAUTH_BAD_MECHANISM = "re-authentication with another mechanism"
    COMPLETE = "complete"


class _Close(Exception):
    """Ends the exchange: the connection closes (after the failure delay, with `answer`
    where Kafka sends one)."""

    def __init__(self, reason: str, answer: list | None = None) -> None:
        super().__init__(reason)
        self.answer = answer


class Authenticator:
    """A SASL listener's connection until it authenticates (and while it re-authenticates).
    Runs on the broker's event loop, in the connection's coroutine."""

    def __init__(self, conn, config: SaslConfig, now: float) -> None:
        self.conn = conn
        self.config = config
        self.state = State.HANDSHAKE_OR_VERSIONS
        self._timer: asyncio.TimerHandle | None = None
        self._arm(now)
        self.kafka_headers = False                 # SaslHandshake v1+: SaslAuthenticate frames
        self.mechanism: str | None = None
        self.server: PlainServer | ScramServer | None = None
        self.expires_at: float | None = None       # KIP-368 session end (loop time)
        self._reauth_started: float | None = None
        self._previous: tuple[str, str] | None = None    # (mechanism, principal) re-authenticating

    @property
    def complete(self) -> bool:
        return self.state is State.COMPLETE

    def _arm(self, now: float) -> None:
        """The authentication deadline: a loop timer closes the connection at it unless
        the exchange has completed by then."""
        self.cancel()
        self.deadline = now + self.config.timeout_s
        self._timer = self.conn.broker.loop.call_at(self.deadline, self._deadline_passed)

    def cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _deadline_passed(self) -> None:
        self._timer = None
        if self.complete or self.conn.writer.is_closing():
            return
        log.info("closing connection %s: not authenticated within "
                 "pylog.connections.authentication.timeout.ms", self.conn.peer)
        self.conn.broker.stats["sasl.authentication_timeouts"] += 1
        self.conn.close_on_loop()

    # ---------------------------------------------------------- after authentication

    def admit(self, frame, now: float) -> str:
        """An authenticated connection's request: "serve" it, "reauthenticate" (it is
        a SaslHandshake that begins a re-authentication: hand it to :meth:`receive`), or
        "expired" (close: the session outlived connections.max.reauth.ms)."""
        if self.expires_at is None:
            return "serve"
        if len(frame) >= 2 and _api_key.unpack_from(frame)[0] == ApiKey.SASL_HANDSHAKE and (
                self._reauth_started is None or now - self._reauth_started >= MIN_REAUTH_INTERVAL_S):
            self._reauth_started = now
            self._previous = (self.mechanism, self.conn.principal)
            self.state = State.REAUTH_HANDSHAKE
            self._arm(now)
            self.server = None
            return "reauthenticate"
        if now > self.expires_at:
            return "expired"
        return "serve"

    # ---------------------------------------------------------- before it

    async def receive(self, frame) -> bool:
        """One frame of the exchange; False: the connection closes."""
        try:
            if self.state in (State.AUTHENTICATE, State.REAUTH_BAD_MECHANISM) and not self.kafka_headers:
                return await self._raw_token(frame)
            if len(frame) < 8:
                raise _Close(f"a {len(frame)}-byte frame is not a request")
            api_key = _api_key.unpack_from(frame)[0]
            if self.state is State.AUTHENTICATE or self.state is State.REAUTH_BAD_MECHANISM:
                if api_key != ApiKey.SASL_AUTHENTICATE:
                    raise _Close(f"Unexpected Kafka request of type {_name(api_key)} during SASL "
                                 f"authentication.")
                return await self._authenticate(frame)
            if api_key == ApiKey.API_VERSIONS and self.state is State.HANDSHAKE_OR_VERSIONS:
                return await self._api_versions(frame)
            if api_key == ApiKey.SASL_HANDSHAKE:
                return await self._handshake(frame)
            raise _Close(f"Unexpected Kafka request of type {_name(api_key)} during SASL handshake.")
        except MalformedMessageError as exc:
            return await self._closed(_Close(f"malformed request: {exc}"))
        except _Close as exc:
            return await self._closed(exc)

    async def _api_versions(self, frame) -> bool:
        header, body, _ = decode_request(frame, _PRE_AUTH_ELEMENTS)
        if body is None:            # KIP-511: v0 answer with our ranges; the client retries
            response = self.conn.broker.api_versions_response(ErrorCode.UNSUPPORTED_VERSION)
            await self.conn._send(frame_response(header, response, version=0))
            return True
        await self.conn._send(await self.conn.broker.handle(self.conn, header, body))
        self.state = State.HANDSHAKE
        return True

    async def _handshake(self, frame) -> bool:
        header, body, problem = decode_request(frame, _PRE_AUTH_ELEMENTS)
        if body is None:
            raise _Close(problem)
        mechanism = body.mechanism
        self.conn.broker.stats["requests.SaslHandshake"] += 1
        enabled = list(self.config.mechanisms)
        if mechanism not in enabled:
            answer = frame_response(header, m.SaslHandshakeResponse(
                error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled))
            raise _Close(f"Unsupported SASL mechanism {mechanism}", answer)
        self.kafka_headers = header.api_version >= 1
        self.mechanism = mechanism
        if self._previous is not None and mechanism != self._previous[0]:
            self.state = State.REAUTH_BAD_MECHANISM     # the next token fails, as Kafka's
        else:
            self.server = self._server(mechanism)
            self.state = State.AUTHENTICATE
        await self.conn._send(frame_response(header, m.SaslHandshakeResponse(
            error_code=0, mechanisms=enabled)))
        return True

    def _server(self, mechanism: str):
        if mechanism == "PLAIN":
            return PlainServer(self.config.plain_users)
        return ScramServer(scram.MECHANISMS[mechanism], self.conn.broker.store.scram_credential)

    async def _authenticate(self, frame) -> bool:
        header, body, problem = decode_request(frame, _PRE_AUTH_ELEMENTS)
        if body is None:
            raise _Close(problem)
        self.conn.broker.stats["requests.SaslAuthenticate"] += 1
        try:
            token = self._evaluate(body.auth_bytes)
        except SaslAuthenticationError as exc:
            answer = frame_response(header, m.SaslAuthenticateResponse(
                error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=self._client_message(exc),
                auth_bytes=b""))
            raise _Close(f"authentication failed: {exc}", answer) from None
        lifetime = self._completed() if self.server.complete else 0
        await self.conn._send(frame_response(header, m.SaslAuthenticateResponse(
            error_code=0, error_message=None, auth_bytes=token, session_lifetime_ms=lifetime)))
        return True

    async def _raw_token(self, token) -> bool:
        """KIP-43 framing (after SaslHandshake v0): a bare token each way; a failure
        closes the connection without an answer, as Kafka's."""
        try:
            answer = self._evaluate(token)
        except SaslAuthenticationError as exc:
            raise _Close(f"authentication failed: {exc}") from None
        if self.server.complete:
            self._completed()
        await self.conn._send([_i32.pack(len(answer)) + answer])
        return True

    def _evaluate(self, token) -> bytes:
        if self.state is State.REAUTH_BAD_MECHANISM:
            exc = SaslAuthenticationError(
                f"SASL mechanism '{self.mechanism}' requested by client is not supported for "
                f"re-authentication of mechanism '{self._previous[0]}'")
            exc.client_message = True
            raise exc
        token = self.server.evaluate(token)
        if self.server.complete and self._previous is not None:
            principal = "User:" + self.server.authorization_id
            if principal != self._previous[1]:
                old, new = self._previous[1].split(":", 1), principal.split(":", 1)
                exc = SaslAuthenticationError(
                    f"Cannot change principals during re-authentication from {old[0]}.{old[1]}: "
                    f"{new[0]}.{new[1]}")
                exc.client_message = True
                raise exc
        return token

    def _client_message(self, exc: SaslAuthenticationError) -> str:
        if getattr(exc, "client_message", False):
            return str(exc)
        what = "re-authentication" if self._previous is not None else "authentication"
        return (f"Authentication failed during {what} due to invalid credentials with SASL "
                f"mechanism {self.mechanism}")

    def _completed(self) -> int:
        """The exchange succeeded: the principal is set; returns the session lifetime (ms)
        to tell the client (0: none)."""
        conn = self.conn
        conn.principal = "User:" + self.server.authorization_id
        lifetime = self.config.reauth_ms.get(self.mechanism, 0)
        now = conn.broker.loop.time()
        self.expires_at = now + lifetime / 1000 if lifetime > 0 else None
        if self._previous is None:
            log.debug("%s authenticated as %s with %s", conn.peer, conn.principal, self.mechanism)
            conn.broker.stats["sasl.authentications"] += 1
        else:
            log.debug("%s re-authenticated as %s", conn.peer, conn.principal)
            conn.broker.stats["sasl.reauthentications"] += 1
        self._previous = None
        self.server = None
        self.state = State.COMPLETE
        self.cancel()
        return lifetime

    async def _closed(self, exc: _Close) -> bool:
        """Logs why the exchange ends; sends Kafka's answer after the failure delay."""
        log.info("closing connection %s (listener %s): failed %s: %s", self.conn.peer,
                 self.config.listener.name,
                 "re-authentication" if self._previous is not None else "authentication", exc)
        self.conn.broker.stats["sasl.failed_authentications"] += 1
        if self.config.failure_delay_s > 0:
            await asyncio.sleep(self.config.failure_delay_s)
        if exc.answer is not None:
            await self.conn._send(exc.answer)
        return False


def _name(api_key: int) -> str:
    return API_NAMES.get(api_key, f"api key {api_key}")
