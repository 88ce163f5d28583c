"""Bounded server-side rounds and split client requests (wire-protocol.md
1.1 section 6), each shown by performing the attack against real daemons.

  round flood     a raw peer opens many disaggregated fetch rounds of many
                  long keys: past --max-round-key-bytes each further fetch
                  gets transfer_done{success:false}, the producer's memory
                  stays bounded and the connection stays up
  lookup only     a raw peer probes published keys and never fetches: after
                  --round-timeout-s the round is retired, its pins released
  unsupplied      a raw peer's disaggregated fetch that no store supplies is
                  answered transfer_done{success:false} after
                  --unbound-timeout-s
  big lookup      an engine probes so many long keys that one lookup frame
                  would exceed the 16 MiB header limit: the client role splits
                  it, a bystander engine's load on the same connection
                  succeeds, and every key gets one answer
"""

import json
import time
import unittest

from kvpeer_testing.harness import DaemonTestCase, rss_bytes, small_asan_quarantine
from kvpeer_testing.wire_peer import WirePeer
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, make_keys

BLOCK_LEN = 4096
KEY_LEN = 4096          # the longest key the wire allows
MIB = 1024 * 1024


def counter(daemon, name):
    return daemon.status()["counters"].get(name, 0)


def peer_status(daemon, peer_id):
    for p in daemon.status()["peers"]:
        if p["peer_id"] == peer_id:
            return p
    return None


def pins_gauge(daemon):
    with daemon.client() as c:
        for line in c.metrics().splitlines():
            if line.startswith("kvpeer_pins "):
                return float(line.split()[1])
    raise AssertionError("no kvpeer_pins gauge in metrics")


def long_keys(tag, n):
    """n distinct keys of KEY_LEN bytes."""
    return [(f"{tag}-{i}-".encode() * KEY_LEN)[:KEY_LEN] for i in range(n)]


