"""Every kvpeerd limit, hit against real daemons. A limit refuses work with
an error that names it (or, towards a peer, with an ordinary answer: an
all-miss lookup_resp, a failed transfer, a disconnect with a reason), counts
the hit as `limit_<name>` in status.counters, logs it, and leaves everything
else working.

  --max-engines          a further hello answers conflict
  --max-peers            a dial beyond it fails with peer_unavailable; a new
                         inbound peer gets disconnect{reason:"too many peers"}
  --max-pending-lookups  a lookup that would hold more distinct probes in the
                         request's open round answers bad_request
  --max-rounds-per-peer  a lookup that would open one round too many answers
                         all-miss; a fetch that would, transfer_done{false}
  --max-queued-bytes     a peer that sends lookups but never reads the
                         answers stops being read: the queue stays bounded
"""

import os
import socket
import time
import unittest

from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer_testing.wire_peer import WirePeer, encode_frame
from kvpeer import KvpeerError
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, make_keys

BLOCK_LEN = 4096


def counter(daemon, name):
    return daemon.status()["counters"].get(name, 0)


def peer_status(daemon, peer_id):
    for p in daemon.status()["peers"]:
        if p["peer_id"] == peer_id:
            return p
    return None


class LimitsTest(DaemonTestCase):

    def test_defaults_are_reported(self):
        a = self.start_daemon("a", BLOCK_LEN)
        config = a.status()["config"]
        self.assertEqual((config["max-peers"], config["max-engines"], config["max-rounds-per-peer"],
                          config["max-pending-lookups"], config["max-queued-bytes"]),
                         (64, 64, 4096, 65536, 64 * 1024 * 1024))

    def test_max_engines(self):
        a = self.start_daemon("a", BLOCK_LEN, extra=["--max-engines", "2"])
        first = self.engine(a, 2, BLOCK_LEN, name="e1")
        self.engine(a, 2, BLOCK_LEN, name="e2")
        c = self.client(a)
        err = self.assertApiError("conflict", c.hello, "e3", BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED)
        self.assertIn("max-engines (2) reached", err.message)
        self.assertEqual(counter(a, "limit_max_engines"), 1)
        self.assertIn("limit reached", a.log_text())
        self.assertEqual(len(a.status()["engines"]), 2)
        # The refusal left the connection usable; once an engine is gone the
        # same hello succeeds.
        first.close()
        self.wait_until(lambda: len(a.status()["engines"]) == 1, what="engine e1 gone")
        self.assertEqual(c.hello("e3", BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED)["node_id"], a.node_id)

    def test_max_peers_dial(self):
        a = self.start_daemon("a", BLOCK_LEN, extra=["--max-peers", "1"])
        b = self.start_daemon("b", BLOCK_LEN)
        c = self.start_daemon("c", BLOCK_LEN)
        with self.client(a) as op:
            op.connect(b.listen)
            err = self.assertApiError("peer_unavailable", op.connect, c.listen)
        self.assertIn("max-peers (1) reached", err.message)
        self.assertEqual(counter(a, "limit_max_peers"), 1)
        self.assertIsNone(peer_status(a, c.listen), "a refused peer is not listed")
        # An engine's load to the refused peer fails at once with the same
        # reason; its lookups answer miss, as for any unavailable peer.
        e = self.engine(a, 2, BLOCK_LEN)
        err = self.assertApiError("peer_unavailable", e.client.load, 1, c.listen, "r", make_keys("k", 1), [0])
        self.assertIn("max-peers (1)", err.message)
        self.assertEqual(e.client.lookup(c.listen, "r2", make_keys("k", 1), flush=True), ["miss"])
        self.assertEqual(counter(a, "limit_max_peers"), 3)
        # The session that exists works as before.
        self.assertEqual(peer_status(a, b.listen)["state"], "ready")
        # Once it is gone there is room again.
        with self.client(a) as op:
            op.disconnect(b.listen)
            self.wait_until(lambda: peer_status(a, b.listen)["state"] == "closed", what="b closed")
            op.connect(c.listen)

    def test_max_peers_accept(self):
        a = self.start_daemon("a", BLOCK_LEN, extra=["--max-peers", "1"])
        b = self.start_daemon("b", BLOCK_LEN)
        c = self.start_daemon("c", BLOCK_LEN)
        with self.client(a) as op:
            op.connect(b.listen)
        # Wire 1.1 section 4 "nothing before authentication": a's limit can only
        # apply once c's connection is authenticated, and without a PSK c may
        # already be ready by then. So c's connect either fails at once or
        # succeeds and is closed right after; either way c ends refused.
        with self.client(c) as op:
            try:
                op.connect(a.listen)
            except KvpeerError as err:
                self.assertEqual(err.code, "peer_unavailable")
                self.assertIn("too many peers", err.message)
        self.wait_until(lambda: "too many peers" in (peer_status(c, a.listen)["last_error"] or ""),
                        what="c refused with 'too many peers'")
        self.wait_until(lambda: counter(a, "limit_max_peers") >= 1, what="refusal counted")
        self.assertIsNone(peer_status(a, c.node_id))
        self.assertEqual(peer_status(a, b.listen)["state"], "ready")

    def test_max_pending_lookups(self):
        a = self.start_daemon("a", BLOCK_LEN, extra=["--max-pending-lookups", "4"])
        b = self.start_daemon("b", BLOCK_LEN)
        e = self.engine(a, 8, BLOCK_LEN)
        keys = make_keys("probe", 6)
        e.client.lookup(b.listen, "r1", keys[:3], flush=True)
        err = self.assertApiError("bad_request", e.client.lookup, b.listen, "r1", keys[:5], True)
        self.assertIn("max-pending-lookups (4) reached", err.message)
        self.assertIn("'r1'", err.message)
        self.assertEqual(counter(a, "limit_max_pending_lookups"), 1)
        # Up to the limit is fine, and asking again for the same keys (the
        # usual retry loop) adds nothing.
        answers = e.probe(b.listen, "r1", keys[:4])
        self.assertEqual(answers, ["miss"] * 4)
        self.assertApiError("bad_request", e.client.lookup, b.listen, "r1", keys[3:6], True)
        # The limit is per request.
        self.assertEqual(len(e.client.lookup(b.listen, "r2", keys[2:6], flush=True)), 4)
        self.assertApiError("bad_request", e.client.lookup, b.listen, "r3", keys[:5], True)
        self.assertEqual(counter(a, "limit_max_pending_lookups"), 3)
        # Finishing the request frees its probes.
        e.client.finish("r1")
        self.assertEqual(len(e.client.lookup(b.listen, "r1", keys[2:6], flush=True)), 4)

    def test_max_rounds_per_peer(self):
        a = self.start_daemon("a", BLOCK_LEN, extra=["--max-rounds-per-peer", "1"])
        b = self.start_daemon("b", BLOCK_LEN)
        producer = self.engine(a, 8, BLOCK_LEN, name="producer")
        consumer = self.engine(b, 8, BLOCK_LEN, name="consumer")
        keys = make_keys("rounds", 4)
        producer.fill_and_publish(keys, range(4))

        self.assertEqual(consumer.probe(a.listen, "r1", keys[:1]), ["hit"])
        # A second request would open a second round on a: refused, all-miss.
        self.assertEqual(consumer.probe(a.listen, "r2", keys[1:2]), ["miss"])
        self.wait_until(lambda: counter(a, "limit_max_rounds_per_peer") >= 1, what="refusal counted")
        self.assertEqual(peer_status(a, b.node_id)["rounds_open"], 1)
        # A disaggregated-prefill fetch would open one too: its load fails.
        job = consumer.load(a.listen, "pd", keys[2:3], [2])
        self.assertFalse(consumer.wait_jobs([job])[job]["success"])
        self.assertGreaterEqual(counter(a, "limit_max_rounds_per_peer"), 2)
        self.assertIn("max-rounds-per-peer", a.log_text())
        # The open round is served as usual.
        job = consumer.load(a.listen, "r1", keys[:1], [0])
        self.assertTrue(consumer.wait_jobs([job])[job]["success"])
        self.assertEqual(consumer.verify(keys[:1], [0]), [])
        consumer.client.finish("r1")
        consumer.client.finish("r2")
        self.wait_until(lambda: peer_status(a, b.node_id)["rounds_open"] == 0, what="rounds closed")
        self.assertEqual(consumer.probe(a.listen, "r3", keys[1:2]), ["hit"])
        # Nothing of this was a protocol violation: the session is still up.
        self.assertEqual(peer_status(b, a.listen)["state"], "ready")

    def test_max_queued_bytes_stops_reading_a_peer_that_does_not_read(self):
        limit = 65536
        a = self.start_daemon("a", BLOCK_LEN, extra=["--max-queued-bytes", str(limit)])
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # fills fast
        host, _, port = a.listen.rpartition(":")
        sock.connect((host, int(port)))
        peer = WirePeer(sock, "127.0.0.1:1", BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED)
        self.addCleanup(peer.close)
        peer.handshake()
        self.wait_until(lambda: (peer_status(a, "127.0.0.1:1") or {}).get("state") == "ready", what="ready")

        # Lookups of 1000 keys each (~70 KB); the answers are never read.
        keys = [os.urandom(32).hex() for _ in range(1000)]
        lookup_bytes = 0
        sock.setblocking(False)
        frames = 0
        last_progress = time.monotonic()
        pending = b""
        while time.monotonic() - last_progress < 2.0 and frames < 2000:
            if not pending:
                pending = encode_frame({"type": "lookup", "kv_request_id": f"flood-{frames}", "keys": keys,
                                        "round_seq": frames})
                frames += 1
            try:
                n = sock.send(pending)
            except BlockingIOError:
                time.sleep(0.01)
                continue
            pending = pending[n:]
            lookup_bytes += n
            last_progress = time.monotonic()
        self.assertLess(frames, 2000, "the daemon kept reading everything a non-reading peer sent")

        st = peer_status(a, "127.0.0.1:1")
        self.assertEqual(st["state"], "ready", dump(st))
        self.assertGreaterEqual(counter(a, "limit_max_queued_bytes"), 1)
        self.assertIn("max-queued-bytes", a.log_text())
        # Bounded: the limit plus the answers to one read (one ~75 KB answer
        # here, the read-ahead being 64 KiB).
        self.assertGreater(st["queued_bytes"], limit // 2, dump(st))
        self.assertLess(st["queued_bytes_peak"], limit + 200 * 1024, dump(st))
        # The daemon does not read on: bytes_received stands still while we
        # still have unsent lookups.
        received = st["bytes_received"]
        time.sleep(1.0)
        self.assertEqual(peer_status(a, "127.0.0.1:1")["bytes_received"], received)
        self.assertLess(received, lookup_bytes + 1, "received more than was sent")
        # A silent peer (nothing read from it) is dropped by the liveness
        # check, which frees the queue.
        self.wait_until(lambda: peer_status(a, "127.0.0.1:1")["state"] == "closed", timeout=30,
                        what="the stalled session closed")
        st = peer_status(a, "127.0.0.1:1")
        self.assertIn("silent", st["last_error"], dump(st))
        self.assertEqual(st["queued_bytes"], 0)


if __name__ == "__main__":
    unittest.main()
