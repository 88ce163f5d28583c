"""Sealed publish and store (control-api.md `publish`/`store` `seal`), against
real daemons:

  SealTest              a block published or stored sealed and then
                        overwritten by its engine fails the consumer's load
                        with checksum; unsealed, the load succeeds with the
                        new bytes.
"""

import unittest

from kvpeer_testing.fault_tools import metric_value, peer_entry
from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer.simulator import block_content, make_keys
from fault_case import BLOCK_LEN, LOAD_TIMEOUT_S
from checksum_tools import block_number, counters


class SealTest(DaemonTestCase):
    """The engine changes a slot after publishing (or storing) it. Sealed,
    the producer serves the checksum taken at publish time, so the
    consumer's load of that slot fails with checksum; unsealed, the slot is
    served as it is now and the load succeeds with the new bytes."""

    def setUp(self):
        super().setUp()
        self.a = self.start_daemon("producer-node", BLOCK_LEN)
        self.b = self.start_daemon("consumer-node", BLOCK_LEN)
        self.producer = self.engine(self.a, 64, BLOCK_LEN, name="producer")
        self.consumer = self.engine(self.b, 64, BLOCK_LEN, name="consumer")

    def load_sym(self, kv, keys, dest):
        self.assertEqual(self.consumer.probe(self.a.listen, kv, keys), ["hit"] * len(keys))
        job = self.consumer.load(self.a.listen, kv, keys, dest)
        res = self.consumer.wait_jobs([job], timeout=LOAD_TIMEOUT_S + 20)[job]
        self.consumer.client.finish(kv)
        return res

    def test_sealed_publish_then_overwrite(self):
        """Sealed: the overwritten slot's load fails naming the checksum and
        its block; the other sealed blocks load fine; re-publishing the key
        sealed takes a new checksum and the load then gets the new bytes.
        Unsealed: the overwritten slot loads, and the consumer gets the new
        bytes."""
        keys = make_keys("sealed", 8)
        self.producer.fill_and_publish(keys, range(8), seal=True)
        new = block_content(b"overwritten-after-sealing", BLOCK_LEN)
        self.producer.region.write_block(3, new)
        dest = list(range(20, 28))
        res = self.load_sym("sealed-1", keys, dest)
        self.assertFalse(res["success"], dump(res))
        self.assertIn("checksum", res.get("reason", ""), dump(res))
        self.assertEqual(block_number(res["reason"]), dest[3], dump(res))
        self.assertEqual(counters(self.b).get("checksum_failures"), 1)
        self.assertEqual(peer_entry(self.b, self.a.listen)["state"], "ready")

        others = keys[:3] + keys[4:]
        odest = dest[:3] + dest[4:]
        res = self.load_sym("sealed-2", others, odest)
        self.assertTrue(res["success"], dump(res))
        self.assertEqual(self.consumer.verify(others, odest), [])

        self.producer.client.publish([keys[3]], [3], seal=True)  # sealed anew: the checksum of the new bytes
        res = self.load_sym("sealed-3", [keys[3]], [30])
        self.assertTrue(res["success"], dump(res))
        self.assertEqual(self.consumer.region.read_block(30), new)

        ukeys = make_keys("unsealed", 8)
        self.producer.fill_and_publish(ukeys, range(8, 16), seal=False)
        unew = block_content(b"overwritten-unsealed", BLOCK_LEN)
        self.producer.region.write_block(11, unew)
        udest = list(range(40, 48))
        res = self.load_sym("unsealed-1", ukeys, udest)
        self.assertTrue(res["success"], dump(res))
        self.assertEqual(self.consumer.region.read_block(udest[3]), unew)
        self.assertEqual(self.consumer.verify(ukeys[:3] + ukeys[4:], udest[:3] + udest[4:]), [])
        self.assertEqual(counters(self.b).get("checksum_failures"), 1)
        self.assertEqual(metric_value(self.b, "kvpeer_peer_sessions_total", peer=self.a.listen), 1)

    def test_sealed_store_then_overwrite(self):
        """Disaggregated prefill: the prefiller stores sealed, then changes a
        stored slot; the decoder's load (no probe) fails naming the checksum;
        both jobs get exactly one result. The same unsealed: the decoder
        gets the new bytes."""
        keys = make_keys("sealed-store", 6)
        store = self.producer.supply("pd-sealed", keys, range(6), seal=True)
        new = block_content(b"store-overwritten", BLOCK_LEN)
        self.producer.region.write_block(4, new)
        dest = list(range(10, 16))
        load = self.consumer.load(self.a.listen, "pd-sealed", keys, dest)
        res = self.consumer.wait_jobs([load], timeout=LOAD_TIMEOUT_S + 20)[load]
        self.assertFalse(res["success"], dump(res))
        self.assertIn("checksum", res.get("reason", ""), dump(res))
        self.assertEqual(block_number(res["reason"]), dest[4], dump(res))
        self.producer.wait_jobs([store], timeout=30)
        self.assertEqual(counters(self.b).get("checksum_failures"), 1)

        ukeys = make_keys("unsealed-store", 6)
        store = self.producer.supply("pd-unsealed", ukeys, range(6, 12))
        unew = block_content(b"unsealed-store-overwritten", BLOCK_LEN)
        self.producer.region.write_block(10, unew)
        udest = list(range(20, 26))
        load = self.consumer.load(self.a.listen, "pd-unsealed", ukeys, udest)
        res = self.consumer.wait_jobs([load], timeout=LOAD_TIMEOUT_S + 20)[load]
        self.assertTrue(res["success"], dump(res))
        self.assertEqual(self.consumer.region.read_block(udest[4]), unew)
        self.assertEqual(self.consumer.verify(ukeys[:4] + ukeys[5:], udest[:4] + udest[5:]), [])
        self.assertTrue(self.producer.wait_jobs([store], timeout=30)[store]["success"])
        self.consumer.poll_once(wait_ms=200)
        self.producer.poll_once(wait_ms=200)  # a second result would raise here
        self.assertEqual(counters(self.b).get("checksum_failures"), 1)


if __name__ == "__main__":
    unittest.main()
