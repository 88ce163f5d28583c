"""A small, stdlib-only client for kvpeerd's control API (docs/control-api.md).

The control API is newline-delimited JSON over a Unix stream socket. This
module keeps one connection per `Client`, numbers requests itself and checks
that every response answers the request it was sent for, so a test or an
engine shim built on it cannot silently read a stale or foreign answer.

Thread-safety: a `Client` is not thread-safe; give each thread its own (the
daemon treats each connection as its own engine session anyway).
"""

import json
import mmap
import os
import socket
import tempfile

__all__ = ["Client", "KvpeerError", "ProtocolError", "Region", "MAX_LINE_BYTES"]

# The longest request line the daemon accepts, not counting the newline.
MAX_LINE_BYTES = 16 * 1024 * 1024

# Extra seconds a blocking call waits beyond what the daemon was asked to
# take (e.g. poll's wait_ms), so a slow daemon is reported as an error
# instead of hanging a test forever.
_SLACK_S = 15.0


class KvpeerError(Exception):
    """The daemon answered `ok: false`.

    `code` is the control API's error code (`bad_request`, `conflict`, ...);
    callers branch on it, never on `message`, which is prose for people.
    """

    def __init__(self, code, message, response=None):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
        self.response = response


class ProtocolError(Exception):
    """The daemon broke the framing contract: a response that is not JSON,
    answers another request, or a connection closed mid-conversation."""


def _hex_keys(keys):
    """Keys are bytes on the Python side and lowercase hex on the wire.

    A `str` is passed through untouched so tests can send deliberately
    invalid keys."""
    return [k if isinstance(k, str) else bytes(k).hex() for k in keys]


