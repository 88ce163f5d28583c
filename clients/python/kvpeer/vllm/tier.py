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

Every method except `drain_jobs` and `shutdown` returns without waiting on
a peer: requests go out on one pipelined connection and answers are taken in
at the step's first call (`poll` with wait_ms 0, once per step). The one
wait is on the engine's own daemon, once, at the first request: the answer
to `hello` (bounded to 5 s), because the region's descriptor must reach the
daemon in a read of its own.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from typing import Any, Collection, Dict, Iterable, List, Optional, Set

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
from . import identity
from .metrics import Counters, Names, definitions, reason_label
from .params import Dest, Source, parse_dest, parse_source
from .probes import HIT, MISS, Probe
from .publisher import PublishBook
from .region import RegionFile, open_region, region_path

__all__ = ["KvpeerSecondaryTier", "DEFAULT_SOCKET"]

logger = logging.getLogger("kvpeer.vllm")

DEFAULT_SOCKET = "/run/kvpeer/kvpeerd.sock"
# Share of the CPU tier the daemon may serve from when publish_budget_bytes
# is not set: a quarter leaves vLLM most of its cache to evict from.
DEFAULT_BUDGET_FRACTION = 0.25
# Bounds for the two calls that may block.
DEFAULT_DRAIN_TIMEOUT_S = 90.0  # above the daemon's 60 s unmatched-supply timeout
DEFAULT_SHUTDOWN_TIMEOUT_S = 3.0
# How long a long `poll` waits inside drain_jobs/shutdown (never on the step path).
_BLOCKING_POLL_MS = 50
# A lost daemon connection is tried again at most this often.
_RECONNECT_INTERVAL_S = 5.0

_KNOWN_KWARGS = {"socket", "publish_budget_bytes", "region_path", "client_name", "connect_timeout_s",
                 "drain_timeout_s", "shutdown_timeout_s"}


@dataclass
class _Load:
    kv_request_id: str
    blocks: int


