"""A raw kvpeer wire-protocol peer in Python, written from
/work/shared/spec/wire-protocol.md, for tests that must send what a correct
daemon never would: malformed frames, forged block_data, replayed or
unauthenticated handshakes, a peer that dribbles one byte a second.

    frame = b"KVP1" + u32 BE header_len + u64 BE payload_len + JSON header + payload

`WirePeer` wraps one TCP connection (dialled with `WirePeer.dial`, or accepted
from a `WireListener` that the daemon dials). It keeps every frame it read in
`received`, answers `ping` while it waits for something else, and its
`expect_disconnect` returns the reason of the daemon's `disconnect` and checks
that the daemon closed the connection after it.

Every wait is bounded by a timeout; loopback addresses only.
"""

import ctypes
import ctypes.util
import hashlib
import hmac
import json
import os
import socket
import struct
import time

__all__ = [
    "MAGIC", "MAX_HEADER_LEN", "MAX_PAYLOAD_LEN", "Frame", "WireError", "WirePeer", "WireListener",
    "encode_frame", "psk_proof", "random_hex16", "xxh3_hex", "xxh3_list",
]

MAGIC = b"KVP1"
PREFIX = struct.Struct(">4sIQ")
MAX_HEADER_LEN = 16 * 1024 * 1024
MAX_PAYLOAD_LEN = 64 * 1024 * 1024


class WireError(Exception):
    """The daemon did not behave as the test expected (no disconnect, a
    frame we could not parse, a timeout)."""


def random_hex16():
    """32 lowercase hex digits, never all zeros (an epoch or a nonce)."""
    while True:
        v = os.urandom(16).hex()
        if v != "0" * 32:
            return v


def psk_proof(psk, role, verifier_nonce, prover_nonce, prover_id, verifier_id):
    """connect_ack.proof of wire 1.1 section 5: hex HMAC-SHA256(psk, "kvpeer-v1.1" 0 role 0
    verifier's nonce 0 prover's nonce 0 prover's peer_id 0 verifier's peer_id), `role` being
    "dialer" or "acceptor" (the prover's). For the dialer the verifier is the acceptor: this is
    the spec's  "dialer" | acceptor nonce | dialer nonce | dialer id | acceptor id."""
    assert role in ("dialer", "acceptor"), role
    fields = [b"kvpeer-v1.1", role.encode(), verifier_nonce.encode(), prover_nonce.encode(),
              prover_id.encode(), verifier_id.encode()]
    return hmac.new(psk, b"\0".join(fields), hashlib.sha256).hexdigest()


_XXH3 = None


def _xxh3_64bits():
    """XXH3_64bits from the system's libxxhash (Debian libxxhash0, which
    the daemon's build requires through libxxhash-dev), loaded once."""
    global _XXH3
    if _XXH3 is None:
        lib = None
        for name in ("libxxhash.so.0", ctypes.util.find_library("xxhash")):
            if not name:
                continue
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError:
                continue
        if lib is None:
            raise WireError("libxxhash not found (install libxxhash0): needed to compute block_data.xxh3")
        fn = lib.XXH3_64bits
        fn.restype = ctypes.c_uint64
        fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        _XXH3 = fn
    return _XXH3


def xxh3_hex(data):
    """Wire 1.1 section 7: the 16 lowercase hex digits of XXH3-64 (seed 0)
    of `data`, as block_data.xxh3 carries them."""
    data = bytes(data)
    return format(_xxh3_64bits()(data, len(data)), "016x")


def xxh3_list(payload, block_len):
    """block_data.xxh3 for a payload of whole blocks: one checksum per block."""
    if len(payload) % block_len:
        raise ValueError(f"a payload of {len(payload)} bytes is not whole blocks of {block_len}")
    return [xxh3_hex(payload[i:i + block_len]) for i in range(0, len(payload), block_len)]


def encode_header(header):
    if isinstance(header, (bytes, bytearray)):
        return bytes(header)
    if isinstance(header, str):
        return header.encode()
    return json.dumps(header, separators=(",", ":")).encode()


def encode_frame(header, payload=b"", *, magic=MAGIC, header_len=None, payload_len=None):
    """One frame; `header` is a dict (JSON-encoded), str or bytes (sent as
    is). `magic`, `header_len` and `payload_len` override the prefix so a
    test can lie about them."""
    h = encode_header(header)
    hl = len(h) if header_len is None else header_len
    pl = len(payload) if payload_len is None else payload_len
    return PREFIX.pack(magic, hl, pl) + h + bytes(payload)


class Frame:
    def __init__(self, header_bytes, payload):
        self.raw_header = header_bytes
        self.payload = payload
        try:
            self.header = json.loads(header_bytes)
        except ValueError:
            self.header = None

    @property
    def type(self):
        return self.header.get("type") if isinstance(self.header, dict) else None

    def __repr__(self):
        return f"Frame({self.raw_header[:300]!r}, payload {len(self.payload)} bytes)"


