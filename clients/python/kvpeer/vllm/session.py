"""The kvpeer tier's session with its node's kvpeerd (kvpeer.vllm.tier,
docs/vllm.md): the one pipelined connection, `hello` and `register_region`
sent without waiting, answers taken in by later calls, a lost daemon
(closed, silent or answering in the wrong shape) failing everything owed
once and reconnecting later, and the poll that brings job results in.

`TierSession` is a part of KvpeerSecondaryTier (its first base class): it
works on the tier's state, which the tier's constructor sets up. It imports
vLLM (JobResult), like the tier, so it is loaded only with the tier.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional

from vllm.v1.kv_offload.tiering.base import JobResult  # type: ignore[import-not-found]

from ..client import KvpeerError, ProtocolError
from ..pipelined import PipelinedClient, Reply
from . import answers, identity
from .metrics import Names, reason_label
from .region import open_region

logger = logging.getLogger("kvpeer.vllm")

# A lost daemon connection is tried again at most this often.
_RECONNECT_INTERVAL_S = 5.0
# A reconnect from the step path: a Unix socket connects at once or fails at once,
# unless the daemon's backlog is full.
_RECONNECT_TIMEOUT_S = 0.05
# Failed kv_request_ids remembered at most (oldest forgotten first); only ids of
# requests vLLM has not finished are recorded at all.
_MAX_FAILED = 4096


@dataclass
class Load:
    kv_request_id: str
    blocks: int
    started: float


@dataclass
class Supply:
    kv_request_id: str
    started: float


class Digest:
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


class TierSession:
    """The daemon session of KvpeerSecondaryTier (see the module docstring)."""

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
            self._digest = Digest(self._seed)
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
