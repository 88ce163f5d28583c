"""Symmetric lookup + load between two real nodes, every byte verified.

Covers the main path: probe (lookup+flush until no retry), batched loads of
confirmed hits, results through poll, byte checks of every destination slot,
pins released after the rounds, both roles on one connection, and the
status/metrics counters that should reflect the traffic.

Sizes: KVPEER_IT_SMALL_BLOCKS x 64 KiB and KVPEER_IT_LARGE_BLOCKS x 1 MiB
(defaults 1024 and 1024).
"""

import os
import unittest

from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer.simulator import make_keys

SMALL_BLOCKS = int(os.environ.get("KVPEER_IT_SMALL_BLOCKS", "1024"))
LARGE_BLOCKS = int(os.environ.get("KVPEER_IT_LARGE_BLOCKS", "1024"))


class SymmetricTransferTest(DaemonTestCase):

    def transfer(self, block_len, count, batch):
        """Producer on node A holds key i at slot i; the consumer on node B
        fetches every key into the mirrored slot (count-1-i), so a block
        written to the wrong slot cannot pass verification."""
        a = self.start_daemon("a", block_len)
        b = self.start_daemon("b", block_len)
        producer = self.engine(a, count, block_len, name="producer", region="shm")
        consumer = self.engine(b, count, block_len, name="consumer", region="memfd")
        keys = make_keys(self.id(), count)
        self.assertEqual(producer.fill_and_publish(keys, range(count)), count)

        dest = [count - 1 - i for i in range(count)]
        report = consumer.fetch(a.listen, "sym-req", keys, dest, batch=batch, timeout=120)
        self.assertEqual(report.hits, count, f"misses: {report.misses}")
        self.assertEqual(report.jobs_failed, 0, f"reasons: {report.reasons}")
        self.assertEqual(report.bad_blocks, [], "blocks with wrong bytes")
        self.assertEqual(report.failed_requests, [])
        self.assertEqual(report.bytes_loaded, count * block_len)
        print(f"\n{count} x {block_len // 1024} KiB: {report.mb_per_s:.0f} MB/s "
              f"({report.seconds:.2f} s)")
        consumer.client.finish("sym-req")

        # Every round is over, so no slot may stay pinned for long.
        withdrawn = producer.client.unpublish(keys)
        self.assertEqual(sorted(withdrawn["released"] + withdrawn["pinned"]), list(range(count)))
        if withdrawn["pinned"]:
            producer.wait_released(withdrawn["pinned"], timeout=10)

        # Both nodes see one ready session with the traffic on it.
        sa, sb = a.status(), b.status()
        pa = [p for p in sa["peers"] if p["peer_id"] == b.node_id]
        pb = [p for p in sb["peers"] if p["peer_id"] == a.node_id]
        self.assertEqual(len(pa), 1, dump(sa["peers"]))
        self.assertEqual(len(pb), 1, dump(sb["peers"]))
        self.assertEqual(pb[0]["state"], "ready")
        self.assertGreaterEqual(pa[0]["bytes_sent"], count * block_len)
        self.assertGreaterEqual(pb[0]["bytes_received"], count * block_len)
        self.assertEqual(pb[0]["loads_in_flight"], 0)
        return a, b, producer, consumer

    def test_1024_blocks_of_64k(self):
        self.transfer(64 * 1024, SMALL_BLOCKS, batch=128)

    def test_blocks_of_1m(self):
        self.transfer(1024 * 1024, LARGE_BLOCKS, batch=64)

    def test_misses_and_partial_hits(self):
        """Unknown keys answer miss; a load names only the hits."""
        block_len = 64 * 1024
        a = self.start_daemon("a", block_len)
        b = self.start_daemon("b", block_len)
        producer = self.engine(a, 32, block_len, name="producer")
        consumer = self.engine(b, 64, block_len, name="consumer")
        keys = make_keys("partial", 32)
        producer.fill_and_publish(keys[:16], range(16))
        answers = consumer.probe(a.listen, "partial-req", keys)
        self.assertEqual(answers, ["hit"] * 16 + ["miss"] * 16)
        job = consumer.load(a.listen, "partial-req", keys[:16], range(16))
        self.assertTrue(consumer.wait_jobs([job])[job]["success"])
        self.assertEqual(consumer.verify(keys[:16], range(16)), [])
        consumer.client.finish("partial-req")

    def test_both_directions_on_one_session(self):
        """Each node is producer for one request and consumer for another,
        over the one connection between them."""
        block_len = 64 * 1024
        a = self.start_daemon("a", block_len)
        b = self.start_daemon("b", block_len)
        ea = self.engine(a, 256, block_len, name="engine-a")
        eb = self.engine(b, 256, block_len, name="engine-b")
        ka, kb = make_keys("from-a", 128), make_keys("from-b", 128)
        ea.fill_and_publish(ka, range(128))
        eb.fill_and_publish(kb, range(128))
        r1 = eb.fetch(a.listen, "a-to-b", ka, range(128, 256), batch=32)
        r2 = ea.fetch(b.listen, "b-to-a", kb, range(128, 256), batch=32)
        self.assertTrue(r1.ok, dump(r1.__dict__))
        self.assertTrue(r2.ok, dump(r2.__dict__))
        self.assertEqual([p["peer_id"] for p in a.status()["peers"]], [b.node_id])
        self.assertEqual([p["peer_id"] for p in b.status()["peers"]], [a.node_id])

    def test_republish_moves_key(self):
        """Re-publishing a key moves it: the consumer gets the bytes from the
        new slot (the old slot is overwritten with junk to prove it)."""
        block_len = 64 * 1024
        a = self.start_daemon("a", block_len)
        b = self.start_daemon("b", block_len)
        producer = self.engine(a, 8, block_len, name="producer")
        consumer = self.engine(b, 8, block_len, name="consumer")
        key = make_keys("moving", 1)
        producer.fill_and_publish(key, [0])
        producer.fill_and_publish(key, [5])
        producer.region.write_block(0, b"\xee" * block_len)
        report = consumer.fetch(a.listen, "move-req", key, [3])
        self.assertTrue(report.ok, dump(report.__dict__))


if __name__ == "__main__":
    unittest.main()