class Client:
    """One connection to a kvpeerd control socket.

    An engine calls `hello` first; operator calls (`status`, `metrics`,
    `connect`, `disconnect`) work on any connection. Every op raises
    `KvpeerError` when the daemon refuses it.
    """

    def __init__(self, socket_path, timeout=30.0):
        self.socket_path = socket_path
        self.timeout = timeout
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(socket_path)
        except OSError:
            self._sock.close()
            raise
        self._buf = bytearray()
        self._next_id = 1

    # -- connection plumbing -------------------------------------------------

    def close(self):
        """Closes the connection; for an engine this ends its session."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def abort(self):
        """Closes the connection abruptly (RST-like for the daemon: unread
        data is dropped), the closest a test gets to an engine crash without
        a second process."""
        if self._sock is not None:
            self._sock.shutdown(socket.SHUT_RDWR)
            self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def fileno(self):
        return self._sock.fileno()

    def send_line(self, line, fds=None):
        """Sends raw bytes (a newline is appended when missing), optionally
        with file descriptors attached via SCM_RIGHTS. For tests that must
        send what `request` would refuse to build."""
        if not line.endswith(b"\n"):
            line += b"\n"
        if fds:
            # The descriptors ride on the first bytes of the line; anything a
            # short sendmsg left over follows as ordinary data.
            sent = socket.send_fds(self._sock, [line], list(fds))
            line = line[sent:]
        if line:
            self._sock.sendall(line)

    def read_response(self, timeout=None):
        """Reads one response line and returns it decoded (a dict)."""
        self._sock.settimeout(self.timeout if timeout is None else timeout)
        while True:
            nl = self._buf.find(b"\n")
            if nl >= 0:
                raw = bytes(self._buf[:nl])
                del self._buf[: nl + 1]
                break
            chunk = self._sock.recv(1 << 20)
            if not chunk:
                raise ProtocolError("connection closed by the daemon")
            self._buf += chunk
        try:
            response = json.loads(raw)
        except ValueError as e:
            raise ProtocolError(f"response is not JSON: {raw[:200]!r}") from e
        if not isinstance(response, dict):
            raise ProtocolError(f"response is not an object: {raw[:200]!r}")
        return response

    def is_closed_by_peer(self, timeout=5.0):
        """True when the daemon has closed this connection (EOF), after
        discarding anything it still sent. Used to check 'the connection is
        closed after the answer'."""
        self._sock.settimeout(timeout)
        try:
            while True:
                chunk = self._sock.recv(1 << 20)
                if not chunk:
                    return True
        except socket.timeout:
            return False
        except ConnectionResetError:
            return True

    def request(self, op, _fds=None, _timeout=None, **fields):
        """Sends one request and returns the successful response (a dict).

        Raises KvpeerError for `ok: false`, ProtocolError when the answer
        does not belong to this request."""
        rid = self._next_id
        self._next_id += 1
        msg = {"id": rid, "op": op}
        msg.update(fields)
        self.send_line(json.dumps(msg, separators=(",", ":")).encode(), fds=_fds)
        response = self.read_response(timeout=_timeout)
        if response.get("id") != rid:
            # A mismatch is only legitimate for a daemon-side framing error
            # (too_large answers id null); surface that as the error it is.
            err = response.get("error")
            if response.get("ok") is False and isinstance(err, dict) and response.get("id") is None:
                raise KvpeerError(err.get("code"), err.get("message"), response)
            raise ProtocolError(f"response id {response.get('id')!r} does not answer request {rid}")
        if response.get("ok") is True:
            return response
        err = response.get("error")
        if response.get("ok") is False and isinstance(err, dict):
            raise KvpeerError(err.get("code"), err.get("message"), response)
        raise ProtocolError(f"malformed response: {response!r}")

    # -- engine session ------------------------------------------------------

    def hello(self, client, block_len, config_fingerprint, hash_seed):
        """Opens the engine session; returns {node_id, version, wire_version}."""
        return self.request("hello", client=client, block_len=block_len,
                            config_fingerprint=config_fingerprint, hash_seed=hash_seed)

    def register_region(self, path, num_blocks, offset=None):
        """Registers a file (e.g. under /dev/shm) as this engine's region."""
        fields = {"path": path, "num_blocks": num_blocks}
        if offset is not None:
            fields["offset"] = offset
        return self.request("register_region", **fields)

    def register_region_fd(self, fd, num_blocks, offset=None):
        """Registers a region by passing its descriptor (SCM_RIGHTS), for
        memfd regions that have no path the daemon could open."""
        fields = {"fd": True, "num_blocks": num_blocks}
        if offset is not None:
            fields["offset"] = offset
        return self.request("register_region", _fds=[fd], **fields)

    def publish(self, keys, block_ids, seal=False):
        """Announces that `keys` are held at `block_ids`; returns the count.
        With seal=True the daemon keeps each block's checksum as it is now,
        so a peer's load fails if the slot changes before it is served."""
        fields = {"seal": True} if seal else {}
        return self.request("publish", keys=_hex_keys(keys), block_ids=list(block_ids), **fields)["published"]

    def unpublish(self, keys):
        """Withdraws keys; returns {"released": [...], "pinned": [...]}."""
        r = self.request("unpublish", keys=_hex_keys(keys))
        return {"released": r["released"], "pinned": r["pinned"]}

    def lookup(self, peer, kv_request_id, keys, flush=None, wait_ms=None):
        """Probes `keys` on `peer`; returns "hit"/"miss"/"retry" per key.
        With `wait_ms` the probe is sent at once and the answer waits until
        no key is "retry" or wait_ms has passed (one call resolves it)."""
        fields = {"peer": peer, "kv_request_id": kv_request_id, "keys": _hex_keys(keys)}
        if flush is not None:
            fields["flush"] = flush
        timeout = None
        if wait_ms is not None:
            fields["wait_ms"] = wait_ms
            timeout = max(self.timeout, wait_ms / 1000.0 + _SLACK_S) if isinstance(wait_ms, (int, float)) else None
        return self.request("lookup", _timeout=timeout, **fields)["results"]

    def flush(self):
        """Sends this engine's registered probes; returns lookup messages sent."""
        return self.request("flush")["sent"]

    def load(self, job_id, peer, kv_request_id, keys, block_ids):
        """Fetches keys from `peer` into `block_ids`; the result comes via poll."""
        self.request("load", job_id=job_id, peer=peer, kv_request_id=kv_request_id,
                     keys=_hex_keys(keys), block_ids=list(block_ids))

    def store(self, job_id, kv_request_id, keys, block_ids, seal=False):
        """Offers these slots to a remote decoder (disaggregated prefill);
        seal as for publish."""
        fields = {"seal": True} if seal else {}
        self.request("store", job_id=job_id, kv_request_id=kv_request_id,
                     keys=_hex_keys(keys), block_ids=list(block_ids), **fields)

    def finish(self, kv_request_id):
        """Tells the daemon this engine is done with the request."""
        self.request("finish", kv_request_id=kv_request_id)

    def poll(self, wait_ms=None):
        """Takes everything finished since the last poll:
        {"results": [...], "failed_requests": [...], "released": [...]}."""
        fields = {}
        timeout = None
        if wait_ms is not None:
            fields["wait_ms"] = wait_ms
            timeout = max(self.timeout, wait_ms / 1000.0 + _SLACK_S)
        r = self.request("poll", _timeout=timeout, **fields)
        return {"results": r["results"], "failed_requests": r["failed_requests"], "released": r["released"]}

    # -- operator operations -------------------------------------------------

    def status(self):
        return self.request("status")

    def metrics(self):
        """Returns the Prometheus text exposition."""
        return self.request("metrics")["text"]

    def connect(self, peer, timeout=None):
        """Dials `peer` now; raises peer_unavailable if it cannot be reached."""
        self.request("connect", _timeout=timeout, peer=peer)

    def disconnect(self, peer):
        self.request("disconnect", peer=peer)


