"""Forged block_data from a fake producer, each kind tried against a real
consumer daemon: an unknown round, an index not requested, a duplicate
index, a wrong length, data after the result or for an aborted round, a
transfer_done with blocks missing.

For every case the test checks that the daemon answers cleanly and disturbs
nothing else (bad_input_case.BadInputBase). The raw peer is
kvpeer_testing.wire_peer (written from the wire spec, not from the daemon's
code).
"""

import unittest

from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, block_content, make_keys
from kvpeer_testing.wire_peer import WireListener
from bad_input_case import BLOCK_LEN, NUM_BLOCKS, SENTINEL


class ForgedBlockDataTest(DaemonTestCase):
    """A consumer engine on V loads from a fake producer (our listener);
    the fake answers the fetch with forged block_data. Each forgery must
    close the session with a reason, fail the load (exactly one result, with
    a reason), report the request failed, and leave every slot the forgery
    aimed at untouched."""

    def setUp(self):
        super().setUp()
        self.v = self.start_daemon("victim", BLOCK_LEN)
        self.h = self.start_daemon("neighbour", BLOCK_LEN)
        self.e = self.engine(self.v, NUM_BLOCKS, BLOCK_LEN, name="consumer")
        self.listener = WireListener()
        self.addCleanup(self.listener.close)
        self.n = 0

    def sentinel_slots(self):
        for s in range(NUM_BLOCKS):
            self.e.region.write_block(s, SENTINEL)

    def untouched(self, except_slots=()):
        return [s for s in range(NUM_BLOCKS)
                if s not in except_slots and self.e.region.read_block(s) != SENTINEL]

    def start_load(self, count=4, base=8):
        """A PD load of `count` keys into slots base.. from the fake; returns
        (job, keys, slots, fake peer, fetch header)."""
        self.n += 1
        kv = f"forged-{self.n}"
        keys = make_keys(kv, count)
        slots = list(range(base, base + count))
        self.sentinel_slots()
        job = self.e.load(self.listener.address, kv, keys, slots)
        peer = self.listener.accept_peer(BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, timeout=5.0)
        self.addCleanup(peer.close)
        peer.handshake()
        fetch = peer.recv_until("fetch").header
        self.assertEqual(fetch["kv_request_id"], kv)
        self.assertEqual(fetch["keys"], [k.hex() for k in keys])
        self.assertEqual(fetch["block_indexes"], slots)
        return job, keys, slots, peer, fetch

    def block_data(self, fetch, indexes, payload=None, **over):
        h = {"type": "block_data", "kv_request_id": fetch["kv_request_id"], "round_seq": fetch["round_seq"],
             "block_indexes": list(indexes)}
        h.update(over)
        if payload is None:
            payload = b"\xee" * (BLOCK_LEN * len(indexes))
        return h, payload

    def expect_failed(self, job, peer, needles, fetch):
        reason = peer.expect_disconnect()
        for n in needles:
            self.assertIn(n, reason)
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertFalse(res["success"], dump(res))
        self.assertTrue(res.get("reason"), f"a failure must carry a reason: {dump(res)}")
        self.e.poll_once(wait_ms=200)
        self.assertIn(fetch["kv_request_id"], self.e.failed_requests)
        self.wait_until(lambda: all(p["loads_in_flight"] == 0 for p in self.v.status()["peers"]),
                        what="no loads in flight", timeout=5)
        self.assertTrue(self.v.running)
        logged = self.v.log_text()
        self.assertIn(reason[:120], logged)
        return reason

    def test_forgeries(self):
        cases = [
            ("unknown round", lambda f: [self.block_data(f, [f["block_indexes"][0]],
                                                         round_seq=f["round_seq"] + 1000)],
             ["no load of this round"], ()),
            ("unknown kv_request_id", lambda f: [self.block_data(f, [f["block_indexes"][0]],
                                                                 kv_request_id="someone-else")],
             ["no load"], ()),
            ("index not requested", lambda f: [self.block_data(f, [f["block_indexes"][0] + 20])],
             ["not requested"], ()),
            ("one good index, one not requested", lambda f: [self.block_data(f, [f["block_indexes"][0], 0])],
             ["not requested"], ()),
            ("duplicate index in a frame", lambda f: [self.block_data(f, [f["block_indexes"][1]] * 2)],
             ["twice"], ()),
            ("payload one byte short", lambda f: [self.block_data(f, [f["block_indexes"][0]],
                                                                  payload=b"\xee" * (BLOCK_LEN - 1))],
             ["payload_len"], ()),
            ("payload one byte long", lambda f: [self.block_data(f, [f["block_indexes"][0]],
                                                                 payload=b"\xee" * (BLOCK_LEN + 1))],
             ["payload_len"], ()),
            ("payload of one block for two indexes", lambda f: [self.block_data(f, f["block_indexes"][:2],
                                                                                payload=b"\xee" * BLOCK_LEN)],
             ["payload_len"], ()),
            ("empty block_indexes", lambda f: [self.block_data(f, [], payload=b"")], ["block"], ()),
        ]
        for name, frames, needles, _ in cases:
            with self.subTest(name):
                job, keys, slots, peer, fetch = self.start_load()
                for header, payload in frames(fetch):
                    peer.send(header, payload)
                self.expect_failed(job, peer, needles, fetch)
                self.assertEqual(self.untouched(), [], f"{name}: a forged frame wrote into a slot")
        self.check_neighbours()

    def test_duplicate_index_across_frames(self):
        """A correct block, then the same index again: the second is a
        violation; only the correct bytes are in that slot."""
        job, keys, slots, peer, fetch = self.start_load()
        good = block_content(keys[0], BLOCK_LEN)
        peer.send(*self.block_data(fetch, [slots[0]], payload=good))
        peer.send(*self.block_data(fetch, [slots[0]]))
        self.expect_failed(job, peer, ["already received"], fetch)
        self.assertEqual(self.untouched(except_slots=[slots[0]]), [])
        self.assertEqual(self.e.region.read_block(slots[0]), good)
        self.check_neighbours()

    def test_block_data_after_the_result(self):
        """A complete, correct transfer; then more block_data for the
        finished round: a violation, and the delivered bytes stay."""
        job, keys, slots, peer, fetch = self.start_load()
        for k, s in zip(keys, slots):
            peer.send(*self.block_data(fetch, [s], payload=block_content(k, BLOCK_LEN)))
        peer.send({"type": "transfer_done", "kv_request_id": fetch["kv_request_id"], "success": True,
                   "round_seq": fetch["round_seq"]})
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertTrue(res["success"], dump(res))
        self.assertEqual(self.e.verify(keys, slots), [])
        peer.send(*self.block_data(fetch, [slots[1]]))
        reason = peer.expect_disconnect()
        self.assertIn("no load of this round", reason)
        self.assertEqual(self.e.verify(keys, slots), [], "a late frame overwrote a delivered slot")
        self.e.poll_once(wait_ms=300)  # a second result would raise here
        self.check_neighbours()

    def test_transfer_done_with_blocks_missing(self):
        """transfer_done{success:true} before every block arrived: the load
        fails (never reported successful with holes)."""
        job, keys, slots, peer, fetch = self.start_load()
        peer.send(*self.block_data(fetch, [slots[0]], payload=block_content(keys[0], BLOCK_LEN)))
        peer.send({"type": "transfer_done", "kv_request_id": fetch["kv_request_id"], "success": True,
                   "round_seq": fetch["round_seq"]})
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertFalse(res["success"], dump(res))
        self.assertTrue(res.get("reason"), dump(res))
        self.check_neighbours()

    def test_transfer_done_failure(self):
        job, keys, slots, peer, fetch = self.start_load()
        peer.send({"type": "transfer_done", "kv_request_id": fetch["kv_request_id"], "success": False,
                   "round_seq": fetch["round_seq"]})
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertFalse(res["success"], dump(res))
        self.assertTrue(res.get("reason"), dump(res))
        self.assertEqual(self.untouched(), [])

    def test_block_data_for_an_aborted_round(self):
        """finish while the fake holds the fetch: abort_fetch goes out and the
        load fails at once; block_data sent before our abort_ack is
        discarded silently; after abort_ack it is a violation. No slot is
        written either way."""
        job, keys, slots, peer, fetch = self.start_load()
        self.e.client.finish(fetch["kv_request_id"])
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertFalse(res["success"], dump(res))
        abort = peer.recv_until("abort_fetch").header
        self.assertEqual(abort["round_seq"], fetch["round_seq"])
        peer.send(*self.block_data(fetch, [slots[0]]))  # in flight before we saw the abort: discarded
        peer.send({"type": "abort_ack", "kv_request_id": fetch["kv_request_id"], "round_seq": fetch["round_seq"]})
        peer.send({"type": "ping", "nonce": "6" * 32})
        self.assertEqual(peer.recv_until("pong").header["nonce"], "6" * 32)  # still connected
        self.assertEqual(self.untouched(), [])
        peer.send(*self.block_data(fetch, [slots[1]]))
        self.assertIn("no load of this round", peer.expect_disconnect())
        self.assertEqual(self.untouched(), [])
        self.check_neighbours()

    def test_valid_fake_producer(self):
        """The fake is a correct producer when it wants to be (so the
        forgeries above fail for their own reason)."""
        job, keys, slots, peer, fetch = self.start_load(count=6)
        payload = b"".join(block_content(k, BLOCK_LEN) for k in keys[:3])
        peer.send(*self.block_data(fetch, slots[:3], payload=payload))
        payload = b"".join(block_content(k, BLOCK_LEN) for k in reversed(keys[3:]))
        peer.send(*self.block_data(fetch, list(reversed(slots[3:])), payload=payload))
        peer.send({"type": "transfer_done", "kv_request_id": fetch["kv_request_id"], "success": True,
                   "round_seq": fetch["round_seq"]})
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertTrue(res["success"], dump(res))
        self.assertEqual(self.e.verify(keys, slots), [])
        self.assertEqual(self.untouched(except_slots=slots), [])

    def check_neighbours(self):
        """The victim still works with a real peer, both ways."""
        ph = self.engine(self.h, NUM_BLOCKS, BLOCK_LEN, name=f"producer-{self.n}")
        keys = make_keys(f"neighbour-{self.n}", 8)
        ph.fill_and_publish(keys, range(8))
        report = self.e.fetch(self.h.listen, f"neighbour-{self.n}", keys, range(40, 48))
        self.assertTrue(report.ok, dump(report.__dict__))
        self.e.client.finish(f"neighbour-{self.n}")


if __name__ == "__main__":
    unittest.main()
