"""KvpeerSecondaryTier: vLLM's secondary tier backed by the node's kvpeerd.

vLLM's own P2P tier (P2PSecondaryTierManager) runs the whole peer protocol
inside the engine: peers' lookups and fetches are served from the
scheduler's step, so a peer waits whenever the engine is busy in a long
prefill, and the engine process owns ZMQ sockets and a NIXL agent. This
tier hands all of that to kvpeerd, the per-node daemon: the engine only
talks to its local daemon over one Unix socket, and the daemon serves
peers from the CPU tier's shared region on its own. See docs/vllm.md.

Configuration (a `secondary_tiers` entry; unknown keys are accepted and
logged, since vLLM passes the whole entry and has added arguments before):

    {"type": "KvpeerSecondaryTier", "module_path": "kvpeer.vllm",
     "socket": "/run/kvpeer/kvpeerd.sock",
     "publish_budget_bytes": <bytes of CPU tier the daemon may serve from>}

No method waits on the daemon except `drain_jobs` and `shutdown` (vLLM's
blocking calls): requests go out on one pipelined connection and answers
are taken in by later calls. `hello` and `register_region` are sent when
the tier is built (so a node whose engine never had a request is
configured for peers), and their answers are taken in on a later call.

Works with both shapes of vLLM's interface (kvpeer.vllm.compat): chosen
from the imported classes when this module is imported.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Collection, Dict, Iterable, List, Optional

from vllm.v1.kv_offload.base import (  # type: ignore[import-not-found]
    LookupResult,
    OffloadPolicy,
    ReqContext,
    RequestOffloadingContext,
    ScheduleEndContext,
)
from vllm.v1.kv_offload.tiering.base import (  # type: ignore[import-not-found]
    JobResult,
    ParentManager,
    SecondaryTierManager,
    TransferJob,
)

from ..client import KvpeerError, ProtocolError
from ..pipelined import PipelinedClient, Reply
from . import answers, compat, identity
from .metrics import Counters, Names, definitions, reason_label
from .params import Dest, Source, parse_dest, parse_source
from .probes import HIT, MISS, Probe
from .publisher import PublishBook
from .region import open_region, region_path

__all__ = ["KvpeerSecondaryTier", "DEFAULT_SOCKET", "SHAPE"]

logger = logging.getLogger("kvpeer.vllm")

# The imported vLLM's interface shape; an ImportError naming what is
# missing if it is neither (vLLM's factory then reports it at start).
SHAPE = compat.detect(TransferJob, OffloadPolicy, SecondaryTierManager)

DEFAULT_SOCKET = "/run/kvpeer/kvpeerd.sock"
# Share of the CPU tier the daemon may serve from when publish_budget_bytes
# is not set: all of it. Published blocks hold no pin (docs/vllm.md section
# 3), so the budget costs vLLM no capacity; it bounds the daemon's index.
DEFAULT_BUDGET_FRACTION = 1.0
# Bounds for the two calls that may block.
DEFAULT_DRAIN_TIMEOUT_S = 90.0  # above the daemon's 60 s unmatched-supply timeout
DEFAULT_SHUTDOWN_TIMEOUT_S = 3.0
# A hello, or a step's poll (wait_ms 0), without an answer for this long: the
# daemon counts as lost (the connection is closed and opened again later).
DEFAULT_ANSWER_TIMEOUT_S = 5.0
# How long a long `poll` waits inside drain_jobs/shutdown (never on the step path).
_BLOCKING_POLL_MS = 50
# A lost daemon connection is tried again at most this often.
_RECONNECT_INTERVAL_S = 5.0
# A reconnect from the step path: a Unix socket connects at once or fails at once,
# unless the daemon's backlog is full.
_RECONNECT_TIMEOUT_S = 0.05
# Failed kv_request_ids remembered at most (oldest forgotten first); only ids of
# requests vLLM has not finished are recorded at all.
_MAX_FAILED = 4096

_KNOWN_KWARGS = {"socket", "publish_budget_bytes", "region_path", "client_name", "connect_timeout_s",
                 "drain_timeout_s", "shutdown_timeout_s", "answer_timeout_s", "hash_algo", "backpressure_detector"}


@dataclass
class _Load:
    kv_request_id: str
    blocks: int
    started: float


@dataclass
class _Supply:
    kv_request_id: str
    started: float


class _Digest:
    """The hash-seed digest derived on a thread of its own (scrypt releases
    the GIL), for a seed only known at the first request: the scheduler's
    thread never spends the KDF's time."""

    def __init__(self, seed: str) -> None:
        self.seed = seed
        self.value: Optional[str] = None
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, name="kvpeer-hash-seed", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.value = identity.hash_seed_digest(self.seed)
        except BaseException as e:  # reported by the tier, on its thread
            self.error = e

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()


