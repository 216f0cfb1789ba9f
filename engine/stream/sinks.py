"""Result sinks beyond SSE: a webhook observer and a NATS JetStream publisher per query.

A sink is one more reader of a query's :class:`~engine.stream.resultlog.ResultLog`, like an SSE
client: its own thread keeps a cursor (the id of the last event it delivered), is woken by the
log's listener and reads ``log.since(cursor)``. The log is the sink's bounded queue (``retain``
events), so a slow or unreachable destination never holds the evaluation back: when a sink
falls more than ``retain`` events behind, the oldest are dropped and counted (``dropped``).

Exactly once per instant id:

* the events are delivered one at a time in id order, each retried with exponential backoff
  (``0.5 s`` doubling up to ``retry_max_s``) until the destination takes it;
* the cursor is committed (fsynced, ``<data_dir>/results.sqlite``) after each delivery, so a
  restart neither resends delivered events nor skips undelivered ones; the one event that may
  be sent twice (a crash between the destination's answer and the commit) carries the same
  idempotency key both times: webhook header ``Idempotency-Key: <query>:<id>``, NATS header
  ``Nats-Msg-Id: <query>:<id>`` (JetStream drops the duplicate within its duplicate window).
* a destination that goes away (a NATS server stopped, a webhook receiver answering 5xx or a
  closed port) costs retries, never an instant: the NATS client reconnects on its own, and a
  publish that finds no stream (a server back without its JetStream state) creates the sink's
  stream again (``tests/test_result_sinks_outage.py``).

Destinations are allowed only when the operator lists them (``--webhook-allow`` URL prefixes,
``--nats-allow`` server addresses): anything else is refused with :class:`SinkRefused` (400).
A webhook URL has one spelling per destination, checked at registration and again at every
attempt, with a DNS name's addresses checked at connect time (:mod:`engine.stream.webhook`).
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson

from engine.errors import Category, JindouError
from engine.stream import webhook
from engine.stream.resultlog import ResultEvent, ResultLog

__all__ = ["SinkPolicy", "SinkSpec", "SinkRefused", "Sinks", "parse_sinks", "MAX_SINKS"]

log = logging.getLogger("jindou.stream")

MAX_SINKS = 16
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_STREAM = re.compile(r"[A-Za-z0-9_-]{1,64}")
_SUBJECT = re.compile(r"[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*")
_MIN_T = -(2**62)
_RETRY_FIRST_S = 0.5
_RETRY_STATUS = frozenset({408, 425, 429})
_NATS_RECONNECT_WAIT_S = 1.0


class SinkRefused(JindouError):
    """A sink definition that is malformed or names a destination the operator did not allow."""

    kind = "bad_sink"
    category = Category.BAD_REQUEST


def _split(value) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        value = value.split(",")
    return tuple(v.strip() for v in value if v and v.strip())


@dataclass(frozen=True)
class SinkPolicy:
    """What the operator allows: webhook URL prefixes and NATS servers; retry and timeout.
    ``resolve`` / ``refuse_address``: how a webhook's DNS name becomes addresses and which
    addresses a name may not lead to (:mod:`engine.stream.webhook`; tests pass their own
    resolver instead of real DNS)."""

    webhook_allow: tuple[str, ...] = ()
    nats_allow: tuple[str, ...] = ()
    retry_max_s: float = 30.0
    timeout_s: float = 10.0
    resolve: Callable[[str, int], list[str]] | None = field(default=None, compare=False, repr=False)
    refuse_address: Callable[[str], str | None] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def of(cls, webhook_allow=None, nats_allow=None, retry_max_s: float = 30.0,
           timeout_s: float = 10.0, **hooks) -> SinkPolicy:
        """From the settings' comma-separated lists; an entry that cannot match anything (not
        a webhook URL by :func:`~engine.stream.webhook.parse_url`, or one with a query; no
        nats/tls host) is left out with a warning."""
        hooks_, servers = [], []
        for e in _split(webhook_allow):
            try:
                if webhook.parse_url(e).query is not None:
                    raise webhook.BadURL("an allowed prefix has no query")
                hooks_.append(e)
            except webhook.BadURL as why:
                log.warning("--webhook-allow entry %r is ignored: %s", e, why)
        for e in _split(nats_allow):
            try:
                _nats_server(e)
                servers.append(e)
            except webhook.BadURL as why:
                log.warning("--nats-allow entry %r is ignored: it must be nats://host:port (%s)", e, why)
        return cls(tuple(hooks_), tuple(servers), float(retry_max_s), float(timeout_s), **hooks)

    def webhook_destination(self, url) -> webhook.Destination:
        """The one "allowed" decision for webhooks: ``url`` parsed by
        :func:`~engine.stream.webhook.parse_url` (one spelling per destination) and inside one
        of the operator's entries parsed the same way; :class:`SinkRefused` otherwise."""
        try:
            d = webhook.parse_url(url)
        except webhook.BadURL as e:
            raise SinkRefused(str(e)) from None
        if not self.webhook_allow:
            raise SinkRefused("webhook destinations are not allowed on this server: the operator lists "
                              "them with --webhook-allow")
        for entry in self.webhook_allow:
            if d.allowed_by(webhook.parse_url(entry)):
                return d
        raise SinkRefused(f"webhook destination {d.scheme}://{d.authority}{d.path} is not among the destinations "
                          "the operator allows (--webhook-allow)")

    def check_webhook(self, url) -> str:
        """The URL of an allowed destination, normalized (what the sink will request)."""
        return self.webhook_destination(url).url

    def check_nats(self, server) -> str:
        """The canonical ``scheme://host:port`` of an allowed NATS server (host and port read
        by the webhooks' parser: one spelling per address; IPv6 in brackets)."""
        if not isinstance(server, str) or not server or len(server) > 512:
            raise SinkRefused("a nats sink needs \"server\": nats://host:port")
        try:
            got = _nats_server(server)
        except webhook.BadURL as e:
            raise SinkRefused(f"a NATS server is nats://host:port or tls://host:port: {e}") from None
        if not self.nats_allow:
            raise SinkRefused("NATS destinations are not allowed on this server: the operator lists them "
                              "with --nats-allow")
        for entry in self.nats_allow:
            if _nats_server(entry) == got:
                return got
        raise SinkRefused(f"NATS server {got} is not among the servers the operator allows (--nats-allow)")


