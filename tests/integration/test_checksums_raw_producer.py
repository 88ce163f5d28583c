"""Per-block xxh3 checksums (wire-protocol.md section 7), a producer's
checksums as the consumer daemon checks them:

  RawProducerTest       a raw wire_peer.WirePeer as the producer a consumer
                        daemon dials: with xxh3 on, block_data without a valid
                        xxh3 array (missing, wrong length, not 16 lowercase
                        hex digits) is a violation that closes the session
                        naming xxh3; a well-formed but wrong value fails only
                        that load, the session goes on; with the feature off
                        a block_data without xxh3 (or with a junk one) is
                        accepted.
"""

import socket
import time
import unittest

from kvpeer_testing.fault_tools import metric_value, peer_entry
from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, block_content, make_keys
from fault_case import BLOCK_LEN, LOAD_TIMEOUT_S
from kvpeer_testing.wire_peer import WireListener, WirePeer, xxh3_list
from checksum_tools import block_number, counters, features_of


class RawProducerTest(DaemonTestCase):
    """The consumer daemon dials a WireListener its engine names as the
    peer; the WirePeer accepting that dial is the producer (named after the
    listener's address, as the dialer requires). Each case uses a fresh
    listener, so no case meets the backoff left by the previous one."""

    NUM_BLOCKS = 16

    def setUp(self):
        super().setUp()
        self.v = self.start_daemon("consumer-node", BLOCK_LEN, extra=["--load-timeout-s", str(LOAD_TIMEOUT_S)])
        self.e = self.engine(self.v, self.NUM_BLOCKS, BLOCK_LEN, name="consumer")
        self.n = 0

    def fake_producer(self, features):
        """A new listener, the engine's first lookup (which makes the daemon
        dial it), the accepted connection's handshake. Returns the peer."""
        listener = WireListener()
        self.addCleanup(listener.close)
        self.n += 1
        kv = f"raw-{self.n}-0"
        keys = make_keys(kv, 4)
        first = self.e.client.lookup(listener.address, kv, keys, flush=True)
        peer = listener.accept_peer(BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, timeout=5.0,
                                    features=features)
        self.addCleanup(peer.close)
        their = peer.handshake()
        self.assertIn("xxh3", their.get("features", []), f"the daemon did not offer xxh3: {dump(their)}")
        self.assertEqual(self.probe(peer, kv, keys, first), ["hit"] * 4)
        return peer, kv, keys

    def probe(self, peer, kv, keys, answers=None, timeout=10.0):
        """Asks the engine's lookup until it is no longer "retry", answering
        every lookup frame the daemon sends with all hits."""
        deadline = time.monotonic() + timeout
        while True:
            if answers is not None and "retry" not in answers:
                return answers
            self.assertLess(time.monotonic(), deadline, f"lookup still {answers}")
            try:
                f = peer.recv_frame(timeout=0.2)
            except (socket.timeout, TimeoutError):
                f = None
            if f is not None and f.type == "lookup":
                peer.send({"type": "lookup_resp", "kv_request_id": f.header["kv_request_id"],
                           "keys": f.header["keys"], "hits": [True] * len(f.header["keys"]),
                           "round_seq": f.header["round_seq"]})
            elif f is not None and f.type == "ping":
                peer.send({"type": "pong", "nonce": f.header["nonce"]})
            elif f is not None:
                self.fail(f"unexpected {f!r}")
            answers = self.e.client.lookup(peer.peer_id, kv, keys, flush=True)

    def load(self, peer, kv, keys, slots):
        for s in slots:
            self.e.region.write_block(s, bytes(BLOCK_LEN))
        job = self.e.load(peer.peer_id, kv, keys, slots)
        fetch = peer.recv_until("fetch").header
        self.assertEqual((fetch["kv_request_id"], fetch["block_indexes"]), (kv, list(slots)), dump(fetch))
        return job, fetch

    @staticmethod
    def block_data(fetch, indexes, payload, xxh3=WirePeer.DROP):
        h = {"type": "block_data", "kv_request_id": fetch["kv_request_id"], "round_seq": fetch["round_seq"],
             "block_indexes": list(indexes)}
        if xxh3 is not WirePeer.DROP:
            h["xxh3"] = xxh3
        return h, payload

    @staticmethod
    def done(peer, fetch, success=True):
        peer.send({"type": "transfer_done", "kv_request_id": fetch["kv_request_id"], "success": success,
                   "round_seq": fetch["round_seq"]})

    def test_malformed_xxh3_is_a_violation(self):
        """Feature on: block_data with no xxh3, an array one short or one
        long, an uppercase or a 15-digit or a non-string checksum: the
        consumer disconnects with a reason naming xxh3 (sent, and logged),
        the load fails with a reason, nothing is counted as a checksum
        failure."""
        slots = [4, 5, 6, 7]
        cases = [
            ("no xxh3", lambda good: WirePeer.DROP),
            ("one short", lambda good: good[:-1]),
            ("one long", lambda good: good + [good[0]]),
            ("uppercase hex", lambda good: [g.upper() if any(ch.isalpha() for ch in g) else "A" + g[1:]
                                            for g in good]),
            ("15 hex digits", lambda good: [g[1:] for g in good]),
            ("a number", lambda good: [int(g, 16) >> 12 for g in good]),
        ]
        for name, make in cases:
            with self.subTest(name):
                peer, kv, keys = self.fake_producer(["xxh3"])
                job, fetch = self.load(peer, kv, keys, slots)
                payload = b"".join(block_content(k, BLOCK_LEN) for k in keys)
                peer.send(*self.block_data(fetch, slots, payload, make(xxh3_list(payload, BLOCK_LEN))))
                reason = peer.expect_disconnect()
                self.assertIn("xxh3", reason)
                res = self.e.wait_jobs([job], timeout=10)[job]
                self.assertFalse(res["success"], dump(res))
                self.assertTrue(res.get("reason"), dump(res))
                self.assertNotIn("checksum mismatch", res["reason"])
                self.assertIn(reason[:120], self.v.log_text())
                self.e.client.finish(kv)
        self.e.poll_once(wait_ms=200)  # a second result would raise here
        self.assertEqual(counters(self.v).get("checksum_failures", 0), 0)
        self.assertTrue(self.v.running)

    def test_valid_and_wrong_checksums_on_one_session(self):
        """Feature on: a correct xxh3 array is accepted (load succeeds, bytes
        verify, status shows the feature on); a well-formed but wrong value
        for one block fails that load naming the checksum and the block,
        counted once, and the same session stays up: it answers a ping and
        serves the next load."""
        peer, kv, keys = self.fake_producer(["xxh3"])
        self.assertEqual(features_of(self.v, peer.peer_id), ["xxh3"])
        slots = [0, 1, 2, 3]
        job, fetch = self.load(peer, kv, keys, slots)
        payload = b"".join(block_content(k, BLOCK_LEN) for k in keys)
        sums = xxh3_list(payload, BLOCK_LEN)
        peer.send(*self.block_data(fetch, slots[:2], payload[:2 * BLOCK_LEN], sums[:2]))
        peer.send(*self.block_data(fetch, slots[2:], payload[2 * BLOCK_LEN:], sums[2:]))
        self.done(peer, fetch)
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertTrue(res["success"], dump(res))
        self.assertEqual(self.e.verify(keys, slots), [])
        self.e.client.finish(kv)

        kv2 = f"{kv}-wrong"
        keys2 = make_keys(kv2, 4)
        self.assertEqual(self.probe(peer, kv2, keys2, self.e.client.lookup(peer.peer_id, kv2, keys2, flush=True)),
                         ["hit"] * 4)
        slots2 = [8, 9, 10, 11]
        job, fetch = self.load(peer, kv2, keys2, slots2)
        payload = b"".join(block_content(k, BLOCK_LEN) for k in keys2)
        sums = xxh3_list(payload, BLOCK_LEN)
        sums[2] = format(int(sums[2], 16) ^ 1, "016x")  # well formed, wrong for block 10
        peer.send(*self.block_data(fetch, slots2, payload, sums))
        self.done(peer, fetch)
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertFalse(res["success"], dump(res))
        self.assertIn("checksum", res.get("reason", ""), dump(res))
        self.assertEqual(block_number(res["reason"]), 10, dump(res))
        self.e.client.finish(kv2)
        # Not a violation: the connection is up, the peer ready, and it serves another load.
        peer.send({"type": "ping", "nonce": "7" * 32})
        self.assertEqual(peer.recv_until("pong").header["nonce"], "7" * 32)
        self.assertEqual(peer_entry(self.v, peer.peer_id)["state"], "ready")
        self.assertEqual(counters(self.v).get("checksum_failures"), 1)
        self.assertEqual(metric_value(self.v, "kvpeer_peer_loads_total", peer=peer.peer_id, outcome="failed",
                                      reason="checksum"), 1)
        kv3 = f"{kv}-after"
        keys3 = make_keys(kv3, 4)
        self.assertEqual(self.probe(peer, kv3, keys3, self.e.client.lookup(peer.peer_id, kv3, keys3, flush=True)),
                         ["hit"] * 4)
        job, fetch = self.load(peer, kv3, keys3, slots2)
        payload = b"".join(block_content(k, BLOCK_LEN) for k in keys3)
        peer.send(*self.block_data(fetch, slots2, payload, xxh3_list(payload, BLOCK_LEN)))
        self.done(peer, fetch)
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertTrue(res["success"], dump(res))
        self.assertEqual(self.e.verify(keys3, slots2), [])
        self.assertEqual(metric_value(self.v, "kvpeer_peer_sessions_total", peer=peer.peer_id), 1)

    def test_feature_off_needs_no_xxh3(self):
        """The fake producer lists no features: the feature is off (status
        shows []), a block_data without xxh3 is accepted, and one with a
        junk xxh3 field too (ignored when off, wire spec section 7)."""
        peer, kv, keys = self.fake_producer([])
        self.assertEqual(features_of(self.v, peer.peer_id), [])
        slots = [0, 1, 2, 3]
        job, fetch = self.load(peer, kv, keys, slots)
        payload = b"".join(block_content(k, BLOCK_LEN) for k in keys)
        peer.send(*self.block_data(fetch, slots[:3], payload[:3 * BLOCK_LEN]))
        peer.send(*self.block_data(fetch, slots[3:], payload[3 * BLOCK_LEN:], xxh3=["NOT-A-CHECKSUM", 7]))
        self.done(peer, fetch)
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertTrue(res["success"], dump(res))
        self.assertEqual(self.e.verify(keys, slots), [])
        self.assertEqual(peer_entry(self.v, peer.peer_id)["state"], "ready")
        self.assertEqual(counters(self.v).get("checksum_failures", 0), 0)


# -- sealed publish and store ------------------------------------------------------------


if __name__ == "__main__":
    unittest.main()