class Region:
    """An engine's block region: `num_blocks` blocks of `block_len` bytes of
    shared memory, mapped here and (after registration) by the daemon.

    Either a memfd (no name in the filesystem; registered by passing the
    descriptor) or a file under /dev/shm (registered by path). Both map the
    same pages MAP_SHARED, so what the daemon writes into a slot is what
    `read_block` returns.
    """

    def __init__(self, fd, num_blocks, block_len, path=None, offset=0):
        self.fd = fd
        self.num_blocks = num_blocks
        self.block_len = block_len
        self.path = path
        self.offset = offset
        self.size = num_blocks * block_len
        self._map = mmap.mmap(fd, offset + self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)

    @classmethod
    def memfd(cls, num_blocks, block_len, name="kvpeer-region"):
        """A region backed by an anonymous memfd."""
        fd = os.memfd_create(name, os.MFD_CLOEXEC)
        os.ftruncate(fd, num_blocks * block_len)
        return cls(fd, num_blocks, block_len)

    @classmethod
    def shm_file(cls, num_blocks, block_len, directory="/dev/shm", offset=0, prefix="kvpeer-region-"):
        """A region backed by a new file in `directory`, `offset` bytes in."""
        fd, path = tempfile.mkstemp(prefix=prefix, dir=directory)
        os.ftruncate(fd, offset + num_blocks * block_len)
        return cls(fd, num_blocks, block_len, path=path, offset=offset)

    def _span(self, i):
        if not 0 <= i < self.num_blocks:
            raise IndexError(f"block {i} outside 0..{self.num_blocks - 1}")
        start = self.offset + i * self.block_len
        return start, start + self.block_len

    def write_block(self, i, data):
        if len(data) != self.block_len:
            raise ValueError(f"block data is {len(data)} bytes, block_len is {self.block_len}")
        start, end = self._span(i)
        self._map[start:end] = data

    def read_block(self, i):
        start, end = self._span(i)
        return self._map[start:end]

    def clear(self):
        """Zeroes every block, so a later check cannot pass on stale bytes."""
        zero = bytes(self.block_len)
        for i in range(self.num_blocks):
            self.write_block(i, zero)

    def close(self):
        """Unmaps, closes the descriptor and removes the file, if any."""
        if self._map is None:
            return
        self._map.close()
        self._map = None
        os.close(self.fd)
        if self.path is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
