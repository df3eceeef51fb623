"""Client quotas on the wire (KIP-13, KIP-55, KIP-124, KIP-219, KIP-257): measuring,
throttling, and the DescribeClientQuotas / AlterClientQuotas APIs.

Three quotas, each its own manager as Kafka's ClientQuotaManagers:
``producer_byte_rate`` (a Produce request's bytes), ``consumer_byte_rate`` (a Fetch
response's bytes) and ``request_percentage`` (handler time as a percentage of one
thread, KIP-124). Which quota applies to a connection's (user, client id) is Kafka's
precedence (KIP-55), per quota key: the first of
  user+client-id, user+<default client-id>, user, <default user>+client-id,
  <default user>+<default client-id>, <default user>, client-id, <default client-id>
that sets it. Clients sharing the entity share the measured rate: a quota of
``--entity-type users --entity-name alice`` is alice's over all her client ids, one of
``--entity-type clients --entity-default`` each client id's own.

A rate is Kafka's Rate over ``quota.window.num`` samples of ``quota.window.size.seconds``
(the span it divides by is at least the full windows less one, so a new client is not
throttled for its first burst). When a request takes the rate over the bound, the
throttle time is Kafka's: (rate - bound) / bound * the measured span, at most the whole
window. As Kafka since KIP-219 the response goes at once with ``throttle_time_ms`` set,
then the connection is muted that long (the broker reads nothing more from it); a
throttled Fetch answers empty, its bytes not counted, and a Fetch never carries more than
the quota over the full windows less one (Kafka's bound, so one answer cannot overrun
it; the first batch still goes whole, as KIP-74 wants). The in-process face has no quotas.
"""

from __future__ import annotations

import logging
import threading
import time

from pylog.common.acl import CLUSTER_NAME, Operation
from pylog.errors import ErrorCode, PylogError
from pylog.protocol import ApiKey
from pylog.protocol import messages as m

from .authorizer import CLUSTER, allowed
from .errors import NONE, error_code

__all__ = ["QuotaManagers", "describe_client_quotas", "alter_client_quotas"]

log = logging.getLogger(__name__)

USER, CLIENT_ID = "user", "client-id"
PRODUCE, FETCH, REQUEST = "producer_byte_rate", "consumer_byte_rate", "request_percentage"
#: Requests the request quota never throttles (the connection's set-up).
EXEMPT = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.API_VERSIONS, ApiKey.SASL_AUTHENTICATE})


