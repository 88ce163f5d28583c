"""Disaggregated prefill: the prefiller stores, the decoder loads without
probing (a kv_request_id that never probed the peer is a PD load), in both
orders, and with supply arriving in pieces."""

import time
import unittest

from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer.simulator import make_keys

BLOCK_LEN = 256 * 1024
COUNT = 256


class DisaggregatedPrefillTest(DaemonTestCase):

    def setUp(self):
        super().setUp()
        self.a = self.start_daemon("prefill-node", BLOCK_LEN)
        self.b = self.start_daemon("decode-node", BLOCK_LEN)
        self.prefiller = self.engine(self.a, COUNT, BLOCK_LEN, name="prefiller", region="shm")
        self.decoder = self.engine(self.b, COUNT, BLOCK_LEN, name="decoder")

    def check_done(self, load_job, store_jobs, keys, dest):
        """Both sides get exactly one successful result; every byte landed."""
        load = self.decoder.wait_jobs([load_job], timeout=60)[load_job]
        self.assertTrue(load["success"], dump(load))
        self.assertEqual(self.decoder.verify(keys, dest), [])
        stores = self.prefiller.wait_jobs(store_jobs, timeout=60)
        for job, res in stores.items():
            self.assertTrue(res["success"], dump(res))
        # Exactly once: nothing more arrives for these jobs.
        self.decoder.poll_once(wait_ms=300)
        self.prefiller.poll_once(wait_ms=300)
        self.assertEqual(self.decoder.failed_requests, [])

    def test_store_then_fetch(self):
        keys = make_keys("pd-store-first", COUNT)
        store = self.prefiller.supply("pd-1", keys, range(COUNT))
        dest = list(reversed(range(COUNT)))
        load = self.decoder.load(self.a.listen, "pd-1", keys, dest)
        self.check_done(load, [store], keys, dest)

    def test_fetch_then_store(self):
        keys = make_keys("pd-fetch-first", COUNT)
        dest = list(range(COUNT))
        load = self.decoder.load(self.a.listen, "pd-2", keys, dest)
        # The demand waits for supply: no result yet.
        self.decoder.poll_once(wait_ms=500)
        self.assertNotIn(load, self.decoder.results, "a PD load must wait for the store, not fail")
        store = self.prefiller.supply("pd-2", keys, range(COUNT))
        self.check_done(load, [store], keys, dest)

    def test_supply_in_pieces(self):
        """Two store jobs meet one load's demand; both settle successfully."""
        keys = make_keys("pd-pieces", 64)
        dest = list(range(100, 164))
        s1 = self.prefiller.supply("pd-3", keys[:20], range(0, 20))
        load = self.decoder.load(self.a.listen, "pd-3", keys, dest)
        time.sleep(0.2)
        s2 = self.prefiller.supply("pd-3", keys[20:], range(20, 64))
        self.check_done(load, [s1, s2], keys, dest)

    def test_many_requests_in_parallel(self):
        """Sixteen PD requests, half stored before and half after their load."""
        jobs, stores, checks = [], [], []
        for n in range(16):
            keys = make_keys(f"pd-par-{n}", 16)
            src = range(n * 16, n * 16 + 16)
            dest = list(range(n * 16, n * 16 + 16))
            if n % 2 == 0:
                stores.append(self.prefiller.supply(f"pd-par-{n}", keys, src))
                jobs.append(self.decoder.load(self.a.listen, f"pd-par-{n}", keys, dest))
            else:
                jobs.append(self.decoder.load(self.a.listen, f"pd-par-{n}", keys, dest))
                stores.append(self.prefiller.supply(f"pd-par-{n}", keys, src))
            checks.append((keys, dest))
        results = self.decoder.wait_jobs(jobs, timeout=60)
        self.assertTrue(all(r["success"] for r in results.values()), dump(results))
        for keys, dest in checks:
            self.assertEqual(self.decoder.verify(keys, dest), [])
        stored = self.prefiller.wait_jobs(stores, timeout=60)
        self.assertTrue(all(r["success"] for r in stored.values()), dump(stored))


if __name__ == "__main__":
    unittest.main()