_NATS_URL = re.compile(r"(?i)(nats|tls)://([^/?#]*)/?")


def _nats_server(text: str) -> str:
    """``scheme://host:port`` of a NATS server address (:class:`~engine.stream.webhook.BadURL`)."""
    if not text.isascii() or not text.isprintable() or any(c.isspace() for c in text):
        raise webhook.BadURL("only printable ASCII without spaces")
    m = _NATS_URL.fullmatch(text if "://" in text else "nats://" + text)
    if m is None:
        raise webhook.BadURL("no path, query or fragment" if text.lower().startswith(("nats://", "tls://"))
                             or "://" not in text else "the scheme is nats:// or tls://")
    if "@" in m.group(2) or "\\" in m.group(2):
        raise webhook.BadURL("no user info")
    host, _ip, port = webhook.authority(m.group(2), 4222)
    return f"{m.group(1).lower()}://{f'[{host}]' if ':' in host else host}:{port}"


@dataclass(frozen=True)
class SinkSpec:
    name: str
    type: str                 # "webhook" | "nats"
    url: str | None = None    # webhook
    server: str | None = None  # nats
    subject: str | None = None
    stream: str | None = None  # nats: a JetStream stream created for the subject if missing

    def doc(self) -> dict:
        d = {"name": self.name, "type": self.type}
        for k in ("url", "server", "subject", "stream"):
            v = getattr(self, k)
            if v is not None:
                d[k] = v
        return d

    def config(self) -> str:
        return orjson.dumps(self.doc()).decode()


