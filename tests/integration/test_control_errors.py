"""Every control-API error code, provoked against a real daemon.

Each refusal must come with the right code and a message, must leave the
node's state as it was (compared through `status` before and after), and
must leave the connection usable (a `status` on the same connection
answers) — except `too_large`, which closes the connection after its
answer. `internal` is not provokable from outside by design.
"""

import socket
import tempfile
import time
import unittest

from kvpeer_testing.harness import DaemonTestCase, dump, settled_status, snapshot
from kvpeer import MAX_LINE_BYTES, KvpeerError, ProtocolError, Region
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, make_keys

BLOCK_LEN = 64 * 1024
NUM_BLOCKS = 16


def free_port():
    """A TCP port nobody listens on (bound, then released)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class ControlErrorsTest(DaemonTestCase):

    def setUp(self):
        super().setUp()
        self.a = self.start_daemon("a", BLOCK_LEN)
        # The daemons here are all configured by flags, so peers connect.
        self.b = self.start_daemon("b", BLOCK_LEN)

    # -- helpers ---------------------------------------------------------------

    def raw(self):
        """A connection that has not said hello."""
        return self.client(self.a)

    def engine_conn(self, name="engine", num_blocks=NUM_BLOCKS, register=True, daemon=None):
        """A connection that said hello (and registered a memfd region)."""
        c = self.client(daemon or self.a)
        c.hello(name, BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED)
        if register:
            region = Region.memfd(num_blocks, BLOCK_LEN)
            self.engines.append(region)
            c.register_region_fd(region.fd, num_blocks)
        return c

    def refused(self, code, conn, fn, *args, **kwargs):
        """Asserts fn fails with `code`, changes nothing on node a, and
        leaves `conn` usable. Returns the error."""
        before = snapshot(settled_status(self.a))
        err = self.assertApiError(code, fn, *args, **kwargs)
        self.assertEqual(snapshot(self.a.status()), before, f"state changed by a refused request ({code})")
        conn.status()  # the connection survived
        return err

    def refused_raw(self, code, conn, line, expect_id="absent"):
        """Sends a raw line; asserts the error response and no state change."""
        before = snapshot(settled_status(self.a))
        conn.send_line(line)
        r = conn.read_response()
        self.assertIs(r.get("ok"), False, dump(r))
        self.assertEqual(r["error"]["code"], code, dump(r))
        self.assertTrue(r["error"]["message"])
        if expect_id != "absent":
            self.assertEqual(r.get("id"), expect_id, dump(r))
        self.assertEqual(snapshot(self.a.status()), before)
        conn.status()
        return r

    def park_load(self, c, job_id, kv, slots, peer=None):
        """A PD load that waits for supply nobody stores: in flight until
        finished."""
        keys = make_keys(f"parked-{kv}", len(slots))
        c.load(job_id, peer or self.b.listen, kv, keys, list(slots))
        return keys

    # -- bad_request -----------------------------------------------------------

    def test_bad_request_framing(self):
        c = self.raw()
        r = self.refused_raw("bad_request", c, b"this is not json")
        self.assertIsNone(r.get("id"))
        self.refused_raw("bad_request", c, b"{\"op\": \"status\"")  # truncated JSON
        for line in (b"[1, 2, 3]", b"42", b"\"status\"", b"null"):
            self.refused_raw("bad_request", c, line)
        self.refused_raw("bad_request", c, b'{"id": 7}', expect_id=7)  # op missing
        self.refused_raw("bad_request", c, b'{"id": 8, "op": 5}', expect_id=8)  # op not a string
        self.refused_raw("bad_request", c, b'{"id": "x", "op": null}', expect_id="x")

    def test_bad_request_engine_op_before_hello(self):
        c = self.raw()
        key = make_keys("k", 1)
        self.refused("bad_request", c, c.register_region, "/dev/shm/none", 1)
        self.refused("bad_request", c, c.publish, key, [0])
        self.refused("bad_request", c, c.unpublish, key)
        self.refused("bad_request", c, c.lookup, self.b.listen, "kv", key, True)
        self.refused("bad_request", c, c.flush)
        self.refused("bad_request", c, c.load, 1, self.b.listen, "kv", key, [0])
        self.refused("bad_request", c, c.store, 1, "kv", key, [0])
        self.refused("bad_request", c, c.finish, "kv")
        self.refused("bad_request", c, c.poll)

    def test_bad_request_field_types(self):
        c = self.raw()
        self.refused("bad_request", c, c.request, "hello", client="x", block_len="65536",
                     config_fingerprint=DEFAULT_FINGERPRINT, hash_seed=DEFAULT_HASH_SEED)
        self.refused("bad_request", c, c.request, "hello", client="x", block_len=True,
                     config_fingerprint=DEFAULT_FINGERPRINT, hash_seed=DEFAULT_HASH_SEED)
        self.refused("bad_request", c, c.request, "hello", client="x", block_len=BLOCK_LEN,
                     config_fingerprint=DEFAULT_FINGERPRINT)  # hash_seed missing
        self.refused("bad_request", c, c.request, "connect", peer=5)
        e = self.engine_conn()
        key = make_keys("k", 2)
        self.refused("bad_request", e, e.request, "publish", keys=key[0].hex(), block_ids=[0])
        self.refused("bad_request", e, e.request, "publish", keys=[key[0].hex()])  # block_ids missing
        self.refused("bad_request", e, e.request, "publish", keys=[key[0].hex()], block_ids=["0"])
        self.refused("bad_request", e, e.request, "publish", keys=[k.hex() for k in key], block_ids=[0])
        self.refused("bad_request", e, e.request, "lookup", peer=self.b.listen, kv_request_id="kv",
                     keys=[key[0].hex()], flush="yes")
        self.refused("bad_request", e, e.request, "load", job_id="1", peer=self.b.listen,
                     kv_request_id="kv", keys=[key[0].hex()], block_ids=[0])
        self.refused("bad_request", e, e.request, "load", job_id=1, peer=self.b.listen,
                     kv_request_id=7, keys=[key[0].hex()], block_ids=[0])
        self.refused("bad_request", e, e.request, "finish")
        self.refused("bad_request", e, e.request, "poll", wait_ms=60001)
        self.refused("bad_request", e, e.request, "poll", wait_ms=-1)

    def test_bad_request_bad_hex_key(self):
        e = self.engine_conn()
        for bad in ("zz", "abc", "0x00", "", "ab cd"):
            self.refused("bad_request", e, e.request, "publish", keys=[bad], block_ids=[0])
            self.refused("bad_request", e, e.request, "lookup", peer=self.b.listen, kv_request_id="kv",
                         keys=[bad], flush=True)

    def test_bad_request_region(self):
        e = self.engine_conn(register=False)
        with tempfile.NamedTemporaryFile(dir="/dev/shm", prefix="kvpeer-small-") as f:
            f.truncate(4096)
            f.flush()
            self.refused("bad_request", e, e.register_region, f.name, 4)
        with tempfile.NamedTemporaryFile(dir="/dev/shm", prefix="kvpeer-exact-") as f:
            f.truncate(4 * BLOCK_LEN)
            f.flush()
            self.refused("bad_request", e, e.register_region, f.name, 4, offset=1)
            self.refused("bad_request", e, e.register_region, f.name, 5)
        self.refused("bad_request", e, e.register_region, "/nonexistent/kvpeer/region", 1)
        self.refused("bad_request", e, e.request, "register_region", fd=True, num_blocks=1)  # no fd attached
        self.refused("bad_request", e, e.register_region, "/dev/shm", 1)  # a directory
        # None of that counted as the session's region: a good one is accepted.
        with Region.shm_file(4, BLOCK_LEN, offset=4096) as region:
            r = e.register_region(region.path, 4, offset=4096)
            self.assertEqual(r["bytes"], 4 * BLOCK_LEN)

    def test_bad_request_load_of_unconfirmed_key(self):
        """A symmetric request may load only keys answered hit in the open round."""
        e = self.engine_conn()
        keys = make_keys("nobody-has-these", 2)
        deadline = time.monotonic() + 15
        while "retry" in (answers := e.lookup(self.b.listen, "probed-kv", keys, flush=True)):
            self.assertLess(time.monotonic(), deadline, "lookup still answers retry")
            time.sleep(0.02)
        self.assertEqual(answers, ["miss", "miss"])
        self.refused("bad_request", e, e.load, 1, self.b.listen, "probed-kv", keys, [0, 1])
        self.assertEqual(e.poll(wait_ms=200)["results"], [])

    # -- unknown_op, incompatible, no_region, out_of_range ----------------------

    def test_unknown_op(self):
        c = self.raw()
        self.refused("unknown_op", c, c.request, "frobnicate")
        e = self.engine_conn()
        self.refused("unknown_op", e, e.request, "Publish", keys=[], block_ids=[])
        # A long op of multi-byte characters is quoted cut short, never in
        # the middle of a character (the reply must stay valid UTF-8 JSON).
        err = self.refused("unknown_op", c, c.request, "x" + "\u00e9" * 100)
        self.assertIn("op 'x" + "\u00e9" * 31 + "'", err.message)

    def test_incompatible(self):
        c = self.raw()
        cases = [("block_len", dict(block_len=BLOCK_LEN * 2)),
                 ("config_fingerprint", dict(config_fingerprint="another-model")),
                 ("hash_seed", dict(hash_seed="another-seed"))]
        for field, override in cases:
            args = dict(client="odd", block_len=BLOCK_LEN, config_fingerprint=DEFAULT_FINGERPRINT,
                        hash_seed=DEFAULT_HASH_SEED)
            args.update(override)
            err = self.refused("incompatible", c, c.request, "hello", **args)
            self.assertIn(field, err.message)
        self.assertNotIn("another-seed", err.message, "hash_seed values must not be echoed")
        # The refusal did not poison the connection: a matching hello works.
        self.assertEqual(c.hello("fine", BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED)["node_id"],
                         self.a.node_id)

    def test_no_region(self):
        e = self.engine_conn(register=False)
        key = make_keys("k", 1)
        self.refused("no_region", e, e.publish, key, [0])
        self.refused("no_region", e, e.load, 1, self.b.listen, "kv", key, [0])
        self.refused("no_region", e, e.store, 1, "kv", key, [0])

    def test_out_of_range(self):
        e = self.engine_conn()
        key = make_keys("k", 2)
        self.refused("out_of_range", e, e.publish, key[:1], [NUM_BLOCKS])
        self.refused("out_of_range", e, e.publish, key, [0, NUM_BLOCKS + 100])
        self.refused("out_of_range", e, e.load, 1, self.b.listen, "kv", key[:1], [NUM_BLOCKS])
        self.refused("out_of_range", e, e.store, 1, "kv", key[:1], [NUM_BLOCKS])
        self.assertEqual(e.publish(key[:1], [NUM_BLOCKS - 1]), 1)  # the last slot is fine

    # -- conflict --------------------------------------------------------------

    def test_conflict_second_region(self):
        e = self.engine_conn()
        with Region.memfd(4, BLOCK_LEN) as region:
            self.refused("conflict", e, e.register_region_fd, region.fd, 4)

    def test_conflict_job_ids_and_slots(self):
        e = self.engine_conn()
        self.park_load(e, 1, "kv-1", range(0, 4))
        # job 1 has no delivered result yet
        self.refused("conflict", e, self.park_load, e, 1, "kv-2", range(8, 12))
        self.refused("conflict", e, e.store, 1, "kv-store", make_keys("s", 1), [15])
        # destination slots of loads in flight may not overlap
        self.refused("conflict", e, self.park_load, e, 2, "kv-3", range(3, 7))
        self.park_load(e, 2, "kv-3", range(4, 8))  # adjacent is fine
        # once job 1's result is delivered, its id and slots are free again
        e.finish("kv-1")
        deadline = time.monotonic() + 15
        got = []
        while not any(r["job_id"] == 1 for r in got):
            self.assertLess(time.monotonic(), deadline, "no result for the finished load")
            got += e.poll(wait_ms=500)["results"]
        self.park_load(e, 1, "kv-4", range(0, 4))
        e.finish("kv-3")
        e.finish("kv-4")

    def test_conflict_kv_request_id_of_another_engine(self):
        e1 = self.engine_conn("engine-1")
        e2 = self.engine_conn("engine-2")
        self.park_load(e1, 1, "shared-kv", range(0, 4))
        self.refused("conflict", e2, self.park_load, e2, 1, "shared-kv", range(0, 4))
        self.refused("conflict", e2, e2.lookup, self.b.listen, "shared-kv", make_keys("x", 1), True)
        # Towards another peer the same id is someone else's business.
        c = self.start_daemon("c", BLOCK_LEN)
        self.park_load(e2, 1, "shared-kv", range(0, 4), peer=c.listen)
        e1.finish("shared-kv")
        e2.finish("shared-kv")

    # -- not_found, peer_unavailable -------------------------------------------

    def test_not_found(self):
        c = self.raw()
        self.refused("not_found", c, c.disconnect, f"127.0.0.1:{free_port()}")
        # a known-but-unconnected name is just as unknown
        self.refused("not_found", c, c.disconnect, self.b.listen)

    def test_peer_unavailable(self):
        dead = f"127.0.0.1:{free_port()}"
        e = self.engine_conn()
        # Each try either is refused at once (the peer is backing off) or is
        # accepted and fails through poll; backoff grows, so this converges.
        refused = None
        deadline = time.monotonic() + 30
        job = 0
        while refused is None:
            self.assertLess(time.monotonic(), deadline, "never answered peer_unavailable")
            job += 1
            try:
                self.park_load(e, job, f"dead-{job}", range(0, 4), peer=dead)
            except KvpeerError as err:
                self.assertEqual(err.code, "peer_unavailable", err.message)
                refused = job
                break
            res = []
            while not any(r["job_id"] == job for r in res):
                self.assertLess(time.monotonic(), deadline, f"load {job} to a dead peer never ended")
                res += e.poll(wait_ms=500)["results"]
            self.assertFalse([r for r in res if r["job_id"] == job][0]["success"])
        # The refused load owes no result and holds no slots.
        self.assertEqual([r for r in e.poll(wait_ms=300)["results"] if r["job_id"] == refused], [])
        self.assertEqual(self.a.status()["engines"][0]["loads_in_flight"], 0)
        # connect to a peer that cannot be reached
        c = self.raw()
        self.assertApiError("peer_unavailable", c.connect, dead, timeout=30)

    # -- too_large ---------------------------------------------------------------

    def test_too_large(self):
        other = self.engine_conn("bystander")
        before = snapshot(settled_status(self.a))
        c = self.raw()
        pad = MAX_LINE_BYTES  # the line is longer than the limit by the JSON around the pad
        line = b'{"id": 1, "op": "status", "pad": "' + b"a" * pad + b'"}\n'
        try:
            c.send_line(line)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon may answer and close before it read everything
        r = c.read_response()
        self.assertEqual(r.get("ok"), False, dump(r))
        self.assertEqual(r["error"]["code"], "too_large")
        self.assertIn("id", r)
        self.assertIsNone(r["id"])
        self.assertTrue(c.is_closed_by_peer(), "connection must be closed after too_large")
        self.assertEqual(snapshot(self.a.status()), before)
        other.status()

    def test_line_at_the_limit_is_accepted(self):
        c = self.raw()
        head = b'{"id": 2, "op": "status", "pad": "'
        tail = b'"}'
        c.send_line(head + b"b" * (MAX_LINE_BYTES - len(head) - len(tail)) + tail)
        r = c.read_response(timeout=60)
        self.assertEqual((r.get("id"), r.get("ok")), (2, True), dump(r))

    # -- shutting_down -----------------------------------------------------------

    def test_shutting_down(self):
        """After SIGTERM the daemon drains: in-flight loads end with a
        result, new work is refused with shutting_down (if the drain window
        is long enough to observe), then the socket closes and the process
        exits 0 (checked at cleanup)."""
        e = self.engine_conn()
        self.park_load(e, 1, "drain-kv", range(0, 4))
        self.a.send_term()
        codes, job_results, polls_answered, closed = [], [], 0, False
        for n in range(2, 2000):
            try:
                try:
                    self.park_load(e, n, f"late-{n}", range(8, 9))
                    e.finish(f"late-{n}")
                except KvpeerError as err:
                    codes.append(err.code)
                try:
                    job_results += e.poll(wait_ms=20)["results"]
                    polls_answered += 1
                except KvpeerError as err:
                    codes.append(err.code)
            except (OSError, ProtocolError):  # the socket closed: the drain is over
                closed = True
                break
            if "shutting_down" in codes and any(r["job_id"] == 1 for r in job_results):
                break
        self.assertEqual(self.a.wait_exit(), 0, "SIGTERM must drain and exit 0")
        self.assertTrue(set(codes) <= {"shutting_down"}, f"unexpected errors during shutdown: {codes}")
        first = [r for r in job_results if r["job_id"] == 1]
        self.assertLessEqual(len(first), 1, dump(job_results))
        if first:
            self.assertFalse(first[0]["success"])
        if "shutting_down" not in codes:
            self.skipTest("shutting_down not observable: the daemon finished its drain and closed the "
                          f"connection (closed={closed}) before a new request reached it "
                          f"({polls_answered} polls answered)")


if __name__ == "__main__":
    unittest.main()
