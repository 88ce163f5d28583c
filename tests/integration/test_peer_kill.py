"""A producer daemon killed with SIGKILL mid-transfer: every load on the
consumer ends (failed if its blocks had not all arrived), nothing hangs,
poll reports the requests in failed_requests, and the consumer node keeps
serving its engines and other peers."""

import time
import unittest

from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer import KvpeerError
from kvpeer.simulator import make_keys

BLOCK_LEN = 1024 * 1024
COUNT = 256


class PeerKillTest(DaemonTestCase):

    def setUp(self):
        super().setUp()
        self.a = self.start_daemon("victim", BLOCK_LEN)
        self.b = self.start_daemon("survivor", BLOCK_LEN)
        self.producer = self.engine(self.a, COUNT, BLOCK_LEN, name="producer")
        self.consumer = self.engine(self.b, COUNT, BLOCK_LEN, name="consumer")
        self.keys = make_keys("peer-kill", COUNT)
        self.producer.fill_and_publish(self.keys, range(COUNT))

    def submit(self, requests, freeze=False):
        """Probes `requests` kv ids of COUNT/requests keys each (all hits),
        then (after freezing the producer, with `freeze`) loads them all."""
        per = COUNT // requests
        batches = []
        for r in range(requests):
            kv = f"kill-{r}"
            ks, slots = self.keys[r * per:(r + 1) * per], range(r * per, (r + 1) * per)
            self.assertEqual(self.consumer.probe(self.a.listen, kv, ks), ["hit"] * per)
            batches.append((kv, ks, slots))
        if freeze:
            self.a.pause()
        return {self.consumer.load(self.a.listen, kv, ks, slots): kv for kv, ks, slots in batches}

    def check_survivor(self):
        """The consumer node still works: status answers, the dead peer
        carries no loads, and a fresh node can be fetched from."""
        peers = self.b.status()["peers"]
        dead = [p for p in peers if p["peer_id"] == self.a.node_id]
        for p in dead:
            self.assertNotEqual(p["state"], "ready", dump(p))
            self.assertEqual(p["loads_in_flight"], 0, dump(p))
        c = self.start_daemon("replacement", BLOCK_LEN)
        producer2 = self.engine(c, 16, BLOCK_LEN, name="producer-2")
        keys2 = make_keys("after-kill", 16)
        producer2.fill_and_publish(keys2, range(16))
        report = self.consumer.fetch(c.listen, "after-kill", keys2, range(16))
        self.assertTrue(report.ok, dump(report.__dict__))

    def test_kill_with_loads_outstanding(self):
        """Producer frozen before the loads go out, then killed: no block
        can have arrived, so every load must fail."""
        jobs = self.submit(8, freeze=True)
        self.a.kill()
        started = time.monotonic()
        results = self.consumer.wait_jobs(list(jobs), timeout=15)
        self.assertLess(time.monotonic() - started, 12.0)
        self.assertEqual([j for j, r in results.items() if r["success"]], [], dump(results))

        def all_reported():
            self.consumer.poll_once(0)
            return set(jobs.values()) <= set(self.consumer.failed_requests)
        self.wait_until(all_reported, timeout=5, what="all requests in failed_requests")
        self.check_survivor()

    def test_kill_while_blocks_flow(self):
        """Killed while data is moving: each load ends exactly once; any
        load reported successful has correct bytes; failures are reported
        as failed requests."""
        jobs = self.submit(8)
        time.sleep(0.05)
        self.a.kill()
        results = self.consumer.wait_jobs(list(jobs), timeout=15)
        per = COUNT // 8
        failed = set()
        for job, res in results.items():
            kv = jobs[job]
            r = int(kv.split("-")[1])
            if res["success"]:
                self.assertEqual(self.consumer.verify(self.keys[r * per:(r + 1) * per],
                                                      range(r * per, (r + 1) * per)), [])
            else:
                failed.add(kv)
        self.consumer.poll_once(wait_ms=500)
        self.assertLessEqual(failed, set(self.consumer.failed_requests))
        self.check_survivor()

    def test_new_work_to_dead_peer_fails_fast(self):
        """After the peer died, a new load to it ends failed (at once with
        peer_unavailable, or through poll) instead of waiting."""
        self.a.kill()
        keys = make_keys("to-the-dead", 4)
        started = time.monotonic()
        try:
            job = self.consumer.load(self.a.listen, "dead-pd", keys, range(4))
            res = self.consumer.wait_jobs([job], timeout=20)[job]
            self.assertFalse(res["success"])
        except KvpeerError as e:
            self.assertEqual(e.code, "peer_unavailable")
        # Handshake timeout (10 s default) plus one second is the bound.
        self.assertLess(time.monotonic() - started, 12.0)


if __name__ == "__main__":
    unittest.main()