def parse_sinks(doc, policy: SinkPolicy) -> list[SinkSpec]:
    """The sinks of a ``PUT /queries/{name}/sinks`` body: ``{"sinks": [...]}`` or a list."""
    if isinstance(doc, dict) and set(doc) <= {"sinks"}:
        doc = doc.get("sinks", [])
    if not isinstance(doc, list):
        raise SinkRefused('the body is {"sinks": [{"type": "webhook", "url": ...} | {"type": "nats", '
                          '"server": ..., "subject": ...}, ...]}')
    if len(doc) > MAX_SINKS:
        raise SinkRefused(f"at most {MAX_SINKS} sinks per query, not {len(doc)}")
    out: list[SinkSpec] = []
    names: set[str] = set()
    for i, s in enumerate(doc):
        if not isinstance(s, dict):
            raise SinkRefused(f"sinks[{i}] is not an object")
        typ = s.get("type")
        allowed = {"webhook": {"type", "name", "url"}, "nats": {"type", "name", "server", "subject", "stream"}}
        if typ not in allowed:
            raise SinkRefused(f'sinks[{i}].type must be "webhook" or "nats"')
        extra = set(s) - allowed[typ]
        if extra:
            raise SinkRefused(f"sinks[{i}] has unknown members: {', '.join(sorted(map(str, extra)))[:200]}")
        name = s.get("name", f"{typ}-{i}")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise SinkRefused(f"sinks[{i}].name must be 1-64 characters of A-Z a-z 0-9 _ . -")
        if name in names:
            raise SinkRefused(f"two sinks are named {name!r}")
        names.add(name)
        if typ == "webhook":
            out.append(SinkSpec(name, typ, url=policy.check_webhook(s.get("url"))))
            continue
        subject, stream = s.get("subject"), s.get("stream")
        if not isinstance(subject, str) or len(subject) > 255 or not _SUBJECT.fullmatch(subject):
            raise SinkRefused(f"sinks[{i}].subject must be a NATS subject without wildcards "
                              "(tokens of A-Z a-z 0-9 _ - separated by dots)")
        if stream is not None and (not isinstance(stream, str) or not _STREAM.fullmatch(stream)):
            raise SinkRefused(f"sinks[{i}].stream must be 1-64 characters of A-Z a-z 0-9 _ -")
        out.append(SinkSpec(name, typ, server=policy.check_nats(s.get("server")), subject=subject,
                            stream=stream))
    return out


class _Retry(Exception):
    """A delivery failed in a way worth retrying; the text is ours (shown in the sink's status)."""


class _Permanent(Exception):
    """The destination refused the event for good (a 4xx): counted as failed, not retried."""


