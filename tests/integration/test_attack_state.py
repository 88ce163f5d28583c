"""Per-session and per-node tables bounded in bytes and reaped (issue 11,
finding 4), each shown by performing the attack against a real daemon.

  fetch+abort flood  a raw wire peer sends 20,000 disaggregated fetches, each
                     aborted at once, every one under its own 4000-character
                     kv_request_id: no round or pin stays open, so the
                     producer keeps no supply binding per id and at most
                     1 MiB of abort-tombstone ids; RSS growth, status and
                     metrics stay small
  named and refused  an engine names 5,000 peers that refuse connections:
                     each entry is listed while it backs off and reaped
                     --peer-reap-after-s later; status and metrics shrink
                     back to their size before (a regression test: the
                     reaping of docs/security.md, "Nothing before
                     authentication", already covered engine-named peers)

The flood grew the RSS of the binary before this fix by about 100 MiB (the
supply binding of every id, and 4096 tombstones of 4000-character ids).
"""

import json
import time
import unittest

from kvpeer_testing.harness import DaemonTestCase, dump, rss_bytes, small_asan_quarantine
from kvpeer_testing.wire_peer import WirePeer
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, make_keys

BLOCK_LEN = 4096
MIB = 1024 * 1024
ID_CHARS = 4000
PAIRS = 20_000
BATCH = 250              # fetch+abort pairs sent before their acks are read
RSS_GROWTH_BOUND = 16 * MIB
NAMED_PEERS = 5_000


def long_id(i):
    """A distinct kv_request_id of ID_CHARS characters."""
    head = f"flood-{i:06d}-"
    return head + "x" * (ID_CHARS - len(head))


def text_sizes(client):
    """(status JSON bytes, metrics text bytes)."""
    return len(json.dumps(client.status())), len(client.metrics())


class StateAttackTest(DaemonTestCase):

    def flood(self, p, first, count):
        """`count` fetch+abort pairs, ids first..first+count-1; returns once
        every abort_ack came back (none may be missing or doubled)."""
        key = make_keys("flood-key", 1)[0].hex()
        for start in range(first, first + count, BATCH):
            end = min(start + BATCH, first + count)
            chunks = []
            for i in range(start, end):
                kv = long_id(i)
                chunks.append(('{"type":"fetch","kv_request_id":"%s","round_seq":%d,"keys":["%s"],'
                               '"block_indexes":[0]}' % (kv, i, key)).encode())
                chunks.append(('{"type":"abort_fetch","kv_request_id":"%s","round_seq":%d}' % (kv, i)).encode())
            p.sock.sendall(b"".join(b"KVP1" + len(h).to_bytes(4, "big") + (0).to_bytes(8, "big") + h
                                    for h in chunks))
            acked = set()
            while len(acked) < end - start:
                f = p.recv_until(("abort_ack", "transfer_done"), timeout=30)
                self.assertEqual(f.type, "abort_ack", dump(f.header))
                self.assertNotIn(f.header["round_seq"], acked)
                acked.add(f.header["round_seq"])
            self.assertEqual(acked, set(range(start, end)))

    def test_fetch_abort_flood_leaves_bounded_state(self):
        a = self.start_daemon("a", BLOCK_LEN, env=small_asan_quarantine())
        watcher = self.client(a)
        p = WirePeer.dial(a.listen, "127.0.0.1:29011", BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED,
                          timeout=30.0)
        self.addCleanup(p.close)
        p.handshake()
        # A warm-up, so that the allocator's and the connection's own buffers
        # are in place before the measurement starts.
        self.flood(p, 0, 1000)
        status_before, metrics_before = text_sizes(watcher)
        rss_before = rss_bytes(a.pid)
        started = time.monotonic()
        self.flood(p, 1000, PAIRS)
        elapsed = time.monotonic() - started
        grown = rss_bytes(a.pid) - rss_before
        status_after, metrics_after = text_sizes(watcher)
        print(f"\n  {PAIRS} fetch+abort pairs of {ID_CHARS}-character ids in {elapsed:.1f} s: "
              f"RSS grew {grown / MIB:.1f} MiB; status {status_before} -> {status_after} bytes, "
              f"metrics {metrics_before} -> {metrics_after} bytes")
        self.assertLess(grown, RSS_GROWTH_BOUND, f"producer RSS grew by {grown / MIB:.1f} MiB")
        self.assertLess(status_after - status_before, 4096, "status grew with the flood")
        self.assertLess(metrics_after - metrics_before, 4096, "metrics grew with the flood")
        peer = [x for x in a.status()["peers"] if x["peer_id"] == p.peer_id][0]
        self.assertEqual(peer["state"], "ready", dump(peer))
        self.assertEqual(peer["rounds_open"], 0, dump(peer))
        # Re-sending the latest abort still earns no second ack (its tombstone
        # is among those kept), and the connection is still up.
        last = PAIRS + 1000 - 1
        p.send({"type": "abort_fetch", "kv_request_id": long_id(last), "round_seq": last})
        p.send({"type": "ping", "nonce": "cd" * 16})
        f = p.recv_until(("pong", "abort_ack"), timeout=10)
        self.assertEqual(f.type, "pong", dump(f.header))

    def test_refused_engine_named_peers_are_reaped(self):
        a = self.start_daemon("a", BLOCK_LEN, extra=["--peer-reap-after-s", "2"])
        watcher = self.client(a)
        engine = self.engine(a, 8, BLOCK_LEN, name="namer")
        status_before, metrics_before = text_sizes(watcher)
        keys = make_keys("named", 1)
        # Port 1 on 127/8 addresses: nothing listens there, so each dial is
        # refused at once and the entry backs off.
        names = [f"127.77.{i // 250}.{i % 250 + 1}:1" for i in range(NAMED_PEERS)]
        started = time.monotonic()
        for name in names:
            self.assertEqual(engine.probe(name, "named-req", keys), ["miss"])
        engine.client.finish("named-req")
        elapsed = time.monotonic() - started
        listed = len(a.status()["peers"])
        status_full, metrics_full = text_sizes(watcher)
        self.assertGreater(listed, 0, "the named peers were never listed")
        self.wait_until(lambda: not a.status()["peers"], timeout=30, what="every named peer reaped")
        status_after, metrics_after = text_sizes(watcher)
        print(f"\n  {NAMED_PEERS} refused names in {elapsed:.1f} s: {listed} listed; status "
              f"{status_before} -> {status_full} -> {status_after} bytes, metrics {metrics_before} -> "
              f"{metrics_full} -> {metrics_after} bytes")
        self.assertLess(status_after - status_before, 4096, "status still holds the reaped peers")
        self.assertLess(metrics_after - metrics_before, 4096, "metrics still hold the reaped peers")
        metrics = watcher.metrics()
        self.assertNotIn("127.77.", metrics)
        self.assertIn(f"kvpeer_peer_entries_reaped_total {NAMED_PEERS}\n", metrics)


if __name__ == "__main__":
    unittest.main()
