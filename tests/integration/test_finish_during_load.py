"""`finish` while a load is in flight: the load ends with a failure result,
exactly once, and its destination slots are never written afterwards."""

import unittest

from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer.simulator import make_keys

BLOCK_LEN = 64 * 1024


class FinishDuringLoadTest(DaemonTestCase):

    def setUp(self):
        super().setUp()
        self.a = self.start_daemon("a", BLOCK_LEN)
        self.b = self.start_daemon("b", BLOCK_LEN)
        self.producer = self.engine(self.a, 64, BLOCK_LEN, name="producer")
        self.consumer = self.engine(self.b, 64, BLOCK_LEN, name="consumer")

    def assert_fails_once(self, job):
        """One failure result, then silence."""
        res = self.consumer.wait_jobs([job], timeout=15)[job]
        self.assertFalse(res["success"], dump(res))
        self.consumer.poll_once(wait_ms=500)  # a second result would raise SimulatorError
        self.assertEqual(self.b.status()["engines"][0]["loads_in_flight"], 0)
        return res

    def assert_untouched(self, slots, seconds_ms=1000):
        """The slots stay zero: nothing writes after the result."""
        self.consumer.poll_once(wait_ms=seconds_ms)
        zero = bytes(BLOCK_LEN)
        self.assertEqual([s for s in slots if self.consumer.region.read_block(s) != zero], [])

    def test_finish_parked_pd_load(self):
        """A PD load waiting for supply that never comes."""
        keys = make_keys("never-stored", 8)
        job = self.consumer.load(self.a.listen, "fin-pd", keys, range(8))
        self.consumer.poll_once(wait_ms=300)
        self.assertNotIn(job, self.consumer.results)
        self.consumer.client.finish("fin-pd")
        self.assert_fails_once(job)
        # The prefiller's late store finds no demand; the decoder stays clean.
        self.producer.supply("fin-pd", keys, range(8))
        self.assert_untouched(range(8))

    def test_finish_with_stalled_producer(self):
        """Confirmed hits, producer frozen, load submitted, finish: the load
        fails at once; after the producer wakes up, its late blocks for the
        aborted round are discarded and the session keeps working."""
        keys = make_keys("stalled", 16)
        self.producer.fill_and_publish(keys, range(16))
        self.assertEqual(self.consumer.probe(self.a.listen, "fin-sym", keys), ["hit"] * 16)
        self.a.pause()
        try:
            job = self.consumer.load(self.a.listen, "fin-sym", keys, range(16))
            self.consumer.client.finish("fin-sym")
            self.assert_fails_once(job)
        finally:
            self.a.resume()
        self.assert_untouched(range(16), seconds_ms=1500)
        # The pins of the aborted round are released on the producer.
        withdrawn = self.producer.client.unpublish(keys)
        if withdrawn["pinned"]:
            self.producer.wait_released(withdrawn["pinned"], timeout=15)
        # And the session still carries new work.
        keys2 = make_keys("after-finish", 16)
        self.producer.fill_and_publish(keys2, range(16, 32))
        report = self.consumer.fetch(self.a.listen, "fin-after", keys2, range(32, 48))
        self.assertTrue(report.ok, dump(report.__dict__))

    def test_finish_racing_a_big_load(self):
        """Finish right after submitting a large load: whichever wins, the
        load has exactly one result, and slots are quiet after a failure."""
        keys = make_keys("race", 64)
        self.producer.fill_and_publish(keys, range(64))
        self.assertEqual(self.consumer.probe(self.a.listen, "fin-race", keys), ["hit"] * 64)
        job = self.consumer.load(self.a.listen, "fin-race", keys, range(64))
        self.consumer.client.finish("fin-race")
        res = self.consumer.wait_jobs([job], timeout=15)[job]
        self.consumer.poll_once(wait_ms=300)
        if res["success"]:
            self.assertEqual(self.consumer.verify(keys, range(64)), [])
        else:
            self.consumer.region.clear()
            self.assert_untouched(range(64))


if __name__ == "__main__":
    unittest.main()
