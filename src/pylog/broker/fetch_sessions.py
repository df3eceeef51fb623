"""Incremental fetch sessions (KIP-227) and topics by id in Fetch (v13+, KIP-516).

A consumer's first Fetch (session epoch 0) names every partition it reads; the broker
answers in full and hands back a session id. Its next fetches (epoch 1, 2, ...) name
only the partitions whose fetch position changed, and forget the ones it stopped reading;
the broker reads every partition of the session and answers only those with records,
an error, or a new high watermark, last stable offset or log start offset. A consumer
of 1,000 partitions then sends and receives a few bytes per idle fetch, not 1,000
partitions' worth.

Kafka's rules (FetchSession.scala, FetchSessionCache):
- epoch -1 (FINAL_EPOCH): a fetch without a session; a session id with it closes that
  session. Epoch 0 (INITIAL_EPOCH): a full fetch that closes the named session, if any,
  and opens a new one; its id is 0 when the cache has no room (the client goes on
  without a session).
- epoch > 0: the session must exist (FETCH_SESSION_ID_NOT_FOUND) and expect that epoch
  (INVALID_FETCH_SESSION_EPOCH); it may not switch between names and ids
  (FETCH_SESSION_TOPIC_ID_ERROR). The partitions named are added or updated, then the
  forgotten ones removed; the epoch moves on (wrapping to 1).
- partitions answered with records move to the end of the session's order, so a
  response full at fetch.max.bytes starts with the others next time.
- the cache holds ``max.incremental.fetch.session.cache.slots`` sessions; a new one may
  evict a session idle for EVICTION_MS, else the smallest session with fewer partitions
  than it that is older than EVICTION_MS.

The join with data_plane.fetch is two calls: :func:`begin` (before the fetch is planned:
it resolves topic ids to names and, for an incremental fetch, replaces the request's
topics with the session's) and :meth:`FetchContext.finish` (on the final response: it
drops the unchanged partitions, or opens the session).
"""

from __future__ import annotations

import base64
import itertools
import random
import time

from pylog.errors import ErrorCode
from pylog.protocol import messages as m
from pylog.protocol.codec import ZERO_UUID

__all__ = ["FetchSessionCache", "FetchContext", "begin", "INVALID_SESSION_ID"]

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
#: Kafka's KafkaBroker.MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: a session younger than
#: this (since its last use) is never evicted for a bigger one, nor as stale.
EVICTION_MS = 120_000


def _records_size(records) -> int:
    size = getattr(records, "size", None)        # a FileSlice (zero-copy) or bytes
    return len(records) if size is None else size


class _Cached:
    """One partition of a session: what the client asked last, what it was told last."""

    __slots__ = ("request", "hw", "lso", "log_start")

    def __init__(self, request) -> None:
        self.request = request          # the FetchRequestFetchPartition, topic-less
        self.hw = self.lso = self.log_start = -1   # never answered: the first answer goes out


class FetchSession:
    __slots__ = ("id", "epoch", "uses_ids", "parts", "names", "created_ms", "used_ms")

    def __init__(self, session_id: int, uses_ids: bool, now_ms: int) -> None:
        self.id = session_id
        self.epoch = 1                  # the epoch the next (incremental) fetch carries
        self.uses_ids = uses_ids
        #: (topic key, partition) -> _Cached, in fetch order; the topic key is the topic
        #: id (16 bytes) in a session of ids, else the name.
        self.parts: dict[tuple, _Cached] = {}
        #: topic key -> (name, topic id) as resolved when the partition joined.
        self.names: dict[object, tuple[str, bytes]] = {}
        self.created_ms = self.used_ms = now_ms