class Sink:
    """One sink's thread, cursor and counters (base of the webhook and NATS sinks)."""

    def __init__(self, query: str, spec: SinkSpec, rlog: ResultLog, store, policy: SinkPolicy,
                 delivered: int | None):
        self.query, self.spec, self.log, self.store, self.policy = query, spec, rlog, store, policy
        self.cursor = delivered
        # where a sink that never delivered reads from: what the log retains now and everything
        # after it is owed (so what the log drops before the sink reads is counted as dropped)
        self._start = rlog.before_oldest() if delivered is None else None
        self.delivered = self.retries = self.failed = self.dropped = self.duplicates = 0
        self.state = "running"
        self.last_error: str | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True, name=f"jindou-sink-{query}-{spec.name}")

    def start(self) -> None:
        self.log.add_listener(self._wake.set)
        self.thread.start()

    def signal_stop(self) -> None:
        self._stop.set()
        self._wake.set()
        self.log.remove_listener(self._wake.set)

    def stop(self, timeout: float = 10.0) -> None:
        self.signal_stop()
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout)

    def status(self) -> dict:
        d = self.spec.doc()
        last = self.log.last_id
        backlog = 0
        if last is not None:
            step = self.log.step or 1
            backlog = (last - self.cursor) // step if self.cursor is not None else len(self.log)
        d.update({"state": self.state, "delivered": self.delivered, "last_delivered": self.cursor,
                  "retries": self.retries, "failed": self.failed, "dropped": self.dropped,
                  "duplicates": self.duplicates, "backlog": max(0, backlog), "last_error": self.last_error})
        return d

    # -- the thread ----------------------------------------------------------------
    def _fetch(self) -> list[ResultEvent]:
        if self.cursor is not None:
            return self.log.since(self.cursor)
        if self._start is None:   # the log was empty when the sink was set: all of it is owed
            first = self.log.first_id
            if first is None:
                return self.log.since(None, from_t=_MIN_T)   # nothing appended yet: only an "end"
            self._start = first - 1
        return self.log.since(self._start)

    def _main(self) -> None:
        try:
            self._loop()
        except Exception:  # noqa: BLE001 - a sink must not take the server down
            log.exception("sink %s of continuous query %s stopped", self.spec.name, self.query)
            self.state = "failed"
        finally:
            try:
                self.close()
            except Exception:  # noqa: BLE001
                log.exception("closing sink %s of %s", self.spec.name, self.query)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.clear()
            evs = self._fetch()
            if not evs:
                self.idle_wait(1.0)
                continue
            for ev in evs:
                if self._stop.is_set():
                    return
                if ev.event == "end":
                    self.state = "ended"
                    return
                if ev.event == "gap":   # the log dropped events this sink had not delivered
                    g = orjson.loads(ev.data)
                    self.dropped += max(1, (g["resumed_at"] - g["missed_from"]) // (self.log.step or 1))
                    continue
                if not self._deliver_retrying(ev):
                    return
                if self.store is not None:   # committed before the status shows it
                    self.store.delivered(self.query, self.spec.name, ev.id)
                self.cursor = ev.id

    def _deliver_retrying(self, ev: ResultEvent) -> bool:
        """Deliver ``ev`` (retried with backoff); False if the sink was stopped meanwhile."""
        wait = _RETRY_FIRST_S
        while not self._stop.is_set():
            try:
                dup = self.deliver(ev)
            except _Permanent as e:
                self.failed += 1
                self.last_error = str(e)
                log.warning("sink %s of %s: instant %d refused: %s", self.spec.name, self.query, ev.id, e)
                return True
            except _Retry as e:
                self.retries += 1
                self.last_error = str(e)
                self.state = "retrying"
                self.sleep(wait)
                wait = min(wait * 2, max(_RETRY_FIRST_S, self.policy.retry_max_s))
                continue
            self.delivered += 1
            self.duplicates += bool(dup)
            self.state = "running"
            return True
        return False

    # -- overridden per kind -----------------------------------------------------------
    def idle_wait(self, timeout: float) -> None:
        self._wake.wait(timeout)

    def sleep(self, s: float) -> None:
        self._stop.wait(s)

    def deliver(self, ev: ResultEvent) -> bool:
        """Send one event; True if the destination says it already had it. Raises _Retry/_Permanent."""
        raise NotImplementedError

    def close(self) -> None:
        pass

    def restored(self) -> None:
        """Started again after a restart with its recorded progress (a crash may have come
        between a delivery and its record)."""


class WebhookSink(Sink):
    """POSTs each event's JSON to the URL (``Idempotency-Key: <query>:<id>``) with
    :func:`engine.stream.webhook.post`: the allow-list is checked again and a DNS name's
    addresses at every attempt; one deadline per attempt; only the status line is read."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._dest = webhook.parse_url(self.spec.url)

    def deliver(self, ev: ResultEvent) -> bool:
        p = self.policy
        try:   # the operator's list may have changed since the sink was set (a restart)
            p.webhook_destination(self.spec.url)
        except SinkRefused:
            raise _Retry("the destination is no longer among the operator's --webhook-allow") from None
        headers = {"Content-Type": "application/json", "Idempotency-Key": f"{self.query}:{ev.id}",
                   "X-Jindou-Query": self.query, "X-Jindou-Instant": str(ev.id), "X-Jindou-Event": ev.event}
        try:
            status = webhook.post(self._dest, ev.data, headers, p.timeout_s, p.resolve, p.refuse_address)
        except webhook.DeliveryError as e:
            raise _Retry(str(e)) from None
        if 200 <= status < 300:
            return False
        if status >= 500 or status in _RETRY_STATUS:
            raise _Retry(f"HTTP {status}")
        raise _Permanent(f"HTTP {status}" + (" (redirects are not followed)" if 300 <= status < 400 else ""))


class NatsSink(Sink):
    """Publishes each event to a JetStream subject (``Nats-Msg-Id: <query>:<id>``) on its own loop.

    JetStream drops a repeated ``Nats-Msg-Id`` only within the stream's duplicate window (2
    minutes by default). So where the sink cannot know what the subject holds -- restored after
    a restart (a crash may have come between a publish and the record of its progress), or
    after a publish whose answer was lost (a timeout, a dropped connection) -- it first reads
    the subject's last message: if that is this query's instant ``t`` with the data of the owed
    event ``t`` (not a message of an earlier query of that name), the owed events up to
    ``t`` were published (a sink publishes in order) and count as duplicates instead of being
    published again, however long the restart or the outage took. (Where that message cannot
    be read -- credentials that may only publish -- the duplicate window is the only guard.)"""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.loop = asyncio.new_event_loop()
        self._nc = None
        self._js = None
        self._uncertain = False           # look at the subject's last message before publishing
        self._published_upto: int | None = None   # this query's last instant found there

    def restored(self) -> None:
        self._uncertain = True

    def _run(self, coro, timeout: float):
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    async def _poll(self, until: float, event: threading.Event) -> None:
        # the loop keeps running (NATS pings, reconnects) while the thread waits
        while not event.is_set() and time.monotonic() < until:
            await asyncio.sleep(0.05)

    def idle_wait(self, timeout: float) -> None:
        self.loop.run_until_complete(self._poll(time.monotonic() + timeout, self._wake))

    def sleep(self, s: float) -> None:
        self.loop.run_until_complete(self._poll(time.monotonic() + s, self._stop))

    async def _connect(self) -> None:
        import nats

        async def _quiet(*_a, **_k):  # errors are retried and shown in the status, not logged per try
            return None

        self._nc = await nats.connect(servers=[self.spec.server], connect_timeout=self.policy.timeout_s,
                                      allow_reconnect=True, max_reconnect_attempts=-1,
                                      error_cb=_quiet, disconnected_cb=_quiet, reconnected_cb=_quiet,
                                      reconnect_to_server_handler=self._only_allowed_server)
        self._js = self._nc.jetstream(timeout=self.policy.timeout_s)
        await self._ensure_stream()

    def _only_allowed_server(self, servers, _info):
        """Reconnect to the allowed server only. A NATS server's INFO may list other servers
        (``connect_urls``, cluster discovery) and the client adds them to its pool: it would
        otherwise reconnect to any address the server names, past ``--nats-allow``."""
        mine = urllib.parse.urlsplit(self.spec.server).netloc
        for srv in servers:
            if srv.uri.netloc == mine:
                return srv, _NATS_RECONNECT_WAIT_S
        return None, _NATS_RECONNECT_WAIT_S   # not in the pool: the client's first server is ours

    async def _ensure_stream(self) -> None:
        """The sink's JetStream stream exists (created for the subject if it is missing)."""
        if self.spec.stream is None:
            return
        from nats.js.errors import NotFoundError

        try:
            await self._js.stream_info(self.spec.stream)
        except NotFoundError:
            await self._js.add_stream(name=self.spec.stream, subjects=[self.spec.subject])

    async def _publish(self, ev: ResultEvent) -> bool:
        headers = {"Nats-Msg-Id": f"{self.query}:{ev.id}", "Jindou-Query": self.query,
                   "Jindou-Instant": str(ev.id), "Jindou-Event": ev.event}
        ack = await self._js.publish(self.spec.subject, ev.data, headers=headers)
        return bool(getattr(ack, "duplicate", False))

    async def _last_published(self) -> tuple[int, bytes] | None:
        """The instant and data of this query's message last published on the subject (None:
        the subject's last message is none, or another query's)."""
        from nats.js.errors import NotFoundError

        try:
            stream = self.spec.stream or await self._js.find_stream_name_by_subject(self.spec.subject)
            msg = await self._js.get_last_msg(stream, self.spec.subject)
        except NotFoundError:
            return None
        query, _, t = str((msg.headers or {}).get("Nats-Msg-Id", "")).rpartition(":")
        return (int(t), bytes(msg.data or b"")) if query == self.query and t.isdigit() and len(t) <= 18 else None

    def _owed_upto(self, last: tuple[int, bytes] | None) -> int | None:
        """``last`` (the subject's last message) if it is one of the events this sink owes, with
        the same data -- not a message of an earlier registration of the query's name."""
        if last is None:
            return None
        t, data = last
        for ev in self._fetch():
            if ev.id == t:
                return t if ev.data == data else None
            if ev.id > t:
                break
        return None

    def deliver(self, ev: ResultEvent) -> bool:
        from nats import errors as nerr
        from nats.js import errors as jerr

        try:
            if self._nc is None or self._nc.is_closed:
                self._nc = None
                self._run(self._connect(), self.policy.timeout_s * 2)
            if self._uncertain:
                self._uncertain = False
                try:
                    self._published_upto = self._owed_upto(self._run(self._last_published(), self.policy.timeout_s))
                except Exception:  # noqa: BLE001 - e.g. credentials that may publish only: JetStream's
                    self._published_upto = None   # duplicate window is then the only guard
                    log.debug("nats sink %s of %s: the subject's last message is not readable", self.spec.name,
                              self.query, exc_info=True)
            if self._published_upto is not None and ev.id <= self._published_upto:
                return True   # published before the restart / the lost answer
            self._uncertain = True   # until the publish is acknowledged
            dup = self._run(self._publish(ev), self.policy.timeout_s)
            self._uncertain = False
            return dup
        except (nerr.NoRespondersError, jerr.NoStreamResponseError):
            # a NATS server that came back without its JetStream state (the client reconnected
            # on its own, so _connect did not run): the sink's stream is created again
            self._recreate_stream()
            raise _Retry("no JetStream stream captures the subject") from None
        except (TimeoutError, nerr.TimeoutError):
            raise _Retry("timeout") from None
        except (nerr.NoServersError, OSError):
            self._drop_connection()
            raise _Retry("cannot connect") from None
        except Exception:  # noqa: BLE001 - any other client error: retried, named by its class only
            log.debug("nats sink %s of %s", self.spec.name, self.query, exc_info=True)
            self._drop_connection()
            raise _Retry("publish failed") from None

    def _recreate_stream(self) -> None:
        if self.spec.stream is None or self._js is None:
            return
        try:
            self._run(self._ensure_stream(), self.policy.timeout_s)
        except Exception:  # noqa: BLE001 - retried with the delivery
            log.debug("nats sink %s of %s: cannot create stream %s", self.spec.name, self.query,
                      self.spec.stream, exc_info=True)

    def _drop_connection(self) -> None:
        nc, self._nc = self._nc, None
        if nc is not None:
            # the client's own tasks (a reconnect in progress) end with the connection; their
            # outcome is collected here, not left to the garbage collector (nats-py's reconnect
            # task fails when closed mid-reconnect; an unretrieved task exception is logged from
            # a GC pass at an arbitrary point of another thread)
            tasks = asyncio.all_tasks(self.loop)
            try:
                self._run(nc.close(), 5)
            except Exception:  # noqa: BLE001
                pass
            self._settle(tasks)

    def _settle(self, tasks) -> None:
        live = [t for t in tasks if not t.done()]
        for t in live:
            t.cancel()
        if live:
            try:
                self.loop.run_until_complete(asyncio.wait(live, timeout=5))
            except Exception:  # noqa: BLE001
                pass
        for t in tasks:
            if t.done() and not t.cancelled():
                t.exception()

    def close(self) -> None:
        self._drop_connection()
        self._settle(asyncio.all_tasks(self.loop))
        self.loop.close()


