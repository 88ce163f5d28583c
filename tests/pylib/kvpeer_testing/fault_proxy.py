"""A fault-injecting TCP proxy for kvpeer's integration and soak tests.

One `FaultProxy` listens on 127.0.0.1 (port 0 by default) and forwards every
accepted connection to a target address (another kvpeerd). A test changes its
behaviour at run time, from its own thread:

  * `pass_through()`  forward bytes as they come (the default);
  * `stall()`         stop forwarding in both directions; the sockets stay
                      open (a wedged link or a peer that went silent); bytes
                      already read are held and forwarded on `pass_through()`;
                      an end closing meanwhile is not passed on either;
  * `delay(ms)`       forward every chunk `ms` milliseconds after it was read
                      (latency, not a throughput cap);
  * `throttle(B/s)`   cap each direction's rate (a slow link);
  * `cut()`           close both sides of every open connection now (with
                      `rst=True`, an RST instead of a FIN); new connections
                      are accepted again afterwards;
  * `refuse(True)`    accept new connections and close them at once;
  * `corrupt(...)`    flip one byte (or `length` consecutive bytes) of the
                      stream: at a raw byte offset counted from now, or,
                      frame-aware, in the magic, the header or the payload of
                      the n-th kvpeer frame from now (optionally only frames
                      with a payload, i.e. block_data).

Direction names: "up" is dialler -> target (what the proxy's client sends),
"down" is target -> dialler.

Everything is bounded: sockets have timeouts, the held-back bytes of a stalled,
slowed or delayed direction are capped (`max_held`, 1 MiB by default: the
pump stops reading past the cap, so TCP back-pressure reaches the sender),
and `close()` ends every thread within about a second. Loopback only: the
proxy refuses a target outside 127.0.0.0/8. The connections' moving parts are
in kvpeer_testing.proxy_pipe.
"""

import socket
import threading
import time

from kvpeer_testing.proxy_pipe import DEFAULT_MAX_HELD, DIRECTIONS, TICK_S, Conn, Corruption, loopback, split_addr

__all__ = ["FaultProxy", "DIRECTIONS"]


