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
from the imported classes when this module is imported. The session with
kvpeerd (connection, answers, results, polling) is kvpeer.vllm.session.
"""

from __future__ import annotations

import logging
import os
import time
from collections import OrderedDict
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

from ..client import ProtocolError
from ..pipelined import PipelinedClient, Reply
from . import answers, compat, identity
from .metrics import Counters, Names, definitions
from .params import Dest, Source, parse_dest, parse_source
from .probes import HIT, MISS, Probe
from .publisher import PublishBook
from .region import open_region, region_path
from .session import Digest, Load, Supply, TierSession

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

_KNOWN_KWARGS = {"socket", "publish_budget_bytes", "region_path", "client_name", "connect_timeout_s",
                 "drain_timeout_s", "shutdown_timeout_s", "answer_timeout_s", "hash_algo", "backpressure_detector"}


class KvpeerSecondaryTier(TierSession, SecondaryTierManager):
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
        self._digest: Optional[Digest] = None
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
        self._loads: Dict[int, Load] = {}
        self._stores: Dict[int, Supply] = {}  # remote_decoder supply: job -> request
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
        self._loads[job_id] = Load(source.kv_request_id, len(keys), started)
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
        self._stores[job_id] = Supply(dest.kv_request_id, started)

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