class FetchSessionCache:
    """The broker's sessions, by id. Used on the broker's event loop only (begin and
    finish run there; a heavy fetch's pool threads read only the topics begin built)."""

    def __init__(self, slots: int) -> None:
        self.slots = slots
        self._sessions: dict[int, FetchSession] = {}
        self._ids: dict[bytes, str] = {}            # topic id -> name, checked on each use

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def remove(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def create(self, uses_ids: bool, size: int) -> FetchSession | None:
        """A new session, or None when the cache is full and nothing may be evicted."""
        now = int(time.monotonic() * 1000)
        if self.slots <= 0:
            return None
        if len(self._sessions) >= self.slots and not self._evict(now, size):
            return None
        while True:
            sid = random.randint(1, 2**31 - 1)
            if sid not in self._sessions:
                break
        session = FetchSession(sid, uses_ids, now)
        self._sessions[sid] = session
        return session

    def _evict(self, now: int, size: int) -> bool:
        """Frees a slot for a session of `size` partitions: the stalest session idle for
        EVICTION_MS, else the smallest one smaller than `size` and older than EVICTION_MS."""
        idle = [s for s in self._sessions.values() if now - s.used_ms >= EVICTION_MS]
        if idle:
            victim = min(idle, key=lambda s: s.used_ms)
        else:
            smaller = [s for s in self._sessions.values()
                       if len(s.parts) < size and now - s.created_ms >= EVICTION_MS]
            if not smaller:
                return False
            victim = min(smaller, key=lambda s: len(s.parts))
        del self._sessions[victim.id]
        return True

    def resolver(self, store):
        """topic id -> name now, or "" for an id no topic has (a topic deleted and created
        again has a new id: its old one finds nothing). For one request: the id table is
        rebuilt at most once per resolver, however many unknown ids a request names."""
        refreshed = False

        def name(topic_id: bytes) -> str:
            nonlocal refreshed
            found = self._ids.get(topic_id)
            if found is not None and _id_bytes(store.topic_id(found)) == topic_id:
                return found
            if refreshed:
                return ""
            refreshed = True
            self._ids = {_id_bytes(store.topic_id(n)): n
                         for n in store.list_topics(include_internal=True)}
            return self._ids.get(topic_id, "")

        return name


def _id_bytes(topic_id: str | None) -> bytes | None:
    if topic_id is None:
        return None
    return base64.urlsafe_b64decode(topic_id + "=" * (-len(topic_id) % 4))


class FetchContext:
    """One fetch's view of its session: what :func:`begin` decided, finished by
    :meth:`finish` on the response."""

    __slots__ = ("cache", "session", "opening", "uses_ids", "error")

    def __init__(self, cache, session=None, opening=None, uses_ids=False, error=None) -> None:
        self.cache = cache
        self.session = session          # an incremental fetch's session
        self.opening = opening          # a full fetch that opens a session: its topics
        self.uses_ids = uses_ids
        self.error = error              # a FetchResponse to answer at once

    @property
    def size(self) -> int:
        """How many partitions the fetch reads beyond those its request names."""
        return len(self.session.parts) if self.session is not None else 0

    def finish(self, response):
        """The response to send: every partition for a full fetch (opening a session
        for epoch 0), the changed ones for an incremental fetch."""
        if self.session is not None:
            return self._incremental(response)
        if self.opening is not None:
            topics = self.opening
            session = self.cache.create(self.uses_ids, sum(len(t.partitions) for t in topics))
            if session is not None:
                for t in topics:
                    key = t.topic_id if self.uses_ids else t.topic
                    session.names[key] = (t.topic, t.topic_id)
                    for p in t.partitions:
                        session.parts[(key, p.partition)] = _Cached(p)
                for t in response.responses:
                    key = t.topic_id if self.uses_ids else t.topic
                    for p in t.partitions:
                        _remember(session.parts[(key, p.partition_index)], p)
                response.session_id = session.id
        return response

    def _incremental(self, response):
        session = self.session
        out = []
        moved = []
        for t in response.responses:
            key = t.topic_id if self.uses_ids else t.topic
            keep = []
            for p in t.partitions:
                cached = session.parts.get((key, p.partition_index))
                if cached is None:
                    continue
                has_records = _records_size(p.records) > 0
                if p.error_code or has_records or cached.hw != p.high_watermark or \
                        cached.lso != p.last_stable_offset or cached.log_start != p.log_start_offset:
                    _remember(cached, p)
                    keep.append(p)
                    if has_records:
                        moved.append((key, p.partition_index))
            if keep:
                t.partitions = keep
                out.append(t)
        for k in moved:                 # Kafka's fairness: answered partitions go last
            session.parts[k] = session.parts.pop(k)
        response.responses = out
        response.session_id = session.id
        return response


def _remember(cached: _Cached, p) -> None:
    cached.hw, cached.lso, cached.log_start = p.high_watermark, p.last_stable_offset, p.log_start_offset


def _error(code: int) -> FetchContext:
    return FetchContext(None, error=m.FetchResponse(throttle_time_ms=0, error_code=code,
                                                    session_id=INVALID_SESSION_ID, responses=[]))


def begin(broker, version: int, req) -> FetchContext:
    """Applies the request to its session: afterwards ``req.topics`` names every partition
    the fetch reads, by name (and id from v13), unless the context carries an error."""
    cache: FetchSessionCache = broker.fetch_sessions
    topic_name = cache.resolver(broker.store)
    uses_ids = version >= 13
    if uses_ids:
        broker.stats["fetch.by_id"] += 1
    sid, epoch = req.session_id, req.session_epoch
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if sid != INVALID_SESSION_ID:
            cache.remove(sid)
        if uses_ids:
            for t in req.topics:
                t.topic = topic_name(t.topic_id)
        opening = req.topics if epoch == INITIAL_EPOCH and version >= 7 else None
        return FetchContext(cache, opening=opening, uses_ids=uses_ids)
    session = cache.get(sid)
    if session is None:
        return _error(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
    if session.epoch != epoch:
        return _error(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
    if session.uses_ids != uses_ids:
        return _error(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
    session.epoch = 1 if epoch >= 2**31 - 1 else epoch + 1
    session.used_ms = int(time.monotonic() * 1000)
    for t in req.topics:
        key = t.topic_id if uses_ids else t.topic
        if key not in session.names:
            session.names[key] = ((topic_name(t.topic_id), t.topic_id)
                                  if uses_ids else (t.topic, ZERO_UUID))
        for p in t.partitions:
            cached = session.parts.get((key, p.partition))
            if cached is None:
                session.parts[(key, p.partition)] = _Cached(p)
            else:
                cached.request = p
    for t in req.forgotten_topics_data:
        key = t.topic_id if uses_ids else t.topic
        for p in t.partitions:
            session.parts.pop((key, p), None)
    if req.forgotten_topics_data:
        live = {k for k, _ in session.parts}
        session.names = {k: v for k, v in session.names.items() if k in live}
    req.topics = _session_topics(session)
    broker.stats["fetch.incremental"] += 1
    return FetchContext(cache, session=session, uses_ids=uses_ids)


def _session_topics(session: FetchSession) -> list:
    """The session's partitions as request topics, consecutive partitions of one topic
    grouped (a topic appears again after another's partitions moved between them)."""
    topics = []
    for key, group in itertools.groupby(session.parts.items(), key=lambda kv: kv[0][0]):
        name, tid = session.names[key]
        topics.append(m.FetchRequestFetchTopic(topic=name, topic_id=tid,
                                               partitions=[c.request for _, c in group]))
    return topics
