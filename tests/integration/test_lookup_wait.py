"""`lookup` with `wait_ms` (docs/control-api.md, "Engine operations"):
one call resolves a probe.

  * two real nodes: one lookup with wait_ms answers hit/miss in one call;
  * a peer that never answers lookups (a raw wire_peer.WirePeer): the call
    returns after about wait_ms with every key `retry`;
  * the peer dies during the wait (a paused kvpeerd killed, a WirePeer
    reset): the call returns promptly, long before wait_ms;
  * a peer answering one key per lookup_resp: each answer wakes the wait;
  * the daemon shuts down during the wait: the call returns promptly and
    the daemon exits;
  * bad wait_ms values answer bad_request naming wait_ms;
  * a request pipelined behind a waiting lookup on the same connection is
    answered after it, in order.
"""

import json
import threading
import time
import unittest

from kvpeer_testing.harness import DaemonTestCase
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, make_keys
from kvpeer_testing.wire_peer import WireListener

BLOCK_LEN = 64 * 1024


class LookupWaitTest(DaemonTestCase):

    def silent_peer(self, e, kv, keys):
        """A WirePeer that completes the handshake and then answers no
        lookup; the engine's first (plain) lookup makes the daemon dial it."""
        listener = WireListener()
        self.addCleanup(listener.close)
        self.assertEqual(e.client.lookup(listener.address, kv, keys), ["retry"] * len(keys))
        peer = listener.accept_peer(BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, timeout=5.0)
        self.addCleanup(peer.close)
        peer.handshake()
        return listener.address, peer

    def consumer_and_silent_peer(self, kv, count):
        """A consumer node and engine, `count` keys and a silent peer."""
        v = self.start_daemon("v", BLOCK_LEN)
        e = self.engine(v, 4, BLOCK_LEN, name="consumer")
        keys = make_keys(self.id(), count)
        address, peer = self.silent_peer(e, kv, keys)
        return v, e, keys, address, peer

    def waiting_lookup(self, e, address, peer, kv, keys, wait_ms):
        """A lookup with wait_ms in a thread, once its probe reached `peer`:
        (thread, box, the lookup frame)."""
        t, box = self.in_thread(lambda: e.client.lookup(address, kv, keys, wait_ms=wait_ms))
        return t, box, peer.recv_until({"lookup"}, timeout=5.0)

    def returned(self, t, box, what):
        """The thread's lookup has returned (within 10 s); its box."""
        t.join(10.0)
        self.assertFalse(t.is_alive(), f"the lookup still waits {what}")
        return box

    def in_thread(self, fn):
        """Runs fn in a thread; returns (thread, box) with box['value'],
        box['error'] and box['seconds'] once it has run."""
        box = {}

        def run():
            start = time.monotonic()
            try:
                box["value"] = fn()
            except Exception as error:  # reported by the test
                box["error"] = error
            box["seconds"] = time.monotonic() - start

        t = threading.Thread(target=run, daemon=True)
        t.start()
        return t, box

    def test_one_call_resolves_hits_and_misses(self):
        a = self.start_daemon("a", BLOCK_LEN)
        b = self.start_daemon("b", BLOCK_LEN)
        producer = self.engine(a, 8, BLOCK_LEN, name="producer")
        consumer = self.engine(b, 8, BLOCK_LEN, name="consumer")
        keys = make_keys(self.id(), 8)
        producer.fill_and_publish(keys[:5], range(5))
        start = time.monotonic()
        answers = consumer.client.lookup(a.listen, "one-call", keys, wait_ms=10000)
        self.assertEqual(answers, ["hit"] * 5 + ["miss"] * 3)
        self.assertLess(time.monotonic() - start, 5.0)
        # wait_ms 0 is the plain lookup: answers known already come back.
        self.assertEqual(consumer.client.lookup(a.listen, "one-call", keys, wait_ms=0),
                         ["hit"] * 5 + ["miss"] * 3)
        # The round is open: a load of the hits is accepted at once.
        job = consumer.load(a.listen, "one-call", keys[:5], range(5))
        result = consumer.wait_jobs([job], timeout=20)[job]
        self.assertTrue(result["success"], result)

    def test_silent_peer_returns_retry_after_wait_ms(self):
        _v, e, keys, address, peer = self.consumer_and_silent_peer("silent", 4)
        start = time.monotonic()
        answers = e.client.lookup(address, "silent", keys, wait_ms=600)
        seconds = time.monotonic() - start
        self.assertEqual(answers, ["retry"] * 4)
        self.assertGreaterEqual(seconds, 0.55)
        self.assertLess(seconds, 3.0)
        # The probe was sent at once (wait_ms implies flush).
        frame = peer.recv_until({"lookup"}, timeout=5.0)
        self.assertEqual(frame.header["kv_request_id"], "silent")

    def test_peer_reset_during_wait_returns_promptly(self):
        _v, e, keys, address, peer = self.consumer_and_silent_peer("reset", 4)
        t, box, _ = self.waiting_lookup(e, address, peer, "reset", keys, 20000)
        peer.close(rst=True)
        self.returned(t, box, "after the peer went")
        self.assertNotIn("error", box)
        self.assertLess(box["seconds"], 5.0)
        self.assertNotIn("hit", box["value"])

    def test_peer_killed_during_wait_returns_promptly(self):
        a = self.start_daemon("a", BLOCK_LEN)
        b = self.start_daemon("b", BLOCK_LEN)
        producer = self.engine(a, 4, BLOCK_LEN, name="producer")
        consumer = self.engine(b, 4, BLOCK_LEN, name="consumer")
        keys = make_keys(self.id(), 4)
        producer.fill_and_publish(keys, range(4))
        # A session first, then the producer's node stops answering.
        self.assertEqual(consumer.client.lookup(a.listen, "warm", keys, wait_ms=10000), ["hit"] * 4)
        a.pause()
        t, box = self.in_thread(lambda: consumer.client.lookup(a.listen, "killed", keys, wait_ms=20000))
        time.sleep(0.5)
        self.assertTrue(t.is_alive(), "the lookup did not wait for the paused peer")
        a.kill()
        self.returned(t, box, "after the peer died")
        self.assertNotIn("error", box)
        self.assertLess(box["seconds"], 8.0)
        self.assertNotIn("hit", box["value"])

    def test_split_answers_each_wake_the_wait(self):
        _v, e, keys, address, peer = self.consumer_and_silent_peer("split", 2)
        t, box, f = self.waiting_lookup(e, address, peer, "split", keys, 20000)
        for n, key in enumerate(f.header["keys"]):
            peer.send({"type": "lookup_resp", "kv_request_id": "split", "keys": [key], "hits": [n == 0],
                       "round_seq": f.header["round_seq"]})
            time.sleep(0.2)
            if n == 0:
                self.assertTrue(t.is_alive(), "the lookup returned with a key still unknown")
        self.returned(t, box, "after the second lookup_resp")
        self.assertNotIn("error", box)
        self.assertEqual(box["value"], ["hit", "miss"])
        self.assertLess(box["seconds"], 5.0)

    def test_shutdown_during_wait_returns_promptly(self):
        v, e, keys, address, peer = self.consumer_and_silent_peer("term", 2)
        t, box, _ = self.waiting_lookup(e, address, peer, "term", keys, 30000)
        start = time.monotonic()
        v.send_term()
        self.returned(t, box, "while the daemon shuts down")
        if "error" in box:
            self.assertEqual(getattr(box["error"], "code", None), "shutting_down", repr(box["error"]))
        else:
            self.assertNotIn("hit", box["value"])
        self.assertEqual(v.wait_exit(), 0)
        self.assertLess(time.monotonic() - start, 8.0)

    def test_bad_wait_ms_is_bad_request_naming_it(self):
        v = self.start_daemon("v", BLOCK_LEN)
        e = self.engine(v, 4, BLOCK_LEN, name="consumer")
        keys = make_keys(self.id(), 2)
        for bad in (-1, 60001, 1.5, "100", True, None, [1]):
            with self.subTest(wait_ms=bad):
                err = self.assertApiError("bad_request", e.client.request, "lookup", peer="127.0.0.1:1",
                                          kv_request_id="bad", keys=[k.hex() for k in keys], wait_ms=bad)
                self.assertIn("wait_ms", err.message)

    def test_pipelined_request_answered_after_the_wait(self):
        _v, e, keys, address, _peer = self.consumer_and_silent_peer("order", 2)
        c = e.client
        lookup = {"id": 9001, "op": "lookup", "peer": address, "kv_request_id": "order",
                  "keys": [k.hex() for k in keys], "wait_ms": 500}
        status = {"id": 9002, "op": "flush"}
        start = time.monotonic()
        c.send_line((json.dumps(lookup) + "\n" + json.dumps(status)).encode())
        first = c.read_response(timeout=10)
        second = c.read_response(timeout=10)
        self.assertEqual((first["id"], second["id"]), (9001, 9002))
        self.assertEqual(first["results"], ["retry"] * 2)
        self.assertTrue(second["ok"], second)
        self.assertGreaterEqual(time.monotonic() - start, 0.45)


if __name__ == "__main__":
    unittest.main()
