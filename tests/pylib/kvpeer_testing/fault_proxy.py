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
and `close()` ends every thread within about a second. Loopback only: the proxy refuses a target outside 127.0.0.0/8.
"""

import ipaddress
import socket
import struct
import threading
import time
from collections import deque

__all__ = ["FaultProxy", "DIRECTIONS"]

DIRECTIONS = ("up", "down")

MAGIC = b"KVP1"
PREFIX_LEN = 16
# Bytes a direction may hold (read, not yet forwarded) before it stops
# reading, so a slow or stalled link pushes back on the sender the way a real
# one does (a proxy that buffered everything would hide a stopped producer).
DEFAULT_MAX_HELD = 1024 * 1024
CHUNK = 256 * 1024
MAX_KEPT_HEADER = 64 * 1024  # a frame header up to this size is kept for the corruption that hits its payload
SLICE = 64 * 1024  # most bytes one send() is given
TICK_S = 0.05  # how often a blocked thread looks at its stop flag


def _loopback(host):
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network("127.0.0.0/8")
    except ValueError:
        return host == "localhost"


def split_addr(addr):
    host, _, port = addr.rpartition(":")
    return host, int(port)


class _Corruption:
    """One armed corruption of one direction (fires once, on the first
    connection whose stream reaches it)."""

    def __init__(self, where, offset, nth, only_payload_frames, xor, length=1):
        self.where = where  # "raw", "magic", "header" or "payload"
        self.offset = offset
        self.nth = nth
        self.only_payload_frames = only_payload_frames
        self.xor = xor
        self.length = length  # consecutive bytes to flip (clamped to the part for frame-aware kinds)
        self.fired = threading.Event()  # set when the first byte was flipped
        self.done = threading.Event()  # set when the last byte was flipped
        self.fired_at = None  # (connection id, stream offset)
        self.frame_prefix = None  # the original prefix of the frame it hit (frame-aware kinds)
        self.frame_header = None  # the original header bytes of that frame (header/payload kinds, when known)
        self.part_offset = None  # where in its part the flipped range starts (after clamping)
        self.flipped = 0  # bytes flipped so far


class _FrameCursor:
    """Follows kvpeer frame boundaries over the original bytes of one
    direction, so a corruption can aim at a frame part. Gives up (and stays
    off) on bytes that are not kvpeer frames."""

    def __init__(self):
        self.ok = True
        self.part = "prefix"
        self.left = PREFIX_LEN
        self.prefix = bytearray()
        self.header_len = 0
        self.payload_len = 0
        self.pos_in_part = 0
        self.header = bytearray()  # the original header bytes of the current frame (small headers only)

    def start_frame(self):
        self.part, self.left, self.pos_in_part = "prefix", PREFIX_LEN, 0
        self.prefix = bytearray()
        self.header = bytearray()


class _Pipe:
    """One direction of one proxied connection: a reader thread pulls bytes
    from `src` into a queue, a writer thread sends them to `dst` when due."""

    def __init__(self, conn, direction, src, dst):
        self.conn = conn
        self.proxy = conn.proxy
        self.direction = direction
        self.src = src
        self.dst = dst
        self.queue = deque()  # (due time, bytes)
        self.held = 0
        self.cond = threading.Condition()
        self.eof = False  # src ended; pass it on once the queue drained
        self.offset = 0  # original bytes of this direction read so far
        self.cursor = _FrameCursor()
        self.frames_seen = 0
        self.bytes_forwarded = 0
        self._frame_hits = []  # (corruption, part, offset) aimed at the current frame
        self.next_send = 0.0  # rate limit: when the next slice may go

    # -- reading -----------------------------------------------------------

    def read_loop(self):
        while not self.conn.closing.is_set():
            if self.proxy._is_stalled() or self.held >= self.proxy.max_held:
                time.sleep(TICK_S / 2)
                continue
            try:
                data = self.src.recv(CHUNK)
            except socket.timeout:
                continue
            except OSError:
                data = b""
            # Bytes read just as a stall began are held by the writer.
            if not data:
                with self.cond:
                    self.eof = True
                    self.cond.notify_all()
                return
            data = self._corrupt(bytearray(data))
            due = time.monotonic() + self.proxy._delay_s
            with self.cond:
                self.queue.append((due, bytes(data)))
                self.held += len(data)
                self.cond.notify_all()

    def _corrupt(self, data):
        """Applies armed corruptions to `data` (original bytes at stream
        offsets self.offset .. self.offset+len) and returns it."""
        start = self.offset
        self.offset += len(data)
        original = bytes(data)
        for c in self.proxy._armed(self.direction):
            if c.where == "raw":
                # The part of [offset, offset + length) inside this chunk.
                lo = max(c.offset + c.flipped, start) - start
                hi = min(c.offset + c.length, start + len(data)) - start
                if lo >= hi:
                    continue
                if c.flipped == 0:
                    if not self.proxy._fire(c, self.conn.id, c.offset):
                        continue
                elif c.fired_at[0] != self.conn.id:
                    continue  # the rest of the range belongs to the connection it started on
                for k in range(lo, hi):
                    data[k] ^= c.xor
                self.proxy._flipped(c, hi - lo)
        if self.cursor.ok:
            self._walk_frames(original, data, start)
        return data

    def _walk_frames(self, original, data, start):
        """Moves the frame cursor over `original`; frame-aware corruptions
        flip bytes of `data` (same positions)."""
        cur = self.cursor
        i, n = 0, len(original)
        while i < n and cur.ok:
            if cur.part == "prefix":
                take = min(PREFIX_LEN - len(cur.prefix), n - i)
                cur.prefix += original[i:i + take]
                i += take
                if len(cur.prefix) < PREFIX_LEN:
                    return
                if bytes(cur.prefix[:4]) != MAGIC:
                    cur.ok = False  # not kvpeer framing (or out of step): stop aiming
                    return
                cur.header_len, cur.payload_len = struct.unpack(">IQ", bytes(cur.prefix[4:16]))
                self._aim_at_frame(data, i - PREFIX_LEN, start)
                cur.part, cur.left, cur.pos_in_part = "header", cur.header_len, 0
            else:
                take = min(cur.left, n - i)
                if cur.part == "header" and cur.header_len <= MAX_KEPT_HEADER:
                    cur.header += original[i:i + take]
                self._hit_in_part(data, i, take, cur.pos_in_part)
                cur.pos_in_part += take
                cur.left -= take
                i += take
            while cur.part != "prefix" and cur.left == 0:
                if cur.part == "header":
                    cur.part, cur.left, cur.pos_in_part = "payload", cur.payload_len, 0
                else:
                    self.frames_seen += 1
                    cur.start_frame()

    def _aim_at_frame(self, data, prefix_pos, start):
        """At a frame's complete prefix: choose the corruptions that target
        this frame. `prefix_pos` is where the prefix starts in `data` (it may
        be negative when the prefix began in an earlier chunk)."""
        cur = self.cursor
        self._frame_hits = []
        for c in self.proxy._armed(self.direction):
            if c.where == "raw" or c.fired.is_set():
                continue
            if c.only_payload_frames and cur.payload_len == 0:
                continue
            if c.nth > 0:
                c.nth -= 1
                continue
            if c.where == "magic":
                first = min(c.offset or 0, 3)
                pos = prefix_pos + first
                if pos >= 0 and self.proxy._fire(c, self.conn.id, start + pos, bytes(cur.prefix)):
                    end = prefix_pos + min(first + c.length, 4)
                    for k in range(pos, end):
                        data[k] ^= c.xor
                    c.part_offset = first
                    self.proxy._flipped(c, end - pos, finished=True)
                elif pos < 0:
                    # The magic already went out with an earlier chunk: hit the
                    # next frame instead.
                    continue
            elif c.where in ("header", "payload"):
                part_len = cur.header_len if c.where == "header" else cur.payload_len
                if part_len > 0:
                    first = min(c.offset or 0, part_len - 1)
                    self._frame_hits.append((c, c.where, first, min(first + c.length, part_len)))

    def _hit_in_part(self, data, i, take, part_start):
        """Flips the bytes of this chunk (`take` bytes at data[i:], part
        positions part_start ..) that fall in an aimed range [first, end)
        of the current part."""
        for hit in list(self._frame_hits):
            c, part, first, end = hit
            if part != self.cursor.part:
                continue
            lo = max(first + c.flipped, part_start)
            hi = min(end, part_start + take)
            if lo >= hi:
                continue
            if c.flipped == 0:
                header = bytes(self.cursor.header) if part == "payload" and self.cursor.header else None
                if not self.proxy._fire(c, self.conn.id, None, bytes(self.cursor.prefix), header):
                    self._frame_hits.remove(hit)
                    continue
                c.part_offset = first
            for k in range(lo, hi):
                data[i + k - part_start] ^= c.xor
            if self.proxy._flipped(c, hi - lo, finished=hi == end):
                self._frame_hits.remove(hit)

    # -- writing -----------------------------------------------------------

    def _send(self, data):
        """Sends `data` in slices, honouring stall (mid-chunk too) and the
        rate limit; a full receiver only makes it wait. False when the
        connection is gone."""
        view = memoryview(data)
        off = 0
        while off < len(view):
            if self.conn.closing.is_set():
                return False
            if self.proxy._is_stalled():
                time.sleep(TICK_S / 2)
                continue
            rate = self.proxy._rate
            piece = view[off:off + (min(SLICE, max(1024, int(rate * TICK_S))) if rate else SLICE)]
            if rate:
                now = time.monotonic()
                if self.next_send > now:
                    time.sleep(min(self.next_send - now, TICK_S))
                    continue
            try:
                n = self.dst.send(piece)
            except socket.timeout:
                continue
            except OSError:
                self.conn.close()
                return False
            off += n
            if rate:
                self.next_send = max(self.next_send, time.monotonic()) + n / rate
        return True

    def write_loop(self):
        while True:
            with self.cond:
                while not self.queue and not self.eof and not self.conn.closing.is_set():
                    self.cond.wait(TICK_S)
                if self.conn.closing.is_set():
                    return
                if not self.queue and self.eof:
                    break
                due, data = self.queue[0]
            now = time.monotonic()
            if self.proxy._is_stalled():
                time.sleep(TICK_S / 2)
                continue
            if due > now:
                time.sleep(min(due - now, TICK_S))
                continue
            if not self._send(data):
                return
            with self.cond:
                self.queue.popleft()
                self.held -= len(data)
            self.bytes_forwarded += len(data)
            self.proxy._count(self.direction, len(data))
        # Source ended and everything was forwarded: pass the EOF on, unless
        # stalled (a stalled link passes nothing, not even a close).
        while self.proxy._is_stalled() and not self.conn.closing.is_set():
            time.sleep(TICK_S)
        if self.conn.closing.is_set():
            return
        try:
            self.dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        self.conn.half_closed()


class _Conn:
    """One proxied connection: client socket, upstream socket, two pipes."""

    def __init__(self, proxy, cid, client, upstream):
        self.proxy = proxy
        self.id = cid
        self.client = client
        self.upstream = upstream
        self.closing = threading.Event()
        self._halves = 0
        self._lock = threading.Lock()
        for s in (client, upstream):
            s.settimeout(TICK_S * 2)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.pipes = {"up": _Pipe(self, "up", client, upstream), "down": _Pipe(self, "down", upstream, client)}
        self.threads = []
        for p in self.pipes.values():
            for fn in (p.read_loop, p.write_loop):
                t = threading.Thread(target=fn, name=f"fault-proxy-{cid}-{p.direction}", daemon=True)
                self.threads.append(t)

    def start(self):
        for t in self.threads:
            t.start()

    def half_closed(self):
        with self._lock:
            self._halves += 1
            done = self._halves == 2
        if done:
            self.close()

    def close(self, rst=False):
        if self.closing.is_set():
            return
        self.closing.set()
        for s in (self.client, self.upstream):
            try:
                if rst:
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            try:
                s.close()
            except OSError:
                pass
        self.proxy._forget(self)

    def join(self, timeout):
        deadline = time.monotonic() + timeout
        for t in self.threads:
            if t is not threading.current_thread():
                t.join(max(0.0, deadline - time.monotonic()))


class FaultProxy:
    """See the module docstring. `target` may be set later (`set_target`),
    e.g. when the target daemon needs the proxy's address for its node id
    before it can start."""

    def __init__(self, target=None, listen_host="127.0.0.1", listen_port=0, name="proxy",
                 max_held=DEFAULT_MAX_HELD):
        if not _loopback(listen_host):
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
        if not _loopback(host):
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
        c = _Corruption(where, offset, nth, only_payload_frames, xor, length)
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
                conn = _Conn(self, cid, client, upstream)
                self._conns[cid] = conn
                self.stats["accepted"] += 1
            conn.start()