class KvpeerSecondaryTier(SecondaryTierManager):
    """A vLLM SecondaryTierManager whose transfers kvpeerd performs."""

    def __init__(self, offloading_spec: Any, primary_kv_view: memoryview, tier_type: str = "KvpeerSecondaryTier",
                 socket: str = DEFAULT_SOCKET, publish_budget_bytes: Optional[int] = None,
                 region_path: Optional[str] = None, client_name: Optional[str] = None,
                 connect_timeout_s: float = 5.0, drain_timeout_s: float = DEFAULT_DRAIN_TIMEOUT_S,
                 shutdown_timeout_s: float = DEFAULT_SHUTDOWN_TIMEOUT_S, **kwargs: Any) -> None:
        super().__init__(offloading_spec, primary_kv_view, tier_type)
        if kwargs:
            logger.warning("kvpeer tier: ignoring unknown settings %s (known: %s)", sorted(kwargs),
                           sorted(_KNOWN_KWARGS))
        if not isinstance(socket, str) or not socket:
            raise ValueError(f"kvpeer tier: 'socket' must be a non-empty path, got {socket!r}")
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
        if publish_budget_bytes > region_bytes // 2:
            logger.warning("kvpeer tier: publish_budget_bytes %d is more than half the CPU tier (%d bytes): "
                           "published blocks stay pinned, so vLLM has little left to evict and store into",
                           publish_budget_bytes, region_bytes)
        self._book = PublishBook(min(publish_budget_bytes // self._row_stride, self._num_blocks))

        self._conn: Optional[PipelinedClient] = None
        self._session_started = False
        self._broken: Optional[str] = None
        self._last_connect_attempt = 0.0
        self._node_id: Optional[str] = None

        self._finished: List[JobResult] = []
        self._loads: Dict[int, _Load] = {}
        self._stores: Dict[int, str] = {}  # job_id -> kv_request_id (remote_decoder supply)
        self._probes: Dict[str, Probe] = {}
        self._failed: Set[str] = set()
        self._poll_in_flight = False
        self._work_in_flight = 0  # answers owed for requests other than poll
        self.counters = Counters()

        self._connect()  # the daemon must be there at start; hello waits for the hash seed

    # -- the connection --------------------------------------------------------------

    def _connect(self) -> None:
        self._last_connect_attempt = time.monotonic()
        self._conn = PipelinedClient(self._socket_path, connect_timeout=self._connect_timeout_s)
        self._session_started = False
        self._broken = None
        self._node_id = None

    def _ensure_session(self) -> Optional[PipelinedClient]:
        """The connection with `hello` and `register_region` sent (they go
        first, on first use: vLLM's hash seed is known only after the tier is
        built); None while the daemon cannot be used."""
        if self._conn is None or self._conn.closed:
            if time.monotonic() - self._last_connect_attempt < _RECONNECT_INTERVAL_S:
                return None
            try:
                self._connect()
                logger.info("kvpeer tier: reconnected to %s", self._socket_path)
            except ConnectionError as e:
                self._broken = str(e)
                return None
        conn = self._conn
        assert conn is not None
        if self._session_started:
            return None if self._broken else conn
        self._session_started = True
        seed = identity.hash_seed_digest(identity.vllm_hash_seed())
        self._submit(conn, "hello", self._on_hello, client=self._client_name, block_len=self._row_stride,
                     config_fingerprint=self._config_fingerprint, hash_seed=seed)
        # The descriptor must ride on a line the daemon reads in a recvmsg of
        # its own: kvpeerd gives a chunk's descriptors to the line being
        # assembled when the chunk starts, so had `hello` arrived in the same
        # chunk, it would take them. Waiting for hello's answer (once, on the
        # local daemon) guarantees that.
        try:
            answered = conn.wait(lambda: self._node_id is not None or self._broken is not None, 5.0)
        except ProtocolError as e:
            self._connection_lost(str(e))
            return None
        if not answered:
            self._set_broken("kvpeerd did not answer hello within 5 s")
            return None
        if self._broken:
            return None
        region: Optional[RegionFile] = None
        try:
            region = open_region(self._region_path, self._primary_kv_view)
            self._submit(conn, "register_region", self._on_register, fds=[region.fd], fd=True,
                         num_blocks=region.num_blocks)
        except (ValueError, OSError) as e:
            self._set_broken(f"region {self._region_path}: {e}")
            return None
        finally:
            if region is not None:
                region.close()  # the daemon holds its own copy once the line is sent
        return None if self._broken else conn

    def _submit(self, conn: PipelinedClient, op: str, handler: Any, fds: Iterable[int] = (), **fields: Any) -> None:
        """Sends one request whose answer is owed before the tier is idle."""
        self._work_in_flight += 1

        def done(reply: Reply) -> None:
            self._work_in_flight -= 1
            if reply.error is not None and reply.error.code == "connection_closed":
                self._connection_lost(reply.error.message)
            handler(reply)

        try:
            conn.submit(op, done, fds=list(fds), **fields)
        except ProtocolError as e:  # the connection ended a moment ago
            done(Reply(op, {}, KvpeerError("connection_closed", str(e))))

    def _on_hello(self, reply: Reply) -> None:
        if reply.error is not None:
            self._set_broken(f"hello refused: {reply.error}")
            return
        self._node_id = reply.response.get("node_id")
        logger.info("kvpeer tier: engine session on node %s (kvpeerd %s), block_len %d, fingerprint %s",
                    self._node_id, reply.response.get("version"), self._row_stride, self._config_fingerprint)

    def _on_register(self, reply: Reply) -> None:
        if reply.error is not None and not self._broken:
            self._set_broken(f"register_region refused: {reply.error}")

    def _set_broken(self, reason: str) -> None:
        if self._broken is None:
            logger.error("kvpeer tier disabled: %s (lookups miss; loads and stores fail)", reason)
        self._broken = reason

    def _connection_lost(self, reason: str) -> None:
        """The daemon session is gone, and with it every publication, load
        and supply: everything owed a result gets a failure, so vLLM
        releases its pins and recomputes."""
        if self._broken is None:
            logger.error("kvpeer tier: lost kvpeerd (%s); will reconnect", reason)
        self._broken = reason
        for job_id, load in self._loads.items():
            self._failed.add(load.kv_request_id)
            self._load_failed(job_id, "peer_lost")
        self._loads.clear()
        for job_id in self._stores:
            self._finished.append(JobResult(job_id=job_id, success=False))
            self.counters.add(Names.STORES, 1, "failure")
        self._stores.clear()
        for job_id in self._book.forget_all():
            self._finished.append(JobResult(job_id=job_id, success=False))
        for probe in self._probes.values():
            self._failed.add(probe.kv_request_id)
        self._probes.clear()
        self._poll_in_flight = False

    def _take_answers(self) -> None:
        """Handles the answers that have arrived, never waiting. A daemon
        that breaks the framing contract costs the session, not vLLM's
        scheduler: the connection is closed and everything owed fails."""
        conn = self._conn
        if conn is None or conn.closed:
            return
        try:
            conn.pump()
        except ProtocolError as e:
            logger.error("kvpeer tier: %s", e)
            self._connection_lost(str(e))
            return
        if conn.closed:  # an end with no request waiting is noticed here
            self._connection_lost(conn.closed_reason or "connection closed")

    def _pump(self) -> Optional[PipelinedClient]:
        conn = self._ensure_session()
        self._take_answers()
        return conn if conn is not None and not conn.closed and not self._broken else None

    # -- polling -----------------------------------------------------------------------

    def _send_poll(self, conn: PipelinedClient, wait_ms: int = 0) -> None:
        if self._poll_in_flight:
            return
        self._poll_in_flight = True
        fields = {"wait_ms": wait_ms} if wait_ms else {}
        try:
            conn.submit("poll", self._on_poll, **fields)
        except ProtocolError as e:
            self._on_poll(Reply("poll", {}, KvpeerError("connection_closed", str(e))))

    def _on_poll(self, reply: Reply) -> None:
        self._poll_in_flight = False
        if reply.error is not None:
            if reply.error.code == "connection_closed":
                self._connection_lost(reply.error.message)
            else:
                logger.warning("kvpeer tier: poll refused: %s", reply.error)
            return
        for kv_request_id in reply.response.get("failed_requests", ()):
            self._failed.add(kv_request_id)
        for result in reply.response.get("results", ()):
            self._on_job_result(result)
        for slot in reply.response.get("released", ()):
            self._released(int(slot))

    def _on_job_result(self, result: Dict[str, Any]) -> None:
        job_id = result.get("job_id")
        success = result.get("success") is True
        load = self._loads.pop(job_id, None) if isinstance(job_id, int) else None
        if load is not None:
            if success:
                self._finished.append(JobResult(job_id=job_id, success=True))
                self.counters.add(Names.LOADS, 1, "success")
                self.counters.add(Names.LOAD_BYTES, load.blocks * self._row_stride)
            else:
                self._failed.add(load.kv_request_id)
                logger.info("kvpeer tier: load %s of %s failed: %s", job_id, load.kv_request_id,
                            result.get("reason"))
                self._load_failed(job_id, reason_label(result.get("reason")))
            return
        if isinstance(job_id, int) and self._stores.pop(job_id, None) is not None:
            self._finished.append(JobResult(job_id=job_id, success=success))
            self.counters.add(Names.STORES, 1, "success" if success else "failure")
            if not success:
                logger.info("kvpeer tier: supply job %s failed: %s", job_id, result.get("reason"))
            return
        logger.warning("kvpeer tier: result for unknown job %r ignored", job_id)

    def _load_failed(self, job_id: int, reason: str) -> None:
        self._finished.append(JobResult(job_id=job_id, success=False))
        self.counters.add(Names.LOADS, 1, "failure")
        self.counters.add(Names.LOAD_FAILURES, 1, reason)

    def _released(self, slot: int) -> None:
        job_id = self._book.release(slot)
        if job_id is not None:
            self._finished.append(JobResult(job_id=job_id, success=not self._book.take_failed(job_id)))

    # -- SecondaryTierManager: requests ---------------------------------------------------

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        """Reads the request's role once. A prefill for a remote decoder asks
        for REQUEST_LEVEL offloading: the decoder fetches every block of the
        request, including prefix hits already in the CPU tier, so all of
        them must become supply (BLOCK_LEVEL would store only new ones)."""
        self._pump()
        params = req_context.kv_transfer_params
        source = parse_source(params)
        dest = parse_dest(params)
        if source is not None:
            req_context.set_state(source)
            if source.probe:
                self._probes.setdefault(source.kv_request_id, Probe(source.kv_request_id, source.peer))
        if dest is not None:
            req_context.set_state(dest)
            return RequestOffloadingContext(policy=OffloadPolicy.REQUEST_LEVEL)
        return RequestOffloadingContext()

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
        probe = self._probes.setdefault(source.kv_request_id, Probe(source.kv_request_id, source.peer))
        answer = probe.answer(bytes(key))
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
            self._failed.discard(kv_request_id)
            self._probes.pop(kv_request_id, None)
        conn = self._pump()
        if conn is None:
            return
        for kv_request_id in sorted(ids):
            self._submit(conn, "finish", self._log_refusal("finish"), kv_request_id=kv_request_id)

    def _log_refusal(self, op: str) -> Any:
        def handler(reply: Reply) -> None:
            if reply.error is not None and reply.error.code != "connection_closed":
                logger.warning("kvpeer tier: %s refused: %s", op, reply.error)
        return handler

    # -- SecondaryTierManager: jobs ---------------------------------------------------------

    def submit_load(self, job_metadata: TransferJob) -> None:
        job_id = job_metadata.job_id
        keys = [bytes(k) for k in job_metadata.keys]
        slots = [int(b) for b in job_metadata.block_ids]
        source = job_metadata.req_context.get_state(Source)
        if source is None:
            self._load_failed(job_id, "refused")
            return
        if not keys:
            self._finished.append(JobResult(job_id=job_id, success=True))
            return
        conn = self._pump()
        if conn is None or source.kv_request_id in self._failed:
            self._failed.add(source.kv_request_id)
            self._load_failed(job_id, "refused" if conn is not None else "peer_lost")
            return
        self._loads[job_id] = _Load(source.kv_request_id, len(keys))
        probe = self._probes.get(source.kv_request_id)
        if probe is not None:
            probe.loaded()

        def on_answer(reply: Reply) -> None:
            if reply.error is None or job_id not in self._loads:
                return
            del self._loads[job_id]
            self._failed.add(source.kv_request_id)
            logger.info("kvpeer tier: load %s of %s refused: %s", job_id, source.kv_request_id, reply.error)
            self._load_failed(job_id, "refused")

        self._submit(conn, "load", on_answer, job_id=job_id, peer=source.peer,
                     kv_request_id=source.kv_request_id, keys=[k.hex() for k in keys], block_ids=slots)

    def submit_store(self, job_metadata: TransferJob) -> None:
        job_id = job_metadata.job_id
        keys = [bytes(k) for k in job_metadata.keys]
        slots = [int(b) for b in job_metadata.block_ids]
        dest = job_metadata.req_context.get_state(Dest)
        conn = self._pump()
        if dest is not None:
            self._supply(conn, job_id, dest, keys, slots)
            return
        if conn is None or not keys:
            self._finished.append(JobResult(job_id=job_id, success=conn is not None))
            return
        admission = self._book.admit(job_id, keys, slots)
        if admission.evict:
            self._submit(conn, "unpublish", self._on_unpublish, keys=[k.hex() for k in admission.evict])
            self.counters.add(Names.PUBLISH_EVICTIONS, len(admission.evict))
        if admission.finished_now:
            self._finished.append(JobResult(job_id=job_id, success=True))
            return
        published = [k for k, _ in admission.publish]

        def on_publish(reply: Reply) -> None:
            if reply.error is None:
                return
            if reply.error.code != "connection_closed":
                logger.warning("kvpeer tier: publish of job %s refused: %s", job_id, reply.error)
            finished = self._book.publish_failed(job_id, published)
            if finished is not None:
                self._book.take_failed(finished)
                self._finished.append(JobResult(job_id=finished, success=False))

        self._submit(conn, "publish", on_publish, keys=[k.hex() for k in published],
                     block_ids=[s for _, s in admission.publish], seal=True)

    def _supply(self, conn: Optional[PipelinedClient], job_id: int, dest: Dest, keys: List[bytes],
                slots: List[int]) -> None:
        """A prefiller's blocks for its remote decoder: the daemon's `store`
        (sealed), whose result comes once the decoder's fetch is served (or
        after the daemon's 60 s without one)."""
        if conn is None or not dest.kv_request_id or not keys:
            ok = conn is not None and bool(dest.kv_request_id)
            self._finished.append(JobResult(job_id=job_id, success=ok))
            if not ok:
                self.counters.add(Names.STORES, 1, "failure")
            return
        self._stores[job_id] = dest.kv_request_id

        def on_answer(reply: Reply) -> None:
            if reply.error is None or job_id not in self._stores:
                return
            del self._stores[job_id]
            logger.warning("kvpeer tier: store %s for %s refused: %s", job_id, dest.kv_request_id, reply.error)
            self._finished.append(JobResult(job_id=job_id, success=False))
            self.counters.add(Names.STORES, 1, "failure")

        self._submit(conn, "store", on_answer, job_id=job_id, kv_request_id=dest.kv_request_id,
                     keys=[k.hex() for k in keys], block_ids=slots, seal=True)

    def _on_unpublish(self, reply: Reply) -> None:
        if reply.error is not None:
            if reply.error.code != "connection_closed":
                logger.error("kvpeer tier: unpublish refused: %s", reply.error)
            return
        for slot in reply.response.get("released", ()):
            self._released(int(slot))
        # `pinned` slots are still read by a peer's round: a later poll's
        # `released` names them.

    def get_finished_jobs(self) -> Iterable[JobResult]:
        """The step's first call: takes in answers, asks again the probe
        keys answered `retry`, sends this step's `poll` (wait_ms 0) and
        hands over every result gathered so far."""
        conn = self._pump()
        if conn is not None:
            for probe in self._probes.values():
                if not probe.asking:
                    keys = probe.take_retry()
                    if keys:
                        self._ask(conn, probe, keys, flush=False)
            self._send_poll(conn)
        finished, self._finished = self._finished, []
        return finished

    def _ask(self, conn: PipelinedClient, probe: Probe, keys: List[bytes], flush: bool) -> None:
        probe.asking = True

        def on_answer(reply: Reply) -> None:
            probe.asking = False
            if reply.error is not None:
                if reply.error.code != "connection_closed":
                    logger.info("kvpeer tier: lookup for %s refused: %s", probe.kv_request_id, reply.error)
                self._failed.add(probe.kv_request_id)
                return
            for result in probe.record(keys, list(reply.response.get("results", ()))):
                self.counters.add(Names.LOOKUPS, 1, result)

        fields: Dict[str, Any] = {"flush": True} if flush else {}
        self._submit(conn, "lookup", on_answer, peer=probe.peer, kv_request_id=probe.kv_request_id,
                     keys=[k.hex() for k in keys], **fields)

    def serve_external_requests(self, parent: ParentManager) -> None:
        """Nothing to serve here: the daemon answers peers from the
        published blocks without the engine."""
        self._take_answers()

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        """End of step: this step's new probe keys go out, one `lookup`
        (with flush) per request."""
        conn = self._pump()
        if conn is None:
            return
        for probe in self._probes.values():
            if probe.asking:
                continue  # its queued keys go with the next step's question
            keys = probe.take_queued()
            if keys:
                self._ask(conn, probe, keys, flush=True)

    def has_pending_work(self) -> bool:
        """True while anything is owed an answer: loads, supply, probes,
        blocks being released, results not yet handed over. Published blocks
        alone are not work: an idle engine stays idle while peers are served."""
        self._take_answers()
        return bool(self._finished or self._loads or self._stores or self._work_in_flight
                    or self._book.releasing_count or any(p.pending for p in self._probes.values()))

    # -- draining and ending ------------------------------------------------------------------

    def _outstanding(self) -> bool:
        return bool(self._loads or self._stores or self._book.holding_jobs or self._work_in_flight)

    def _wait_outstanding(self, timeout: float) -> bool:
        conn = self._conn
        deadline = time.monotonic() + timeout
        while self._outstanding():
            if conn is None or conn.closed or time.monotonic() >= deadline:
                return False
            self._send_poll(conn, wait_ms=_BLOCKING_POLL_MS)
            try:
                conn.wait(lambda: not self._poll_in_flight, _BLOCKING_POLL_MS / 1000.0 + 5.0)
            except ProtocolError as e:
                self._connection_lost(str(e))
                return False
        return True

    def drain_jobs(self) -> None:
        """Blocks until no job of this tier touches the CPU tier: every
        block is unpublished and released by the daemon, loads and supply
        have their results. Nothing is aborted (a load runs to its end or
        the daemon's timeout); supply no decoder fetches ends after the
        daemon's 60 s. Past drain_timeout_s the rest is reported failed."""
        conn = self._pump()
        if conn is not None:
            keys = self._book.unpublish_all()
            if keys:
                self._submit(conn, "unpublish", self._on_unpublish, keys=[k.hex() for k in keys])
        if not self._wait_outstanding(self._drain_timeout_s):
            logger.error("kvpeer tier: drain_jobs gave up after %.0f s; reporting %d loads, %d supply jobs and "
                         "%d publishing jobs failed", self._drain_timeout_s, len(self._loads), len(self._stores),
                         self._book.holding_jobs)
            self._fail_everything()

    def _fail_everything(self) -> None:
        for job_id, load in list(self._loads.items()):
            self._failed.add(load.kv_request_id)
            self._load_failed(job_id, "shutdown")
        self._loads.clear()
        for job_id in self._stores:
            self._finished.append(JobResult(job_id=job_id, success=False))
        self._stores.clear()
        for job_id in self._book.forget_all():
            self._finished.append(JobResult(job_id=job_id, success=False))

    def shutdown(self) -> None:
        """Withdraws everything and ends the engine session, waiting at most
        shutdown_timeout_s for loads to end and blocks to be released."""
        conn = self._pump()
        if conn is not None:
            keys = self._book.unpublish_all()
            if keys:
                self._submit(conn, "unpublish", self._on_unpublish, keys=[k.hex() for k in keys])
            for kv_request_id in sorted({load.kv_request_id for load in self._loads.values()}):
                self._submit(conn, "finish", self._log_refusal("finish"), kv_request_id=kv_request_id)
            self._wait_outstanding(self._shutdown_timeout_s)
        self._fail_everything()
        self._broken = "shut down"
        if self._conn is not None:
            self._conn.close()
        self._broken = "shut down"

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
    def published_blocks(self) -> int:
        return self._book.published_count

    @property
    def budget_blocks(self) -> int:
        return self._book.budget_blocks


def _region_path_default(engine_id: str) -> str:
    return region_path(engine_id)


def _positive(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"kvpeer tier: '{name}' must be a positive number of seconds, got {value!r}")
    return float(value)