class KvpeerSecondaryTier(SecondaryTierManager):
    """A vLLM SecondaryTierManager whose transfers kvpeerd performs."""

    def __init__(self, offloading_spec: Any, primary_kv_view: memoryview, tier_type: str = "KvpeerSecondaryTier",
                 socket: str = DEFAULT_SOCKET, publish_budget_bytes: Optional[int] = None,
                 region_path: Optional[str] = None, client_name: Optional[str] = None,
                 connect_timeout_s: float = 5.0, drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S,
                 shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S,
                 answer_timeout_s: float = DEFAULT_ANSWER_TIMEOUT_S, hash_algo: Optional[str] = None,
                 backpressure_detector: Any = None, **kwargs: Any) -> None:
        if SHAPE.backpressure:
            # vLLM after #50045: the factory passes the detector; the base keeps it (bp_detector).
            super().__init__(offloading_spec, primary_kv_view, tier_type, backpressure_detector=backpressure_detector)
        else:
            super().__init__(offloading_spec, primary_kv_view, tier_type)
            if backpressure_detector is not None:
                logger.warning("kvpeer tier: ignoring backpressure_detector: this vLLM's SecondaryTierManager "
                               "does not take one")
        if kwargs:
            logger.warning("kvpeer tier: ignoring unknown settings %s (known: %s)", sorted(kwargs),
                           sorted(_KNOWN_KWARGS))
        if not isinstance(socket, str) or not socket:
            raise ValueError(f"kvpeer tier: 'socket' must be a non-empty path, got {socket!r}")
        if hash_algo is not None and hash_algo not in identity.HASH_ALGOS:
            raise ValueError(f"kvpeer tier: 'hash_algo' must be one of {sorted(identity.HASH_ALGOS)} (vLLM's "
                             f"--prefix-caching-hash-algo), got {hash_algo!r}")
        engine_id = str(getattr(getattr(offloading_spec, "config", None), "engine_id", "") or "")
        if region_path is None:
            if not engine_id:
                raise ValueError("kvpeer tier: offloading_spec.config.engine_id is empty; set 'region_path'")
            region_path = _region_path_default(engine_id)
        self._region_path = region_path
        self._socket_path = socket
        self._client_name = client_name or f"vllm-{engine_id or os.getpid()}"
        self._connect_timeout_s = _positive(connect_timeout_s, "connect_timeout_s")
        self._drain_timeout_s = _positive(drain_timeout_s, "drain_timeout_s")
        self._shutdown_timeout_s = _positive(shutdown_timeout_s, "shutdown_timeout_s")
        self._answer_timeout_s = _positive(answer_timeout_s, "answer_timeout_s")
        self._config_fingerprint = identity.config_fingerprint(offloading_spec)

        # Checked now, so a misconfigured engine fails at start, not at the first request.
        region = open_region(region_path, primary_kv_view)
        self._num_blocks = region.num_blocks
        self._row_stride = region.row_stride
        region.close()
        region_bytes = self._num_blocks * self._row_stride
        if publish_budget_bytes is None:
            publish_budget_bytes = int(region_bytes * DEFAULT_BUDGET_FRACTION)
        if isinstance(publish_budget_bytes, bool) or not isinstance(publish_budget_bytes, int) \
                or publish_budget_bytes < 0:
            raise ValueError(f"kvpeer tier: 'publish_budget_bytes' must be an integer >= 0, "
                             f"got {publish_budget_bytes!r}")
        self._budget_bytes = publish_budget_bytes
        self._book = PublishBook(min(publish_budget_bytes // self._row_stride, self._num_blocks))

        # The hash seed: by vLLM's rule now where it is determined (the KDF
        # runs here, once per process); else at the first request.
        self._seed: Optional[str] = identity.seed_at_construction(hash_algo)
        self._digest: Optional[_Digest] = None
        self._seed_digest: Optional[str] = identity.hash_seed_digest(self._seed) if self._seed is not None else None
        self._seed_checked = False

        self._conn: Optional[PipelinedClient] = None
        self._hello_state = "none"  # none | sent | ready | refused
        self._hello_sent_at = 0.0
        self._broken: Optional[str] = None
        self._bad_answer: Optional[str] = None
        self._last_connect_attempt = 0.0
        self._node_id: Optional[str] = None

        self._finished: List[JobResult] = []
        self._loads: Dict[int, _Load] = {}
        self._stores: Dict[int, _Supply] = {}  # remote_decoder supply: job -> request
        self._publishing: Dict[int, float] = {}  # store jobs whose publish answer is owed -> submit time
        self._probes: Dict[str, Probe] = {}
        self._live: Dict[str, int] = {}  # kv_request_ids of requests vLLM has not finished
        self._failed: "OrderedDict[str, None]" = OrderedDict()
        self._poll_in_flight = False
        self._poll_deadline = 0.0  # a poll unanswered past this counts as a lost daemon
        self._owed = 0  # answers owed for requests other than poll
        self.counters = Counters()

        self._connect(self._connect_timeout_s)  # the daemon must be there at start
        self._session()  # hello + register_region now when the seed is known; answers taken in later

    # -- the connection --------------------------------------------------------------

    def _connect(self, timeout: float) -> None:
        self._last_connect_attempt = time.monotonic()
        self._conn = PipelinedClient(self._socket_path, connect_timeout=timeout)
        self._hello_state = "none"
        self._broken = None
        self._node_id = None
        self._bad_answer = None

    def _digest_now(self) -> Optional[str]:
        """The hash-seed digest, or None while it is being derived."""
        if self._seed_digest is not None:
            return self._seed_digest
        if self._digest is None:
            if self._seed is None:
                if not self._seed_checked:
                    return None  # vLLM resolves it after building the tier: wait for the first request
                self._seed = identity.vllm_hash_seed()  # vLLM has run init_none_hash by now
            self._digest = _Digest(self._seed)
            return None
        if not self._digest.done:
            return None
        if self._digest.error is not None:
            self._set_broken(f"hash seed digest failed: {self._digest.error}")
            return None
        self._seed_digest = self._digest.value
        self._digest = None
        return self._seed_digest

    def _session(self) -> Optional[PipelinedClient]:
        """The connection, with `hello` and `register_region` sent, to
        pipeline engine requests on; None while the daemon cannot be used.
        Never waits: the two answers are taken in by later calls."""
        conn = self._conn
        if conn is None or conn.closed:
            if time.monotonic() - self._last_connect_attempt < _RECONNECT_INTERVAL_S:
                return None
            try:
                self._connect(min(self._connect_timeout_s, _RECONNECT_TIMEOUT_S))
                logger.info("kvpeer tier: reconnected to %s", self._socket_path)
            except ConnectionError as e:
                self._broken = str(e)
                return None
            conn = self._conn
            assert conn is not None
        if self._hello_state == "none":
            digest = self._digest_now()
            if digest is None:
                return None
            self._say_hello(conn, digest)
            if conn.closed:
                return None
        elif self._hello_state == "sent" and time.monotonic() - self._hello_sent_at > self._answer_timeout_s:
            self._lose(f"kvpeerd did not answer hello within {self._answer_timeout_s:g} s")
            return None
        return None if self._broken else conn

    def _say_hello(self, conn: PipelinedClient, digest: str) -> None:
        self._hello_state = "sent"
        self._hello_sent_at = time.monotonic()
        self._send(conn, "hello", self._on_hello, client=self._client_name, block_len=self._row_stride,
                   config_fingerprint=self._config_fingerprint, hash_seed=digest)
        # Pipelined right behind hello: kvpeerd gives a read's descriptor to
        # the line that asks for one (docs/control-api.md, register_region),
        # so the region's line need not wait for hello's answer.
        try:
            region = open_region(self._region_path, self._primary_kv_view)
        except ValueError as e:
            self._set_broken(f"region {self._region_path}: {e}")
            return
        try:
            self._send(conn, "register_region", self._on_register, fds=[region.fd], fd=True,
                       num_blocks=region.num_blocks)
        finally:
            region.close()  # the daemon has its own copy once the line is sent

    def _send(self, conn: PipelinedClient, op: str, handler: Callable[[Reply], None], fds: Iterable[int] = (),
              owed: bool = True, **fields: Any) -> None:
        """Sends one request. An answer of the wrong shape (the handler
        raises) counts as a lost daemon, handled once the read is over; an
        `owed` request keeps has_pending_work() true until it is answered."""
        if owed:
            self._owed += 1

        def done(reply: Reply) -> None:
            if owed:
                self._owed -= 1
            if reply.error is not None and reply.error.code == "connection_closed":
                self._connection_lost(reply.error.message)
                return
            try:
                handler(reply)
            except Exception as e:  # noqa: BLE001 - any malformed answer ends the session
                if self._bad_answer is None:
                    self._bad_answer = f"{op}: {e}"

        try:
            conn.submit(op, done, fds=list(fds), **fields)
        except ProtocolError as e:  # the connection ended a moment ago, or the region's line could not go
            if owed:
                self._owed -= 1
            self._lose(str(e))
        except ValueError as e:  # a line beyond the control API's 16 MiB: refused here
            if owed:
                self._owed -= 1
            handler(Reply(op, {}, KvpeerError("too_large", str(e))))

    def _on_hello(self, reply: Reply) -> None:
        if reply.error is not None:
            self._hello_state = "refused"
            self._set_broken(f"hello refused: {reply.error}")
            return
        self._node_id = answers.hello_node_id(reply.response)
        self._hello_state = "ready"
        logger.info("kvpeer tier: engine session on node %s (kvpeerd %s), block_len %d, fingerprint %s",
                    self._node_id, reply.response.get("version"), self._row_stride, self._config_fingerprint)

    def _on_register(self, reply: Reply) -> None:
        if reply.error is not None and not self._broken:
            self._set_broken(f"register_region refused: {reply.error}")

    def _set_broken(self, reason: str) -> None:
        if self._broken is None:
            logger.error("kvpeer tier disabled: %s (lookups miss; loads and stores fail)", reason)
        self._broken = reason

    def _lose(self, reason: str) -> None:
        """Ends the daemon session on purpose (no hello answer, an answer of
        the wrong shape): everything owed fails once; reconnect later."""
        self._connection_lost(reason)  # first: its reason is the one logged and kept
        conn = self._conn
        if conn is not None and not conn.closed:
            conn.close()  # pending requests get connection_closed: nothing is left to fail

    def _connection_lost(self, reason: str) -> None:
        """The daemon session is gone, and with it every publication, load
        and supply: everything owed a result gets a failure, so vLLM
        releases its pins and recomputes."""
        if self._broken is None:  # the first reason stands (closing fails every request once more)
            logger.error("kvpeer tier: lost kvpeerd (%s); will reconnect", reason)
            self._broken = reason
        self._hello_state = "none"
        self._last_connect_attempt = time.monotonic()
        now = time.monotonic()
        loads, self._loads = self._loads, {}
        for job_id, load in loads.items():
            self._mark_failed(load.kv_request_id)
            self._load_failed(job_id, "peer_lost", now - load.started)
        stores, self._stores = self._stores, {}
        for job_id, supply in stores.items():
            self._finish(job_id, False, now - supply.started)
            self.counters.add(Names.STORES, 1, "failure")
        publishing, self._publishing = self._publishing, {}
        for job_id, started in publishing.items():
            self._finish(job_id, False, now - started)
        self._book.forget_all()
        for probe in self._probes.values():
            self._mark_failed(probe.kv_request_id)
        self._probes.clear()
        self._poll_in_flight = False

    def _take_answers(self) -> None:
        """Handles the answers that have arrived, never waiting. A daemon
        that breaks the framing or sends an answer of the wrong shape costs
        the session, not vLLM's scheduler."""
        conn = self._conn
        if conn is None or conn.closed:
            return
        try:
            conn.pump()
        except ProtocolError as e:
            self._lose(str(e))
            return
        if self._bad_answer is not None:
            reason, self._bad_answer = self._bad_answer, None
            self._lose(f"kvpeerd sent a malformed answer ({reason})")
            return
        if conn.closed:  # an end with no request waiting is noticed here
            self._connection_lost(conn.closed_reason or "connection closed")

    def _pump(self) -> Optional[PipelinedClient]:
        self._take_answers()
        conn = self._session()
        return conn if conn is not None and not conn.closed else None

    # -- results -----------------------------------------------------------------------

    def _finish(self, job_id: int, success: bool, transfer_time: float) -> None:
        self._finished.append(JobResult(job_id=job_id, success=success, transfer_time=max(0.0, transfer_time)))

    def _load_failed(self, job_id: int, reason: str, transfer_time: float = 0.0) -> None:
        self._finish(job_id, False, transfer_time)
        self.counters.add(Names.LOADS, 1, "failure")
        self.counters.add(Names.LOAD_FAILURES, 1, reason)

    def _mark_failed(self, kv_request_id: str) -> None:
        """The request's later lookups miss (vLLM recomputes). Recorded only
        while vLLM has not finished the request, and bounded."""
        if kv_request_id not in self._live:
            return
        self._failed[kv_request_id] = None
        self._failed.move_to_end(kv_request_id)
        while len(self._failed) > _MAX_FAILED:
            self._failed.popitem(last=False)

    # -- polling -----------------------------------------------------------------------

    def _send_poll(self, conn: PipelinedClient, wait_ms: int = 0) -> None:
        if self._poll_in_flight:
            if time.monotonic() > self._poll_deadline:
                self._lose(f"kvpeerd did not answer a poll within {self._answer_timeout_s:g} s")
            return
        self._poll_in_flight = True
        self._poll_deadline = time.monotonic() + wait_ms / 1000.0 + self._answer_timeout_s
        fields = {"wait_ms": wait_ms} if wait_ms else {}
        self._send(conn, "poll", self._on_poll, owed=False, **fields)

    def _on_poll(self, reply: Reply) -> None:
        self._poll_in_flight = False
        if reply.error is not None:
            logger.warning("kvpeer tier: poll refused: %s", reply.error)
            return
        answer = answers.poll(reply.response)
        for kv_request_id in answer.failed_requests:
            self._mark_failed(kv_request_id)
        for outcome in answer.results:
            self._on_job_result(outcome)
        # `released` slots gate nothing any more (the tier holds no pins): checked and ignored.

    def _on_job_result(self, outcome: answers.JobOutcome) -> None:
        job_id = outcome.job_id
        now = time.monotonic()
        load = self._loads.pop(job_id, None)
        if load is not None:
            if outcome.success:
                self._finish(job_id, True, now - load.started)
                self.counters.add(Names.LOADS, 1, "success")
                self.counters.add(Names.LOAD_BYTES, load.blocks * self._row_stride)
            else:
                self._mark_failed(load.kv_request_id)
                logger.info("kvpeer tier: load %s of %s failed: %s", job_id, load.kv_request_id, outcome.reason)
                self._load_failed(job_id, reason_label(outcome.reason), now - load.started)
            return
        supply = self._stores.pop(job_id, None)
        if supply is not None:
            self._finish(job_id, outcome.success, now - supply.started)
            self.counters.add(Names.STORES, 1, "success" if outcome.success else "failure")
            if not outcome.success:
                logger.info("kvpeer tier: supply job %s failed: %s", job_id, outcome.reason)
            return
        logger.warning("kvpeer tier: result for unknown job %r ignored", job_id)

    # -- SecondaryTierManager: requests ---------------------------------------------------

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        """Reads the request's role once. A prefill for a remote decoder asks
        for REQUEST_LEVEL offloading: the decoder fetches every block of the
        request, including prefix hits already in the CPU tier, so all of
        them must become supply (BLOCK_LEVEL/CHUNK_LEVEL would store only new ones)."""
        if not self._seed_checked:
            self._check_seed()
        self._pump()
        params = req_context.kv_transfer_params
        source = parse_source(params)
        dest = parse_dest(params)
        for kv_request_id in {r.kv_request_id for r in (source, dest) if r is not None and r.kv_request_id}:
            self._live[kv_request_id] = self._live.get(kv_request_id, 0) + 1
        if source is not None:
            req_context.set_state(source)
            if source.probe:
                self._probes.setdefault(source.kv_request_id, Probe(source.kv_request_id, source.peer))
        if dest is not None:
            req_context.set_state(dest)
            return RequestOffloadingContext(policy=SHAPE.request_policy)
        return RequestOffloadingContext(policy=SHAPE.incremental_policy)

    def _check_seed(self) -> None:
        """At the first request vLLM has resolved its seed: the one said in
        hello at construction must be it; otherwise the session is opened
        again with vLLM's (and the daemon refuses it if another hello fixed
        the node: the tier is then disabled, loudly)."""
        self._seed_checked = True
        if self._seed is None or self._digest is not None:
            return  # deferred: read now by _digest_now
        actual = identity.vllm_hash_seed()
        if actual == self._seed:
            return
        logger.error("kvpeer tier: vLLM's hash seed is not the one derived at start (set 'hash_algo' in the tier's "
                     "settings, or PYTHONHASHSEED); saying hello again with vLLM's")
        self._seed, self._seed_digest = actual, None
        self._lose("hash seed changed")
        self._last_connect_attempt = 0.0  # reconnect at once

    def lookup(self, key: bytes, req_context: ReqContext) -> LookupResult:
        source = req_context.get_state(Source)
        if source is None:
            return LookupResult.MISS
        # No reading here: every lookup of a step sees the same answers (taken
        # in at the step's first call), so a step never promotes some hits of
        # a round and leaves others for a round the load has already closed.
        if self._broken or source.kv_request_id in self._failed:
            return LookupResult.MISS
        if not source.probe:
            return LookupResult.HIT  # disaggregated decode: the prefiller has every block
        probe = self._probes.get(source.kv_request_id)
        if probe is None:
            probe = self._probes[source.kv_request_id] = Probe(source.kv_request_id, source.peer)
        answer = probe.answer(key if type(key) is bytes else bytes(key))
        if answer == HIT:
            return LookupResult.HIT
        if answer == MISS:
            return LookupResult.MISS
        return LookupResult.RETRY

    def touch(self, keys: Collection[bytes], req_context: ReqContext) -> None:
        self._book.touch(bytes(k) for k in keys)

    def on_request_finished(self, req_context: ReqContext) -> None:
        """Tells the daemon the request is done: its loads end, its probe
        round is closed on the peer; a prefiller's supply stays for the
        decoder (the daemon keeps store supply past finish)."""
        source = req_context.get_state(Source)
        dest = req_context.get_state(Dest)
        ids = {x.kv_request_id for x in (source, dest) if x is not None and x.kv_request_id}
        for kv_request_id in ids:
            left = self._live.get(kv_request_id, 0) - 1
            if left > 0:
                self._live[kv_request_id] = left
                continue
            self._live.pop(kv_request_id, None)
            self._failed.pop(kv_request_id, None)
            self._probes.pop(kv_request_id, None)
        conn = self._pump()
        if conn is None:
            return
        for kv_request_id in sorted(ids):
            self._send(conn, "finish", self._log_refusal("finish"), kv_request_id=kv_request_id)

    def _log_refusal(self, op: str) -> Callable[[Reply], None]:
        def handler(reply: Reply) -> None:
            if reply.error is not None:
                logger.warning("kvpeer tier: %s refused: %s", op, reply.error)
        return handler

    # -- SecondaryTierManager: jobs ---------------------------------------------------------

    def submit_load(self, job_metadata: TransferJob) -> None:
        started = time.monotonic()
        job_id = job_metadata.job_id
        keys = [bytes(k) for k in job_metadata.keys]
        slots = [int(b) for b in getattr(job_metadata, SHAPE.slots_field)]
        source = job_metadata.req_context.get_state(Source)
        if source is None:
            self._load_failed(job_id, "refused")
            return
        if not keys:
            self._finish(job_id, True, 0.0)
            return
        conn = self._pump()
        if conn is None or source.kv_request_id in self._failed:
            self._mark_failed(source.kv_request_id)
            self._load_failed(job_id, "refused" if conn is not None else "peer_lost")
            return
        # Slots this load writes that a peer may read: withdrawn first (the
        # daemon refuses the load with `conflict` if a peer's round still
        # pins one; the load then fails and vLLM recomputes).
        stale = self._book.withdraw_slots(slots)
        if stale:
            self._send(conn, "unpublish", self._on_unpublish, keys=[k.hex() for k in stale])
            self.counters.add(Names.PUBLISH_WITHDRAWALS, len(stale))
        self._loads[job_id] = _Load(source.kv_request_id, len(keys), started)
        probe = self._probes.get(source.kv_request_id)
        if probe is not None:
            probe.loaded()

        def on_answer(reply: Reply) -> None:
            if reply.error is None or job_id not in self._loads:
                return
            load = self._loads.pop(job_id)
            self._mark_failed(source.kv_request_id)
            logger.info("kvpeer tier: load %s of %s refused: %s", job_id, source.kv_request_id, reply.error)
            self._load_failed(job_id, "refused", time.monotonic() - load.started)

        self._send(conn, "load", on_answer, job_id=job_id, peer=source.peer, kv_request_id=source.kv_request_id,
                   keys=[k.hex() for k in keys], block_ids=slots)

    def submit_store(self, job_metadata: TransferJob) -> None:
        """vLLM has just written these blocks (and pins them until this job
        finishes). A remote decoder's: `store` supply. Otherwise they are
        published sealed, and the job finishes as soon as the daemon has
        answered the publish (it takes the seals before answering, so they
        are taken while vLLM still pins the slots)."""
        started = time.monotonic()
        job_id = job_metadata.job_id
        keys = [bytes(k) for k in job_metadata.keys]
        slots = [int(b) for b in getattr(job_metadata, SHAPE.slots_field)]
        dest = job_metadata.req_context.get_state(Dest)
        conn = self._pump()
        if dest is not None:
            self._supply(conn, job_id, dest, keys, slots, started)
            return
        if conn is None or not keys:
            self._finish(job_id, conn is not None, 0.0)
            return
        admission = self._book.admit(keys, slots)
        if admission.stale or admission.evict:
            self._send(conn, "unpublish", self._on_unpublish, keys=[k.hex() for k in admission.unpublish])
            self.counters.add(Names.PUBLISH_EVICTIONS, len(admission.evict))
            self.counters.add(Names.PUBLISH_WITHDRAWALS, len(admission.stale))
        if not admission.publish:
            self._finish(job_id, True, time.monotonic() - started)
            return
        pairs = admission.publish
        self._publishing[job_id] = started

        def on_publish(reply: Reply) -> None:
            started_at = self._publishing.pop(job_id, None)
            if started_at is None:
                return
            if reply.error is not None:
                logger.warning("kvpeer tier: publish of job %s refused: %s", job_id, reply.error)
                self._book.refused(pairs)
            self._finish(job_id, reply.error is None, time.monotonic() - started_at)

        self._send(conn, "publish", on_publish, keys=[k.hex() for k, _ in pairs], block_ids=[s for _, s in pairs],
                   seal=True)

    def _supply(self, conn: Optional[PipelinedClient], job_id: int, dest: Dest, keys: List[bytes],
                slots: List[int], started: float) -> None:
        """A prefiller's blocks for its remote decoder: the daemon's `store`
        (sealed), whose result comes once the decoder's fetch was served (or
        after the daemon's 60 s without one). The job stays open until then."""
        if conn is None or not dest.kv_request_id or not keys:
            ok = conn is not None and bool(dest.kv_request_id)
            self._finish(job_id, ok, 0.0)
            if not ok:
                self.counters.add(Names.STORES, 1, "failure")
            return
        # The slots hold these blocks now: other keys published at them are stale (the same
        # key at its slot, a prefix hit cascaded for REQUEST_LEVEL, stays published).
        stale = self._book.withdraw_others(keys, slots)
        if stale:
            self._send(conn, "unpublish", self._on_unpublish, keys=[k.hex() for k in stale])
            self.counters.add(Names.PUBLISH_WITHDRAWALS, len(stale))
        self._stores[job_id] = _Supply(dest.kv_request_id, started)

        def on_answer(reply: Reply) -> None:
            if reply.error is None or job_id not in self._stores:
                return
            supply = self._stores.pop(job_id)
            logger.warning("kvpeer tier: store %s for %s refused: %s", job_id, dest.kv_request_id, reply.error)
            self._finish(job_id, False, time.monotonic() - supply.started)
            self.counters.add(Names.STORES, 1, "failure")

        self._send(conn, "store", on_answer, job_id=job_id, kv_request_id=dest.kv_request_id,
                   keys=[k.hex() for k in keys], block_ids=slots, seal=True)

    def _on_unpublish(self, reply: Reply) -> None:
        if reply.error is not None:
            logger.error("kvpeer tier: unpublish refused: %s", reply.error)
            return
        answers.unpublish(reply.response)
        # `pinned` slots are still read by a peer's round; nothing waits for
        # them: the seal covers a slot vLLM reuses meanwhile (docs/vllm.md 3).

    def get_finished_jobs(self) -> Iterable[JobResult]:
        """The step's first call: takes in answers, asks again the probe
        keys answered `retry`, sends this step's `poll` (wait_ms 0) when a
        result or failure can come through it, and hands over every result
        gathered so far."""
        conn = self._pump()
        if conn is not None:
            for probe in self._probes.values():
                if not probe.asking and probe.has_retry:
                    keys = probe.take_retry()
                    if keys:
                        self._ask(conn, probe, keys, flush=False)
            if self._loads or self._stores or self._probes:
                self._send_poll(conn)
        if not self._finished:
            return ()
        finished, self._finished = self._finished, []
        return finished

    def _ask(self, conn: PipelinedClient, probe: Probe, keys: List[bytes], flush: bool) -> None:
        probe.asking = True

        def on_answer(reply: Reply) -> None:
            probe.asking = False
            if reply.error is not None:
                logger.info("kvpeer tier: lookup for %s refused: %s", probe.kv_request_id, reply.error)
                self._mark_failed(probe.kv_request_id)
                return
            for result in probe.record(keys, answers.lookup_results(reply.response, keys)):
                self.counters.add(Names.LOOKUPS, 1, result)

        fields: Dict[str, Any] = {"flush": True} if flush else {}
        self._send(conn, "lookup", on_answer, peer=probe.peer, kv_request_id=probe.kv_request_id,
                   keys=[k.hex() for k in keys], **fields)

    def serve_external_requests(self, parent: ParentManager) -> None:
        """Nothing to serve here: the daemon answers peers from the
        published blocks without the engine."""
        self._take_answers()

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        """End of step: this step's new probe keys go out, one `lookup`
        (with flush) per request."""
        if not self._probes:
            return
        conn = self._pump()
        if conn is None:
            return
        for probe in self._probes.values():
            if probe.asking or not probe.has_queued:
                continue  # queued keys of a probe being asked go with the next step's question
            keys = probe.take_queued()
            if keys:
                self._ask(conn, probe, keys, flush=True)

    def has_pending_work(self) -> bool:
        """True while anything is owed an answer: loads, supply, publishes
        and other requests in flight, probes, results not yet handed over.
        Published blocks are not work: an idle engine stays idle while
        peers are served."""
        self._take_answers()
        return bool(self._finished or self._loads or self._stores or self._publishing or self._owed
                    or any(p.pending for p in self._probes.values()))

    # -- draining and ending ------------------------------------------------------------------

    def _outstanding(self) -> bool:
        return bool(self._loads or self._stores or self._publishing or self._owed)

    def _wait_outstanding(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self._outstanding():
            conn = self._conn
            if conn is None or conn.closed or time.monotonic() >= deadline:
                return False
            polled = bool(self._loads or self._stores)
            if polled:
                self._send_poll(conn, wait_ms=_BLOCKING_POLL_MS)
            try:
                conn.wait(lambda: self._bad_answer is not None or not self._outstanding()
                          or (polled and not self._poll_in_flight),
                          min(_BLOCKING_POLL_MS / 1000.0 + 0.5, max(0.0, deadline - time.monotonic())))
            except ProtocolError as e:
                self._lose(str(e))
                return False
            self._take_answers()
        return True

    def drain_jobs(self) -> None:
        """Blocks until no job of this tier touches the CPU tier: loads and
        supply have their results, publishes their answers; everything
        published is withdrawn (vLLM's reset_cache is about to empty the CPU
        tier). Nothing is aborted (a load runs to its end or the daemon's
        timeout); supply no decoder fetches ends after the daemon's 60 s.
        Past drain_timeout_s the rest is reported failed."""
        conn = self._pump()
        if conn is not None:
            keys = self._book.unpublish_all()
            if keys:
                self._send(conn, "unpublish", self._on_unpublish, keys=[k.hex() for k in keys])
        if not self._wait_outstanding(self._drain_timeout_s):
            logger.error("kvpeer tier: drain_jobs gave up after %.0f s; reporting %d loads, %d supply jobs and "
                         "%d publishing jobs failed", self._drain_timeout_s, len(self._loads), len(self._stores),
                         len(self._publishing))
            self._fail_everything()

    def _fail_everything(self) -> None:
        now = time.monotonic()
        loads, self._loads = self._loads, {}
        for job_id, load in loads.items():
            self._mark_failed(load.kv_request_id)
            self._load_failed(job_id, "shutdown", now - load.started)
        stores, self._stores = self._stores, {}
        for job_id, supply in stores.items():
            self._finish(job_id, False, now - supply.started)
        publishing, self._publishing = self._publishing, {}
        for job_id, started in publishing.items():
            self._finish(job_id, False, now - started)

    def shutdown(self) -> None:
        """Withdraws everything and ends the engine session, waiting at most
        shutdown_timeout_s for loads to end."""
        conn = self._pump()
        if conn is not None:
            keys = self._book.unpublish_all()
            if keys:
                self._send(conn, "unpublish", self._on_unpublish, keys=[k.hex() for k in keys])
            for kv_request_id in sorted({load.kv_request_id for load in self._loads.values()}):
                self._send(conn, "finish", self._log_refusal("finish"), kv_request_id=kv_request_id)
            self._wait_outstanding(self._shutdown_timeout_s)
        self._fail_everything()
        self._book.forget_all()
        self._broken = "shut down"
        self._last_connect_attempt = float("inf")  # never again
        if self._conn is not None:
            self._conn.close()

    # -- metrics ---------------------------------------------------------------------------

    @classmethod
    def build_metric_definitions(cls, extra_config: Dict[str, Any]) -> Dict[str, Any]:
        return definitions()

    def get_stats(self) -> Any:
        self.counters.gauge(Names.PUBLISHED_BLOCKS, self._book.published_count)
        return self.counters.take()

    # -- for operators and tests ---------------------------------------------------------------

    @property
    def node_id(self) -> Optional[str]:
        return self._node_id

    @property
    def broken(self) -> Optional[str]:
        """Why the tier is not usable now, or None."""
        return self._broken

    @property
    def ready(self) -> bool:
        """The daemon has accepted this engine's hello."""
        return self._hello_state == "ready" and not self._broken

    @property
    def published_blocks(self) -> int:
        return self._book.published_count

    @property
    def budget_blocks(self) -> int:
        return self._book.budget_blocks

    @property
    def requests_in_flight(self) -> int:
        """Requests sent to the daemon whose answers have not been taken in
        (poll excluded)."""
        return self._owed


def _region_path_default(engine_id: str) -> str:
    return region_path(engine_id)


def _positive(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"kvpeer tier: '{name}' must be a positive number of seconds, got {value!r}")
    return float(value)
