"""Several engines per node: two producers publish on node A, two consumers
on node B fetch concurrently (each from both producers' keys, so one load is
served from two regions), and each node's status lists its engines."""

import os
import threading
import unittest

from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer.simulator import make_keys

BLOCK_LEN = 128 * 1024
PER_PRODUCER = 256


class MultiEngineTest(DaemonTestCase):

    def test_two_producers_two_consumers(self):
        a = self.start_daemon("a", BLOCK_LEN)
        b = self.start_daemon("b", BLOCK_LEN)
        p1 = self.engine(a, PER_PRODUCER, BLOCK_LEN, name="producer-1", region="shm")
        p2 = self.engine(a, PER_PRODUCER, BLOCK_LEN, name="producer-2", region="memfd")
        k1 = make_keys("multi-p1", PER_PRODUCER)
        k2 = make_keys("multi-p2", PER_PRODUCER)
        p1.fill_and_publish(k1, range(PER_PRODUCER))
        p2.fill_and_publish(k2, range(PER_PRODUCER))
        # Interleave the producers' keys so every batch spans both regions.
        keys = [k for pair in zip(k1, k2) for k in pair]
        n = len(keys)
        consumers = [self.engine(b, n, BLOCK_LEN, name=f"consumer-{i}") for i in range(2)]

        reports, errors = {}, []

        def run(i, c):
            try:
                # Consumer 1 takes the slots in reverse, to differ from consumer 0.
                dest = list(range(n)) if i == 0 else list(reversed(range(n)))
                reports[i] = c.fetch(a.listen, f"multi-req-{i}", keys, dest, batch=64, timeout=120)
            except Exception as e:  # surfaced in the main thread
                errors.append(e)

        threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(consumers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=180)
        self.assertEqual(errors, [])
        for i, r in reports.items():
            self.assertTrue(r.ok, f"consumer {i}: {dump(r.__dict__)}")

        engines_a = a.status()["engines"]
        engines_b = b.status()["engines"]
        self.assertEqual(sorted(e["client"] for e in engines_a), ["producer-1", "producer-2"], dump(engines_a))
        self.assertEqual(sorted(e["client"] for e in engines_b), ["consumer-0", "consumer-1"], dump(engines_b))
        self.assertEqual({e["client"]: e["published"] for e in engines_a},
                         {"producer-1": PER_PRODUCER, "producer-2": PER_PRODUCER})
        for e in engines_a + engines_b:
            self.assertEqual(e["pid"], os.getpid())
            self.assertEqual(e["loads_in_flight"], 0)

        # One producer leaving withdraws only its own keys.
        p1.close()
        self.wait_until(lambda: len(a.status()["engines"]) == 1, what="producer-1 gone from status")
        c = consumers[0]
        answers = c.probe(a.listen, "multi-after", [k1[0], k2[0]])
        self.assertEqual(answers, ["miss", "hit"])
        c.client.finish("multi-after")


if __name__ == "__main__":
    unittest.main()