class Rate:
    """Kafka's Rate over a SampledStat: `num` samples of `window_s` seconds each."""

    __slots__ = ("num", "window_s", "samples")

    def __init__(self, num: int, window_s: float) -> None:
        self.num = num
        self.window_s = window_s
        self.samples: list[list[float]] = []        # [start, value], oldest first

    def record(self, value: float, now: float) -> None:
        samples = self.samples
        if not samples or now >= samples[-1][0] + self.window_s:
            samples.append([now, 0.0])
            if len(samples) > self.num:
                del samples[0]
        samples[-1][1] += value

    def _purge(self, now: float) -> None:
        horizon = now - self.num * self.window_s
        samples = self.samples
        while samples and samples[0][0] + self.window_s <= horizon:
            del samples[0]

    def span(self, now: float) -> float:
        """The seconds the rate divides by (Kafka's Rate.windowSize)."""
        elapsed = now - self.samples[0][0] if self.samples else 0.0
        full = int(elapsed // self.window_s)
        if full < self.num - 1:
            elapsed += (self.num - 1 - full) * self.window_s
        return max(elapsed, self.window_s)

    def measure(self, now: float) -> float:
        self._purge(now)
        return sum(s[1] for s in self.samples) / self.span(now)


class QuotaManagers:
    """The broker's three quota managers over the store's quota table."""

    def __init__(self, broker) -> None:
        self.broker = broker
        self.store = broker.store
        self._lock = threading.Lock()
        self._epoch = -1
        self._resolved: dict[tuple[str, str, str], tuple[float, tuple] | None] = {}
        self._rates: dict[tuple, Rate] = {}         # (quota key, user, client id) -> Rate

    @property
    def active(self) -> bool:
        return bool(self.store.client_quotas)

    def _quota(self, key: str, user: str, client_id: str) -> tuple[float, tuple] | None:
        """(bound, the rate's key) of the quota `key` for (user, client id), by KIP-55's
        precedence; None when no entity sets it."""
        if self.store.client_quota_epoch != self._epoch:
            with self._lock:
                self._resolved = {}    # (the rates go on: a changed bound applies to them)
                self._epoch = self.store.client_quota_epoch
        found = self._resolved.get((key, user, client_id), False)
        if found is not False:
            return found
        quotas = self.store.client_quotas
        u, c = (USER, user), (CLIENT_ID, client_id)
        du, dc = (USER, None), (CLIENT_ID, None)
        found = None
        for entity, tags in (((c, u), (user, client_id)), ((dc, u), (user, client_id)),
                             ((u,), (user, "")), ((c, du), (user, client_id)),
                             ((dc, du), (user, client_id)), ((du,), (user, "")),
                             ((c,), ("", client_id)), ((dc,), ("", client_id))):
            value = quotas.get(entity, {}).get(key)
            if value is not None:
                found = (value, (key, *tags))
                break
        self._resolved[(key, user, client_id)] = found
        return found

    def record(self, key: str, conn, client_id: str | None, value: float) -> int:
        """Records `value` for the connection's quota `key`; the throttle time (ms) it
        earns, 0 when within the quota or there is none."""
        user = conn.principal.partition(":")[2] if conn.principal else ""
        quota = self._quota(key, user, client_id or "")
        if quota is None:
            return 0
        bound, rate_key = quota
        cfg = self.broker.server_config
        now = time.monotonic()
        with self._lock:
            rate = self._rates.get(rate_key)
            if rate is None:
                rate = self._rates[rate_key] = Rate(cfg["quota.window.num"], cfg["quota.window.size.seconds"])
            rate.record(value, now)
            measured = rate.measure(now)
            if measured <= bound:
                return 0
            throttle = (measured - bound) / bound * rate.span(now)
        limit = cfg["quota.window.num"] * cfg["quota.window.size.seconds"]
        return int(min(throttle, limit) * 1000)

    def fetch_window_bytes(self, conn, client_id: str | None) -> int | None:
        """The most bytes one Fetch may carry under the connection's consumer_byte_rate
        (Kafka's getMaxValueInQuotaWindow: the quota over the full windows less one), so
        a response alone never overruns the quota; None without one."""
        user = conn.principal.partition(":")[2] if conn.principal else ""
        quota = self._quota(FETCH, user, client_id or "")
        if quota is None:
            return None
        cfg = self.broker.server_config
        return max(1, int(quota[0] * max(1, cfg["quota.window.num"] - 1) * cfg["quota.window.size.seconds"]))

    def unrecord(self, key: str, conn, client_id: str | None, value: float) -> None:
        user = conn.principal.partition(":")[2] if conn.principal else ""
        quota = self._quota(key, user, client_id or "")
        if quota is not None:
            with self._lock:
                rate = self._rates.get(quota[1])
                if rate is not None and rate.samples:
                    rate.samples[-1][1] -= value

    def throttle(self, conn, header, response, request_bytes: int, handler_s: float) -> None:
        """After a handler: records the produce bytes (Produce) and the handler's time;
        sets the response's throttle_time_ms to the larger throttle and mutes the
        connection that long (KIP-219). `response` None: acks=0 (mute only)."""
        key = header.api_key
        if key in EXEMPT:
            return
        throttle = self.record(REQUEST, conn, header.client_id, handler_s * 100.0)
        if key == ApiKey.PRODUCE:
            throttle = max(throttle, self.record(PRODUCE, conn, header.client_id, request_bytes))
        self._apply(conn, response, throttle)

    def throttle_fetch(self, conn, header, response, handler_s: float):
        """A Fetch response: its bytes against consumer_byte_rate. Over the quota it is
        answered empty (Kafka's throttled fetch: its bytes are not counted) with the
        throttle time; returns the response to send."""
        size = 0
        for topic in response.responses:
            for p in topic.partitions:
                size += getattr(p.records, "size", None) or len(p.records or b"")
        throttle = self.record(FETCH, conn, header.client_id, size)
        if throttle:
            self.unrecord(FETCH, conn, header.client_id, size)
            response = m.FetchResponse(throttle_time_ms=0, error_code=NONE,
                                       session_id=response.session_id, responses=[])
        throttle = max(throttle, self.record(REQUEST, conn, header.client_id, handler_s * 100.0))
        self._apply(conn, response, throttle)
        return response

    def _apply(self, conn, response, throttle: int) -> None:
        if throttle <= 0:
            return
        self.broker.stats["quota.throttled_requests"] += 1
        if response is not None and hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = max(response.throttle_time_ms or 0, throttle)
        conn.mute_for(throttle / 1000)


# ================================================================ the APIs

def describe_client_quotas(broker, conn, header, req):
    response = m.DescribeClientQuotasResponse(throttle_time_ms=0, error_code=NONE, entries=[])
    if not allowed(broker, conn, Operation.DESCRIBE_CONFIGS, CLUSTER, CLUSTER_NAME):
        response.error_code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        response.error_message = "Cluster authorization failed."
        response.entries = None
        return response
    try:
        found = broker.store.describe_client_quotas(
            [(c.entity_type, c.match_type, c.match) for c in req.components], req.strict)
    except PylogError as exc:
        response.error_code, response.error_message = error_code(exc)
        response.entries = None
        return response
    response.entries = [m.DescribeClientQuotasResponseEntryData(
        entity=[m.DescribeClientQuotasResponseEntityData(entity_type=t, entity_name=n) for t, n in entity],
        values=[m.DescribeClientQuotasResponseValueData(key=k, value=v) for k, v in sorted(values.items())])
        for entity, values in found.items()]
    return response


def alter_client_quotas(broker, conn, header, req):
    def entity(e):
        return [m.AlterClientQuotasResponseEntityData(entity_type=x.entity_type, entity_name=x.entity_name)
                for x in e.entity]
    if not allowed(broker, conn, Operation.ALTER_CONFIGS, CLUSTER, CLUSTER_NAME):
        return m.AlterClientQuotasResponse(throttle_time_ms=0, entries=[
            m.AlterClientQuotasResponseEntryData(error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
                                                 error_message="Cluster authorization failed.",
                                                 entity=entity(e)) for e in req.entries])
    outcomes = broker.store.alter_client_quotas(
        [([(x.entity_type, x.entity_name) for x in e.entity],
          [(op.key, op.value, op.remove) for op in e.ops]) for e in req.entries],
        validate_only=req.validate_only)
    entries = []
    for e, outcome in zip(req.entries, outcomes):
        code, message = (NONE, None) if outcome is None else error_code(outcome)
        entries.append(m.AlterClientQuotasResponseEntryData(error_code=code, error_message=message,
                                                            entity=entity(e)))
    return m.AlterClientQuotasResponse(throttle_time_ms=0, entries=entries)
