"""A finish belongs to the engine that says it: two engines of one node may
use the same kv_request_id towards different peers (control-api.md section 1
only forbids the same peer), and one engine's finish, or its crash, must not
end the other engine's load."""

import unittest

from kvpeer_testing.harness import DaemonTestCase
from kvpeer.simulator import make_keys

BLOCK_LEN = 4096


class FinishScopeTest(DaemonTestCase):

    def test_finish_of_one_engine_leaves_the_other_engines_load(self):
        producer_a = self.start_daemon("a", BLOCK_LEN)
        producer_b = self.start_daemon("b", BLOCK_LEN)
        consumer = self.start_daemon("c", BLOCK_LEN)
        e1 = self.engine(consumer, 8, BLOCK_LEN, name="engine-1")
        e2 = self.engine(consumer, 8, BLOCK_LEN, name="engine-2")
        keys = make_keys("finish-scope", 2)
        # Disaggregated-prefill loads: they wait for supply that never comes,
        # so both stay in flight until finished.
        e1.client.load(1, producer_a.listen, "shared-id", keys, [0, 1])
        e2.client.load(1, producer_b.listen, "shared-id", keys, [0, 1])
        self.wait_until(lambda: sum(e["loads_in_flight"] for e in consumer.status()["engines"]) == 2,
                        what="both loads in flight")

        e2.client.finish("shared-id")
        r2 = e2.client.poll(wait_ms=5000)
        self.assertEqual([(r["job_id"], r["success"]) for r in r2["results"]], [(1, False)])
        # engine-1's load is still in flight: nothing for it, and status says so.
        self.assertEqual(e1.client.poll(wait_ms=300)["results"], [])
        loads = {e["client"]: e["loads_in_flight"] for e in consumer.status()["engines"]}
        self.assertEqual(loads, {"engine-1": 1, "engine-2": 0})

        # An engine that goes away finishes only its own half too.
        e3 = self.engine(consumer, 8, BLOCK_LEN, name="engine-3")
        e3.client.load(7, producer_b.listen, "shared-id", keys, [2, 3])
        e3.close()
        self.wait_until(lambda: len(consumer.status()["engines"]) == 2, what="engine-3 gone")
        self.assertEqual(e1.client.poll(wait_ms=300)["results"], [])

        e1.client.finish("shared-id")
        r1 = e1.client.poll(wait_ms=5000)
        self.assertEqual([(r["job_id"], r["success"]) for r in r1["results"]], [(1, False)])


if __name__ == "__main__":
    unittest.main()
