"""A non-blocking, pipelined connection to kvpeerd's control socket.

`kvpeer.Client` sends a request and waits for its answer, which is right for
tests and tools but wrong for an engine's scheduler thread: that thread must
never stop to wait, not even for its own node's daemon (a `poll` the daemon
holds, or a daemon busy for a moment, would stall every request the engine
schedules). `PipelinedClient` therefore only ever:

  * appends request lines to an outgoing buffer and writes as much of it as
    the socket takes now (`submit`), and
  * reads whatever answers have arrived, without waiting, and hands each to
    the callback of the request it answers (`pump`).

The control API answers in request order on a connection, so the answers are
matched to requests by position and checked against the `id` they echo: a
daemon that broke that contract is reported as `ProtocolError` instead of
being silently misread.

One connection is one engine session for the daemon; this class is not
thread-safe (the scheduler thread is its only user).
"""

from __future__ import annotations

import errno
import json
import select
import socket
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence

from .client import MAX_LINE_BYTES, KvpeerError, ProtocolError

__all__ = ["PipelinedClient", "Reply", "ReplyHandler"]


@dataclass(frozen=True)
class Reply:
    """One answer: `ok` with the response fields, or the daemon's error."""

    op: str
    response: Dict[str, Any]
    error: Optional[KvpeerError]

    @property
    def ok(self) -> bool:
        return self.error is None


ReplyHandler = Callable[[Reply], None]


@dataclass
class _Pending:
    rid: int
    op: str
    handler: Optional[ReplyHandler]