class FaultProxy:
    """See the module docstring. `target` may be set later (`set_target`),
    e.g. when the target daemon needs the proxy's address for its node id
    before it can start."""

    def __init__(self, target=None, listen_host="127.0.0.1", listen_port=0, name="proxy",
                 max_held=DEFAULT_MAX_HELD):
        if not loopback(listen_host):
            raise ValueError(f"fault proxy listens on loopback only, not {listen_host}")
        self.name = name
        self.max_held = max_held
        self._lock = threading.Lock()
        self._target = None
        if target is not None:
            self.set_target(target)
        self._stalled = False
        self._delay_s = 0.0
        self._rate = 0.0  # bytes per second per direction and connection; 0 = unlimited
        self._refuse = False
        self._corruptions = {"up": [], "down": []}
        self._conns = {}
        self._next_id = 1
        self.stats = {"accepted": 0, "refused": 0, "cuts": 0, "bytes_up": 0, "bytes_down": 0,
                      "corruptions_fired": 0, "upstream_failures": 0}
        self._closed = threading.Event()
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((listen_host, listen_port))
        self._sock.listen(64)
        self._sock.settimeout(TICK_S * 2)
        self.address = f"{listen_host}:{self._sock.getsockname()[1]}"
        self._accept_thread = threading.Thread(target=self._accept_loop, name=f"fault-proxy-{name}-accept",
                                               daemon=True)
        self._accept_thread.start()

    # -- control -------------------------------------------------------------

    def set_target(self, target):
        host, port = split_addr(target)
        if not loopback(host):
            raise ValueError(f"fault proxy forwards to loopback only, not {target}")
        with self._lock:
            self._target = (host, port)

    def pass_through(self):
        """Back to plain forwarding: no stall, no delay, no rate limit, no
        refusal (armed corruptions stay armed)."""
        with self._lock:
            self._stalled = False
            self._delay_s = 0.0
            self._rate = 0.0
            self._refuse = False

    def throttle(self, bytes_per_s):
        """Caps each direction of each connection at `bytes_per_s` (0 lifts
        the cap): a slow link, so a transfer is still moving when a fault
        is injected."""
        if bytes_per_s < 0:
            raise ValueError("rate is >= 0")
        with self._lock:
            self._rate = float(bytes_per_s)

    def stall(self):
        with self._lock:
            self._stalled = True

    def delay(self, ms):
        if not 0 <= ms <= 60000:
            raise ValueError("delay is 0..60000 ms")
        with self._lock:
            self._delay_s = ms / 1000.0

    def refuse(self, on=True):
        with self._lock:
            self._refuse = on

    def cut(self, rst=False):
        """Closes both sides of every open connection; returns how many."""
        with self._lock:
            conns = list(self._conns.values())
            self.stats["cuts"] += 1
        for c in conns:
            c.close(rst=rst)
        return len(conns)

    def corrupt(self, direction="down", offset=None, where="raw", nth=0, only_payload_frames=False, xor=0xFF,
                length=1):
        """Arms a corruption of `direction`: `length` consecutive bytes
        (default 1) each XORed with `xor`. Returns a handle whose `fired`
        event is set once the first byte was flipped and `done` once the
        last one was; `flipped` counts the bytes flipped.

        where="raw": the bytes at `offset` .. `offset + length - 1` of the
        direction's stream counted from the start of the connection (use
        `stream_offset()` + k for "k bytes from now"); all of them on the
        connection where the first one went by. where="magic"/"header"/
        "payload": from the `offset`-th byte (default 0) of that part of the
        `nth` frame (0 = the next one whose prefix starts after now),
        optionally counting only frames with a payload (block_data). An
        `offset` beyond the part hits its last byte (so `offset=2**62` is a
        frame's last payload byte), and the range stops at the part's end.
        The bytes may span chunk boundaries of the stream. After a
        frame-aware corruption fired, `part_offset` is where in its part the
        flipped range started (after clamping), `frame_prefix` the frame's
        original 16-byte prefix and, for a payload hit, `frame_header` its
        original header bytes (which block_data it hit)."""
        if direction not in DIRECTIONS:
            raise ValueError(f"direction is one of {DIRECTIONS}")
        if where not in ("raw", "magic", "header", "payload"):
            raise ValueError("where is raw, magic, header or payload")
        if where == "raw" and offset is None:
            raise ValueError("a raw corruption needs an offset")
        if not isinstance(length, int) or length < 1:
            raise ValueError("length is an integer >= 1")
        c = Corruption(where, offset, nth, only_payload_frames, xor, length)
        with self._lock:
            self._corruptions[direction].append(c)
        return c

    def disarm(self):
        with self._lock:
            self._corruptions = {"up": [], "down": []}

    def stream_offset(self, direction="down"):
        """Bytes read so far in `direction` on the newest open connection
        (None without one)."""
        with self._lock:
            if not self._conns:
                return None
            conn = self._conns[max(self._conns)]
        return conn.pipes[direction].offset

    def connections(self):
        with self._lock:
            return len(self._conns)

    def wait_connections(self, n, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.connections() >= n:
                return True
            time.sleep(0.01)
        return False

    def close(self):
        """Stops accepting, closes every connection, joins the threads."""
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self._sock.close()
        except OSError:
            pass
        self._accept_thread.join(2.0)
        with self._lock:
            conns = list(self._conns.values())
        for c in conns:
            c.close()
        for c in conns:
            c.join(2.0)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- internals -----------------------------------------------------------

    def _is_stalled(self):
        return self._stalled

    def _armed(self, direction):
        """Corruptions of `direction` not finished yet (a raw one that fired
        stays here until its last byte went by)."""
        with self._lock:
            live = [c for c in self._corruptions[direction] if not c.done.is_set()]
            self._corruptions[direction] = live
            return list(live)

    def _fire(self, c, cid, offset, prefix=None, header=None):
        """Claims `c` for connection `cid` (its first byte is about to be
        flipped); False if it already fired elsewhere."""
        with self._lock:
            if c.fired.is_set():
                return False
            c.fired_at = (cid, offset)
            c.frame_prefix = prefix
            c.frame_header = header
            c.fired.set()
            self.stats["corruptions_fired"] += 1
            return True

    def _flipped(self, c, n, finished=None):
        """Records `n` more flipped bytes of `c`; returns True (and sets
        `done`) once the range is complete: at `length` bytes, or when
        `finished` says the clamped range ended."""
        with self._lock:
            c.flipped += n
            if finished is None:
                finished = c.flipped >= c.length
            if finished:
                c.done.set()
            return finished

    def _count(self, direction, n):
        with self._lock:
            self.stats["bytes_" + direction] += n

    def _forget(self, conn):
        with self._lock:
            self._conns.pop(conn.id, None)

    def _accept_loop(self):
        while not self._closed.is_set():
            try:
                client, _ = self._sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            with self._lock:
                refuse, target = self._refuse, self._target
            if refuse or target is None:
                with self._lock:
                    self.stats["refused"] += 1
                client.close()
                continue
            try:
                upstream = socket.create_connection(target, timeout=5.0)
            except OSError:
                with self._lock:
                    self.stats["upstream_failures"] += 1
                client.close()
                continue
            with self._lock:
                cid = self._next_id
                self._next_id += 1
                conn = Conn(self, cid, client, upstream)
                self._conns[cid] = conn
                self.stats["accepted"] += 1
            conn.start()