class WirePeer:
    """One connection speaking the wire protocol by hand.

    `peer_id` is what this fake node calls itself; block_len, fingerprint
    and hash seed default to what the daemon must be configured with."""

    def __init__(self, sock, peer_id, block_len, fingerprint, hash_seed, psk=None, epoch=None, timeout=10.0,
                 dialer=True, wire_minor=1, features=()):
        self.sock = sock
        # Which end of the TCP connection we are (wire 1.1 section 4): it
        # decides the order of the acks under a PSK and the proofs' role.
        self.dialer = dialer
        self.wire_minor = wire_minor
        self.features = list(features)
        self.sock.settimeout(timeout)
        self.timeout = timeout
        self.peer_id = peer_id
        self.block_len = block_len
        self.fingerprint = fingerprint
        self.hash_seed = hash_seed
        self.psk = psk
        self.epoch = epoch or random_hex16()
        self.nonce = random_hex16()
        self.buf = bytearray()
        self.received = []  # every Frame read
        self.their_connect = None
        self.their_ack = None
        self.sent_bytes = []  # raw bytes of every send, for replays
        self.eof = False

    @classmethod
    def dial(cls, addr, peer_id, block_len, fingerprint, hash_seed, **kw):
        host, _, port = addr.rpartition(":")
        assert host.startswith("127."), "loopback only"
        s = socket.create_connection((host, int(port)), timeout=kw.get("timeout", 10.0))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(s, peer_id, block_len, fingerprint, hash_seed, **kw)

    def close(self, rst=False):
        if self.sock is None:
            return
        if rst:
            try:
                self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            except OSError:
                pass
        try:
            self.sock.close()
        finally:
            self.sock = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- sending -------------------------------------------------------------

    def send_raw(self, data):
        self.sent_bytes.append(bytes(data))
        self.sock.sendall(data)

    def send(self, header, payload=b"", **overrides):
        self.send_raw(encode_frame(header, payload, **overrides))

    def send_slowly(self, data, interval_s, max_bytes, deadline_s):
        """Sends `data` one byte per `interval_s` (a slowloris), stopping at
        `max_bytes`, at `deadline_s` seconds, or when the daemon closes the
        connection. Returns (bytes sent, closed by the daemon?)."""
        sent = 0
        end = time.monotonic() + deadline_s
        while sent < min(len(data), max_bytes) and time.monotonic() < end:
            try:
                self.sock.send(data[sent:sent + 1])
            except OSError:
                return sent, True
            sent += 1
            # Between bytes, look for the daemon's disconnect/EOF.
            if self._peek_closed(interval_s):
                return sent, True
        return sent, False

    def _peek_closed(self, wait_s):
        self.sock.settimeout(wait_s)
        try:
            chunk = self.sock.recv(1 << 16)
        except socket.timeout:
            return False
        except OSError:
            self.eof = True
            return True
        finally:
            if self.sock is not None:
                self.sock.settimeout(self.timeout)
        if not chunk:
            self.eof = True
            return True
        self.buf += chunk
        return False

    def make_connect(self, **overrides):
        msg = {"type": "connect", "peer_id": self.peer_id, "wire_major": 1, "wire_minor": self.wire_minor,
               "epoch": self.epoch, "block_len": self.block_len, "config_fingerprint": self.fingerprint,
               "hash_seed": self.hash_seed, "nonce": self.nonce}
        if self.wire_minor >= 1:
            msg["features"] = list(self.features)
        for k, v in overrides.items():
            if v is _DROP:
                msg.pop(k, None)
            else:
                msg[k] = v
        return msg

    @property
    def role(self):
        return "dialer" if self.dialer else "acceptor"

    @property
    def their_role(self):
        return "acceptor" if self.dialer else "dialer"

    def our_proof(self, their_connect=None, psk=None):
        """The proof we must send on this connection (we prove in our role)."""
        their = their_connect or self.their_connect
        return psk_proof(psk or self.psk, self.role, their["nonce"], self.nonce, self.peer_id, their["peer_id"])

    def expected_proof(self, their_connect=None):
        """The proof the daemon must send us: made in its role, over both nonces and ids."""
        their = their_connect or self.their_connect
        return psk_proof(self.psk, self.their_role, self.nonce, their["nonce"], their["peer_id"], self.peer_id)

    def make_ack(self, their_connect=None, proof=None, **overrides):
        their = their_connect or self.their_connect
        msg = {"type": "connect_ack", "peer_id": self.peer_id, "wire_major": 1, "wire_minor": self.wire_minor,
               "epoch": self.epoch}
        if proof is not None:
            msg["proof"] = proof
        elif self.psk is not None and their is not None:
            msg["proof"] = self.our_proof(their)
        for k, v in overrides.items():
            if v is _DROP:
                msg.pop(k, None)
            else:
                msg[k] = v
        return msg

    # -- receiving -----------------------------------------------------------

    def _fill(self, need, deadline):
        while len(self.buf) < need:
            left = deadline - time.monotonic()
            if left <= 0:
                raise socket.timeout(f"no complete frame within the timeout ({len(self.buf)} of {need} bytes)")
            self.sock.settimeout(min(left, self.timeout))
            try:
                chunk = self.sock.recv(max(1 << 16, need - len(self.buf)))
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                self.eof = True
                raise EOFError(f"connection closed ({len(self.buf)} bytes of a frame buffered)")
            self.buf += chunk

    def recv_frame(self, timeout=None):
        """Reads one frame. Raises EOFError when the daemon closed the
        connection, socket.timeout past `timeout`."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        self._fill(PREFIX.size, deadline)
        magic, hl, pl = PREFIX.unpack(bytes(self.buf[:PREFIX.size]))
        if magic != MAGIC or hl > MAX_HEADER_LEN or pl > MAX_PAYLOAD_LEN:
            raise WireError(f"the daemon sent a bad prefix {bytes(self.buf[:16])!r}")
        self._fill(PREFIX.size + hl + pl, deadline)
        header = bytes(self.buf[PREFIX.size:PREFIX.size + hl])
        payload = bytes(self.buf[PREFIX.size + hl:PREFIX.size + hl + pl])
        del self.buf[:PREFIX.size + hl + pl]
        f = Frame(header, payload)
        self.received.append(f)
        return f

    def recv_until(self, types, timeout=None, answer_pings=True):
        """Reads frames until one whose type is in `types` (returned);
        answers pings on the way. A disconnect that is not wanted raises."""
        if isinstance(types, str):
            types = (types,)
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WireError(f"none of {types} within the timeout; got {[f.type for f in self.received[-10:]]}")
            f = self.recv_frame(timeout=left)
            if f.type in types:
                return f
            if f.type == "ping" and answer_pings:
                self.send({"type": "pong", "nonce": f.header["nonce"]})
            elif f.type == "disconnect":
                raise WireError(f"daemon disconnected while we waited for {types}: {f.header!r}")

    def expect_disconnect(self, timeout=None):
        """Reads until the daemon's `disconnect` (other frames are kept in
        `received`), then requires EOF. Returns the reason ('' if none)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WireError("no disconnect within the timeout")
            try:
                f = self.recv_frame(timeout=left)
            except EOFError:
                raise WireError("the daemon closed the connection without a disconnect frame; got "
                                f"{[f.header for f in self.received[-5:]]}")
            if f.type == "ping":
                continue
            if f.type == "disconnect":
                reason = f.header.get("reason", "")
                if not self.wait_closed(max(0.5, deadline - time.monotonic())):
                    raise WireError(f"disconnect {reason!r} sent but the connection stayed open")
                return reason

    def wait_closed(self, timeout=5.0):
        """True once the daemon closed the connection (EOF or reset)."""
        if self.eof:
            return True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._peek_closed(max(0.01, deadline - time.monotonic())):
                return True
        return False

    # -- the handshake -------------------------------------------------------

    def send_connect(self, **overrides):
        msg = self.make_connect(**overrides)
        self.send(msg)
        return msg

    def read_connect(self, timeout=None):
        f = self.recv_until("connect", timeout=timeout)
        self.their_connect = f.header
        return f.header

    def handshake(self, timeout=None, verify_proof=True):
        """The whole exchange of wire 1.1 section 4: our connect, their
        connect, then the acks. Without a PSK (or as the dialer) we ack at
        once and read theirs; as a PSK acceptor we first read the daemon's
        ack and check its proof, and only then send ours. Returns their
        connect."""
        self.send_connect()
        self.read_connect(timeout)
        if self.psk is not None and not self.dialer:
            self.read_ack(timeout, verify_proof)
            self.send(self.make_ack())
        else:
            self.send(self.make_ack())
            self.read_ack(timeout, verify_proof)
        return self.their_connect

    def read_ack(self, timeout=None, verify_proof=True):
        f = self.recv_until("connect_ack", timeout=timeout)
        self.their_ack = f.header
        if self.psk is not None and verify_proof and f.header.get("proof") != self.expected_proof():
            raise WireError(f"the daemon's proof is wrong: {f.header!r}")
        return f.header


class _Drop:
    def __repr__(self):
        return "DROP"


_DROP = _Drop()
WirePeer.DROP = _DROP


class WireListener:
    """A listening socket on 127.0.0.1 the daemon can dial (engines name
    `address` as the peer)."""

    def __init__(self, host="127.0.0.1", port=0):
        assert host.startswith("127."), "loopback only"
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
        except OSError:
            self.sock.close()
            raise
        self.sock.listen(16)
        self.address = f"{host}:{self.sock.getsockname()[1]}"

    def accept(self, timeout=10.0):
        self.sock.settimeout(timeout)
        s, _ = self.sock.accept()
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def accept_peer(self, block_len, fingerprint, hash_seed, timeout=10.0, **kw):
        """Accepts the daemon's dial and wraps it as a WirePeer named
        after this listener's address."""
        kw.setdefault("dialer", False)
        return WirePeer(self.accept(timeout), self.address, block_len, fingerprint, hash_seed, **kw)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