class PipelinedClient:
    """One non-blocking control connection with any number of requests in
    flight. `connect_timeout` bounds only the initial `connect()`."""

    # Bytes read per recv(): large enough that a burst of answers is taken in
    # one system call, small enough not to matter on the scheduler thread.
    _RECV_BYTES = 1 << 20

    def __init__(self, socket_path: str, connect_timeout: float = 5.0) -> None:
        self.socket_path = socket_path
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(connect_timeout)
        try:
            sock.connect(socket_path)
        except OSError as e:
            sock.close()
            raise ConnectionError(f"kvpeerd control socket {socket_path!r} cannot be reached: {e}") from e
        sock.setblocking(False)
        self._sock: Optional[socket.socket] = sock
        self._out = bytearray()
        self._in = bytearray()
        self._pending: Deque[_Pending] = deque()
        self._next_id = 1
        self._closed_reason: Optional[str] = None

    # -- state -------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._sock is None

    @property
    def closed_reason(self) -> Optional[str]:
        """Why the connection ended (None while it is open)."""
        return self._closed_reason

    @property
    def in_flight(self) -> int:
        """Requests sent (or buffered) whose answers have not been handled."""
        return len(self._pending)

    @property
    def unsent_bytes(self) -> int:
        return len(self._out)

    # -- sending -------------------------------------------------------------------

    def submit(self, op: str, handler: Optional[ReplyHandler] = None, fds: Sequence[int] = (),
               **fields: Any) -> int:
        """Queues one request and writes what the socket takes now; returns
        its id. `handler` gets the `Reply` from a later `pump`. `fds` ride on
        the request's first byte (SCM_RIGHTS), so they can only be attached
        when nothing is waiting to be sent before this line."""
        if self._sock is None:
            raise ProtocolError(f"control connection is closed ({self._closed_reason})")
        rid = self._next_id
        self._next_id += 1
        msg: Dict[str, Any] = {"id": rid, "op": op}
        msg.update(fields)
        line = json.dumps(msg, separators=(",", ":")).encode() + b"\n"
        if len(line) - 1 > MAX_LINE_BYTES:
            raise ValueError(f"{op} request is {len(line) - 1} bytes; the control API allows {MAX_LINE_BYTES}")
        if fds:
            if self._out:
                raise ProtocolError("descriptors can only be sent on a line with nothing queued before it")
            line = self._send_with_fds(line, list(fds))
        self._pending.append(_Pending(rid, op, handler))
        self._out += line
        self.flush_out()
        return rid

    def _send_with_fds(self, line: bytes, fds: List[int]) -> bytes:
        """Sends the start of `line` with the descriptors attached (waiting
        briefly if the socket is momentarily full: this happens once, at
        registration, before any pipelined traffic); returns what is left."""
        assert self._sock is not None
        deadline = time.monotonic() + 5.0
        while True:
            try:
                sent = socket.send_fds(self._sock, [line], fds)
                return line[sent:]
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ProtocolError("control socket did not accept the region descriptor within 5 s")
                time.sleep(0.001)

    def flush_out(self) -> None:
        """Writes as much of the outgoing buffer as the socket takes now."""
        while self._out and self._sock is not None:
            try:
                sent = self._sock.send(self._out)
            except BlockingIOError:
                return
            except OSError as e:
                self._fail(f"send failed: {e}")
                return
            del self._out[:sent]

    # -- receiving -----------------------------------------------------------------

    def pump(self) -> int:
        """Sends what is queued, reads every answer that has arrived (never
        waiting) and calls the handlers in request order; returns how many
        answers were handled."""
        self.flush_out()
        ended: Optional[str] = None
        while self._sock is not None:
            try:
                chunk = self._sock.recv(self._RECV_BYTES)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                ended = f"receive failed: {e}"
                break
            if not chunk:
                ended = "kvpeerd closed the control connection"
                break
            self._in += chunk
        # Answers that arrived before the end are still answers.
        handled = self._dispatch()
        if ended is not None:
            self._fail(ended)
        return handled

    def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Pumps until `predicate()` holds or `timeout` seconds pass; True if
        it holds. Only for the few calls allowed to block (vLLM's
        `drain_jobs` and `shutdown`), never on the scheduler's step path."""
        deadline = time.monotonic() + timeout
        while True:
            self.pump()
            if predicate():
                return True
            if self._sock is None or time.monotonic() >= deadline:
                return predicate()
            select.select([self._sock], [self._sock] if self._out else [], [],
                          min(0.01, max(0.0, deadline - time.monotonic())))

    def _dispatch(self) -> int:
        handled = 0
        while True:
            nl = self._in.find(b"\n")
            if nl < 0:
                return handled
            raw = bytes(self._in[:nl])
            del self._in[: nl + 1]
            try:
                response = json.loads(raw)
            except ValueError as e:
                self._fail(f"answer is not JSON: {raw[:200]!r}")
                raise ProtocolError(f"kvpeerd answered something that is not JSON: {raw[:200]!r}") from e
            if not isinstance(response, dict):
                self._fail("answer is not an object")
                raise ProtocolError(f"kvpeerd answered something that is not an object: {raw[:200]!r}")
            if not self._pending:
                self._fail("answer to no request")
                raise ProtocolError(f"kvpeerd answered a request that was never sent: {raw[:200]!r}")
            pending = self._pending.popleft()
            reply = self._reply_for(pending, response)
            handled += 1
            if pending.handler is not None:
                pending.handler(reply)

    def _reply_for(self, pending: _Pending, response: Dict[str, Any]) -> Reply:
        err = response.get("error")
        if response.get("id") != pending.rid:
            if response.get("ok") is False and response.get("id") is None and isinstance(err, dict):
                # A framing error (too_large) answers with id null.
                return Reply(pending.op, response, KvpeerError(err.get("code"), err.get("message"), response))
            self._fail("answers out of order")
            raise ProtocolError(f"answer id {response.get('id')!r} does not answer request {pending.rid} "
                                f"({pending.op})")
        if response.get("ok") is True:
            return Reply(pending.op, response, None)
        if response.get("ok") is False and isinstance(err, dict):
            return Reply(pending.op, response, KvpeerError(err.get("code"), err.get("message"), response))
        self._fail("malformed answer")
        raise ProtocolError(f"malformed answer to {pending.op}: {response!r}")

    # -- ending --------------------------------------------------------------------

    def _fail(self, reason: str) -> None:
        """Closes the socket; every request still waiting gets an error
        reply (code `connection_closed`), so no caller waits forever."""
        if self._sock is not None:
            try:
                self._sock.close()
            finally:
                self._sock = None
                self._closed_reason = reason
        self._out.clear()
        while self._pending:
            pending = self._pending.popleft()
            if pending.handler is not None:
                pending.handler(Reply(pending.op, {}, KvpeerError("connection_closed", reason)))

    def close(self) -> None:
        """Ends the connection (and with it the daemon's engine session)."""
        self._fail("closed by the client")
