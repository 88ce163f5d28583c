"""Client-role load timeout against a stalled peer: the producer daemon is
frozen with SIGSTOP, the consumer daemon runs with --load-timeout-s 1; the
load must end failed about a second later, not hang, and the session must
recover once the producer runs again."""

import time
import unittest

from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer.simulator import make_keys

BLOCK_LEN = 64 * 1024


class LoadTimeoutTest(DaemonTestCase):

    def setUp(self):
        super().setUp()
        self.a = self.start_daemon("producer-node", BLOCK_LEN)
        self.b = self.start_daemon("consumer-node", BLOCK_LEN, extra=["--load-timeout-s", "1"])
        self.producer = self.engine(self.a, 64, BLOCK_LEN, name="producer")
        self.consumer = self.engine(self.b, 64, BLOCK_LEN, name="consumer")

    def test_stalled_peer(self):
        keys = make_keys("timeout", 16)
        self.producer.fill_and_publish(keys, range(16))
        self.assertEqual(self.consumer.probe(self.a.listen, "to-1", keys), ["hit"] * 16)
        self.a.pause()
        try:
            started = time.monotonic()
            job = self.consumer.load(self.a.listen, "to-1", keys, range(16))
            res = self.consumer.wait_jobs([job], timeout=10)[job]
            elapsed = time.monotonic() - started
        finally:
            self.a.resume()
        self.assertFalse(res["success"], dump(res))
        self.assertGreaterEqual(elapsed, 0.8, "failed before the load timeout")
        self.assertLess(elapsed, 6.0, "the 1 s load timeout took far too long")
        # Late blocks of the aborted round must not land in the slots.
        self.consumer.poll_once(wait_ms=1500)
        zero = bytes(BLOCK_LEN)
        self.assertEqual([s for s in range(16) if self.consumer.region.read_block(s) != zero], [])
        self.consumer.client.finish("to-1")
        # The peer was only slow: a new request works on the same session.
        report = self.consumer.fetch(self.a.listen, "to-2", keys, range(16, 32))
        self.assertTrue(report.ok, dump(report.__dict__))

    def test_pd_load_without_supply(self):
        """A PD load whose supply never comes times out the same way."""
        keys = make_keys("never-stored", 4)
        started = time.monotonic()
        job = self.consumer.load(self.a.listen, "to-pd", keys, range(4))
        res = self.consumer.wait_jobs([job], timeout=10)[job]
        self.assertFalse(res["success"], dump(res))
        self.assertLess(time.monotonic() - started, 6.0)


if __name__ == "__main__":
    unittest.main()