_KINDS = {"webhook": WebhookSink, "nats": NatsSink}


class Sinks:
    """Every query's sinks: started, replaced, stopped, restored after a restart."""

    def __init__(self, store=None, policy: SinkPolicy | None = None):
        self.store = store                      # ResultStore (data dir) or None: progress in memory only
        self.policy = policy or SinkPolicy()
        self._lock = threading.Lock()
        self._by_query: dict[str, dict[str, Sink]] = {}

    def start(self, policy: SinkPolicy, log_of) -> None:
        """Set the operator's policy and start the persisted sinks (``log_of(query)``: its log or
        None). A persisted sink whose destination is no longer allowed is not started (logged)."""
        self.policy = policy
        if self.store is None:
            return
        for query, name, config, delivered in self.store.sink_rows():
            try:
                rlog = log_of(query)
            except JindouError:   # its query is gone
                rlog = None
            if rlog is None:
                self.store.drop_sink(query, name)
                continue
            try:
                spec = parse_sinks([orjson.loads(config)], policy)[0]
            except (SinkRefused, ValueError) as e:
                log.warning("sink %s of continuous query %s is not started: %s", name, query, e)
                continue
            self._start(query, spec, rlog, delivered, restored=True)

    def _start(self, query: str, spec: SinkSpec, rlog: ResultLog, delivered: int | None,
               restored: bool = False) -> Sink:
        s = _KINDS[spec.type](query, spec, rlog, self.store, self.policy, delivered)
        if restored:
            s.restored()
        with self._lock:
            self._by_query.setdefault(query, {})[spec.name] = s
        s.start()
        return s

    def put(self, query: str, rlog: ResultLog, doc) -> list[dict]:
        """Replace the sinks of ``query`` by those of ``doc``. A sink kept with the same name and
        destination keeps its progress; a new one starts after the log's last event."""
        specs = parse_sinks(doc, self.policy)
        with self._lock:
            cur = dict(self._by_query.get(query, {}))
        keep = {s.name for s in specs if s.name in cur and cur[s.name].spec == s}
        for name, s in cur.items():
            if name not in keep:
                s.stop()
                with self._lock:
                    self._by_query.get(query, {}).pop(name, None)
                if self.store is not None:
                    self.store.drop_sink(query, name)
        for spec in specs:
            if spec.name in keep:
                continue
            start = rlog.last_id
            if self.store is not None:
                self.store.save_sink(query, spec.name, spec.config(), start)
            self._start(query, spec, rlog, start)
        return self.status(query)

    def status(self, query: str) -> list[dict]:
        with self._lock:
            sinks = list(self._by_query.get(query, {}).values())
        return [s.status() for s in sinks]

    def statuses(self) -> list[tuple[str, dict]]:
        """``(query, status)`` of every running sink (for ``/metrics``)."""
        with self._lock:
            sinks = [(q, s) for q, d in self._by_query.items() for s in d.values()]
        return [(q, s.status()) for q, s in sinks]

    def drop(self, query: str) -> None:
        """The query is deleted: stop its sinks (the store forgets their rows with the query)."""
        with self._lock:
            sinks = list(self._by_query.pop(query, {}).values())
        _stop_all(sinks)

    def close(self) -> None:
        with self._lock:
            sinks = [s for d in self._by_query.values() for s in d.values()]
            self._by_query.clear()
        _stop_all(sinks)


def _stop_all(sinks: list[Sink], timeout: float = 10.0) -> None:
    """Signal every sink first, then wait: one slow destination does not multiply the wait."""
    for s in sinks:
        s.signal_stop()
    deadline = time.monotonic() + timeout
    for s in sinks:
        if s.thread.is_alive():
            s.thread.join(max(0.0, deadline - time.monotonic()))
