"""The moving parts of kvpeer_testing.fault_proxy.FaultProxy: one proxied
connection (`Conn`), its two directions (`Pipe`: a reader and a writer
thread each, the held-back bytes bounded by the proxy's `max_held`), and an
armed corruption (`Corruption`) that a pipe fires at a raw offset or,
following the kvpeer frames through `FrameCursor`, in a frame's magic,
header or payload. Their behaviour is what the proxy's module docstring
describes; the proxy's state (stall, delay, rate, refusals, statistics) is
read through the `proxy` each connection belongs to.
"""

import ipaddress
import socket
import struct
import threading
import time
from collections import deque

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


def loopback(host):
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network("127.0.0.0/8")
    except ValueError:
        return host == "localhost"


def split_addr(addr):
    host, _, port = addr.rpartition(":")
    return host, int(port)


class Corruption:
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


class FrameCursor:
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


class Pipe:
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
        self.cursor = FrameCursor()
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


class Conn:
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
        self.pipes = {"up": Pipe(self, "up", client, upstream), "down": Pipe(self, "down", upstream, client)}
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