class RoundAttackTest(DaemonTestCase):

    def dial(self, daemon):
        p = WirePeer.dial(daemon.listen, "127.0.0.1:29001", BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED,
                          timeout=20.0)
        self.addCleanup(p.close)
        p.handshake()
        return p

    def assert_alive(self, p):
        p.send({"type": "ping", "nonce": "ab" * 16})
        f = p.recv_until("pong", timeout=10)
        self.assertEqual(f.header["nonce"], "ab" * 16)

    def test_round_flood_is_bounded_in_bytes(self):
        bound = 32 * MIB
        a = self.start_daemon("a", BLOCK_LEN, extra=["--max-round-key-bytes", str(bound)], env=small_asan_quarantine())
        p = self.dial(a)
        # One frame of 1900 keys of 4 KiB: 15.6 MB of hex, just under the
        # header limit; each round is charged 1900 * (4096 + 128) bytes.
        keys_per_round, rounds = 1900, 24
        keys_json = json.dumps([k.hex() for k in long_keys("flood", keys_per_round)])
        indexes_json = json.dumps(list(range(keys_per_round)))
        before = rss_bytes(a.pid)
        for r in range(rounds):
            header = ('{"type":"fetch","kv_request_id":"flood-%d","round_seq":%d,"keys":%s,"block_indexes":%s}'
                      % (r, r, keys_json, indexes_json)).encode()
            p.sock.sendall(b"KVP1" + len(header).to_bytes(4, "big") + (0).to_bytes(8, "big") + header)
        accepted = bound // (keys_per_round * (KEY_LEN + 128))
        refused = rounds - accepted
        dones = []
        while len(dones) < refused:
            f = p.recv_until("transfer_done", timeout=30)
            dones.append(f.header)
        self.assertTrue(all(d["success"] is False for d in dones))
        self.assertEqual(sorted(d["round_seq"] for d in dones), list(range(accepted, rounds)))
        grown = rss_bytes(a.pid) - before
        self.assertLess(grown, 100 * MIB, f"producer RSS grew by {grown / MIB:.0f} MiB")
        self.wait_until(lambda: counter(a, "limit_max_round_key_bytes") >= refused, what="refusals counted")
        self.assertIn("max-round-key-bytes", a.log_text())
        # Nothing of this was a violation: the connection is still up.
        self.assert_alive(p)
        status = peer_status(a, p.peer_id)
        self.assertEqual(status["state"], "ready")
        self.assertEqual(status["rounds_open"], accepted)
        self.assertLessEqual(status["round_key_bytes"], bound)

    def test_lookup_only_round_is_retired_and_its_pins_released(self):
        a = self.start_daemon("a", BLOCK_LEN, extra=["--round-timeout-s", "2"])
        producer = self.engine(a, 8, BLOCK_LEN, name="producer")
        keys = make_keys("pinned", 4)
        producer.fill_and_publish(keys, range(4))
        p = self.dial(a)
        p.send({"type": "lookup", "kv_request_id": "probe-only", "keys": [k.hex() for k in keys], "round_seq": 0})
        resp = p.recv_until("lookup_resp")
        self.assertEqual(resp.header["hits"], [True] * 4)
        self.assertEqual(pins_gauge(a), 4)
        self.assertEqual(peer_status(a, p.peer_id)["rounds_open"], 1)
        self.wait_until(lambda: pins_gauge(a) == 0, timeout=10, what="the lookup round's pins released")
        self.assertEqual(peer_status(a, p.peer_id)["rounds_open"], 0)
        self.assertEqual(counter(a, "rounds_expired_lookup"), 1)
        released = producer.client.unpublish(keys)
        self.assertEqual(sorted(released["released"]), [0, 1, 2, 3])
        self.assertEqual(released["pinned"], [])
        self.assert_alive(p)

    def test_unsupplied_disaggregated_fetch_fails_after_the_unbound_timeout(self):
        a = self.start_daemon("a", BLOCK_LEN, extra=["--unbound-timeout-s", "2"])
        p = self.dial(a)
        started = time.monotonic()
        p.send({"type": "fetch", "kv_request_id": "never-stored", "keys": ["00", "01"], "block_indexes": [0, 1],
                "round_seq": 5})
        done = p.recv_until("transfer_done", timeout=15)
        waited = time.monotonic() - started
        self.assertEqual((done.header["success"], done.header["round_seq"]), (False, 5))
        self.assertGreaterEqual(waited, 1.5)
        self.wait_until(lambda: counter(a, "rounds_expired_unsupplied") == 1, what="timeout counted")
        self.assertEqual(peer_status(a, p.peer_id)["rounds_open"], 0)
        self.assert_alive(p)

    def test_big_lookup_is_split_and_a_bystander_load_succeeds(self):
        a = self.start_daemon("a", BLOCK_LEN)
        b = self.start_daemon("b", BLOCK_LEN)
        n = 5000  # 5000 keys of 4 KiB: 41 MB of hex in one lookup frame unsplit
        big = long_keys("big", n)
        small = make_keys("bystander", 4)
        producer = self.engine(b, n + 4, BLOCK_LEN, name="producer")
        producer.fill_and_publish(big, range(n), batch=1000)
        producer.fill_and_publish(small, range(n, n + 4))
        e1 = self.engine(a, 8, BLOCK_LEN, name="prober")
        e2 = self.engine(a, 8, BLOCK_LEN, name="bystander")
        self.assertEqual(e2.probe(b.listen, "small", small), ["hit"] * 4)
        # Registered in several control requests (a line is at most 16 MiB),
        # sent by one flush: one logical probe of 5000 keys.
        chunks = [big[i:i + 1000] for i in range(0, n, 1000)]
        for chunk in chunks:
            e1.client.lookup(b.listen, "big", chunk, flush=False)
        e1.client.flush()
        job = e2.load(b.listen, "small", small, [0, 1, 2, 3])
        self.assertTrue(e2.wait_jobs([job])[job]["success"])
        self.assertEqual(e2.verify(small, [0, 1, 2, 3]), [])
        answers = []
        for chunk in chunks:
            answers += e1.probe(b.listen, "big", chunk, timeout=30)
        self.assertEqual(len(answers), n)
        self.assertEqual(answers, ["hit"] * n)
        # The shared connection never closed.
        self.assertEqual(peer_status(a, b.listen)["state"], "ready")
        self.assertIsNone(peer_status(a, b.listen)["last_error"])
        e1.client.finish("big")
        self.wait_until(lambda: pins_gauge(b) == 0, what="the big probe's pins released by finish")


if __name__ == "__main__":
    unittest.main()
