"""Sealed blocks served without pins (docs/vllm.md, "Serving without pins";
issue 24, item 1), against real daemons.

vLLM's tier no longer holds vLLM's store job (and so vLLM's pin) while a
block is published: vLLM may evict a published block and reuse its slot at
any time without telling the daemon first. What keeps a peer from getting
other bytes under the old key is the seal:

  ReusedSlotTest    a producer engine publishes 8 blocks sealed and then
                    overwrites one slot (vLLM reusing it). A consumer whose
                    daemon has no xxh3 feature (so it cannot check bytes
                    itself) loads all 8: the load fails (the producer hashed
                    the block again after sending it and answered
                    transfer_done false), never succeeds with the new bytes;
                    the stale key is withdrawn (it misses from then on,
                    seals_broken 1), the other 7 still load byte for byte.
                    The same with the xxh3 feature on: the load fails and the
                    key is withdrawn.
  ResealTest        the engine publishes another key sealed at the reused
                    slot: the old key misses at once (a reseal whose bytes
                    changed withdraws the slot's older keys), the new key
                    loads the new bytes, and the engine hears of no released
                    slot.

Run against 821bed2 (before): ReusedSlotTest failed, the consumer without
xxh3 got the reused bytes as a successful load ({"success": true}); ResealTest
failed, the old key still hit.
  IdleEngineTest    a producer engine publishes sealed and then makes no
                    call at all; a peer's lookups and loads are answered by
                    the daemon alone, bytes checked.
"""

import unittest

from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer.simulator import block_content, make_keys

BLOCK_LEN = 64 * 1024
NO_FEATURES = ["--features", ""]


def counters(daemon):
    return daemon.status()["counters"]


class UnpinnedBase(DaemonTestCase):
    consumer_extra = ()

    def setUp(self):
        super().setUp()
        self.a = self.start_daemon("producer-node", BLOCK_LEN)
        self.b = self.start_daemon("consumer-node", BLOCK_LEN, extra=list(self.consumer_extra))
        self.producer = self.engine(self.a, 64, BLOCK_LEN, name="producer")
        self.consumer = self.engine(self.b, 64, BLOCK_LEN, name="consumer")

    def load(self, kv, keys, dest):
        answers = self.consumer.probe(self.a.listen, kv, keys)
        if answers != ["hit"] * len(keys):
            self.consumer.client.finish(kv)
            return answers, None
        job = self.consumer.load(self.a.listen, kv, keys, dest)
        res = self.consumer.wait_jobs([job], timeout=40)[job]
        self.consumer.client.finish(kv)
        return answers, res

    def reuse_slot_and_load(self):
        keys = make_keys("published", 8)
        self.producer.fill_and_publish(keys, range(8), seal=True)
        self.producer.region.write_block(3, block_content(b"vllm-reused-this-slot", BLOCK_LEN))
        dest = list(range(20, 28))
        _, res = self.load("first", keys, dest)
        self.assertIsNotNone(res)
        self.assertFalse(res["success"], dump(res))
        # The stale key is gone; the others are served as before.
        self.wait_until(lambda: counters(self.a).get("seals_broken") == 1, what="seal counted broken")
        self.assertEqual(self.consumer.probe(self.a.listen, "after", keys), ["hit"] * 3 + ["miss"] + ["hit"] * 4)
        self.consumer.client.finish("after")
        others, odest = keys[:3] + keys[4:], dest[:3] + dest[4:]
        _, res = self.load("others", others, odest)
        self.assertTrue(res["success"], dump(res))
        self.assertEqual(self.consumer.verify(others, odest), [])
        self.assertEqual(self.a.status()["engines"][0]["published"], 7)
        return res


class ReusedSlotTest(UnpinnedBase):
    consumer_extra = NO_FEATURES

    def test_consumer_without_xxh3_never_gets_the_reused_bytes(self):
        self.reuse_slot_and_load()
        self.assertEqual(counters(self.b).get("checksum_failures"), 0)  # it could not have checked


class ReusedSlotXxh3Test(UnpinnedBase):
    def test_consumer_with_xxh3_fails_and_the_key_is_withdrawn(self):
        self.reuse_slot_and_load()


class ResealTest(UnpinnedBase):
    def test_a_reseal_of_a_changed_slot_withdraws_its_old_key(self):
        old = make_keys("old", 1)
        self.producer.fill_and_publish(old, [5], seal=True)
        new = make_keys("new", 1)
        self.producer.fill(new, [5])  # vLLM evicted `old` and stored `new` in its slot
        self.assertEqual(self.producer.client.publish(new, [5], seal=True), 1)
        self.assertEqual(self.consumer.probe(self.a.listen, "old", old), ["miss"])
        self.consumer.client.finish("old")
        _, res = self.load("new", new, [9])
        self.assertTrue(res["success"], dump(res))
        self.assertEqual(self.consumer.verify(new, [9]), [])
        self.assertEqual(self.producer.client.poll()["released"], [])
        self.assertEqual(self.a.status()["engines"][0]["published"], 1)


class IdleEngineTest(UnpinnedBase):
    def test_peers_are_served_while_the_engine_makes_no_call(self):
        keys = make_keys("idle", 16)
        self.producer.fill_and_publish(keys, range(16), seal=True)
        # From here the producer engine says nothing: the daemon serves alone.
        for round_ in range(3):
            dest = list(range(32, 48))
            answers, res = self.load(f"idle-{round_}", keys, dest)
            self.assertEqual(answers, ["hit"] * 16)
            self.assertTrue(res["success"], dump(res))
            self.assertEqual(self.consumer.verify(keys, dest), [])


if __name__ == "__main__":
    unittest.main()
