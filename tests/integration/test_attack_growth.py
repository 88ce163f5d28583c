"""Engine state is bounded in bytes (docs/security.md, "Engine state is
bounded in bytes"; issue 25, finding 2), against real daemons.

Before: every key ever published at a slot was kept (40 rounds of 112 long
keys per slot took the daemon from 11 to 691 MiB in 15 s), and every
unfinished kv_request_id too (200,000 of them added 936 MiB).

  PublishedKeysTest   the same rounds of long keys (2 KiB each) against a
                      daemon with its default limits: after 16 keys a slot
                      refuses more (conflict naming max-keys-per-slot), the
                      engine's other slots go on, and RSS stays flat (grows
                      less than 48 MiB over all rounds, and less than 8 MiB
                      over the second half); --max-published-key-bytes
                      refuses an engine whose keys would take more, naming it.
  OpenRequestsTest    lookups of new 2 KiB kv_request_ids towards a real peer,
                      never finished: the default max-open-request-bytes
                      refuses them after about 3,600 (conflict naming it),
                      RSS grows less than 96 MiB (40 in Release) over 20,000 attempts and not
                      at all after the first refusal; `finish` makes room
                      again; another engine is not affected.

Run against 821bed2 (before), both fail: nothing is refused; the rounds took
RSS from 11.1 to 51.6 MiB at half and 87.2 MiB at the end, and all 20,000
requests were accepted, RSS 11.7 -> 227.8 MiB.
"""

import sys
import unittest

from kvpeer_testing.harness import DaemonTestCase, rss_bytes, small_asan_quarantine
from kvpeer import KvpeerError
from kvpeer.simulator import make_keys

BLOCK = 4096
MIB = 1024 * 1024


def long_keys(prefix, count, length=2048):
    """Keys of `length` bytes (hex twice that), distinct by prefix and index."""
    out = []
    for i in range(count):
        head = f"{prefix}-{i}-".encode()
        out.append(head + b"k" * (length - len(head)))
    return out


class PublishedKeysTest(DaemonTestCase):
    def test_rounds_of_long_keys_per_slot_stay_flat(self):
        a = self.start_daemon("node", BLOCK, env=small_asan_quarantine())
        slots = 8
        engine = self.engine(a, slots, BLOCK, name="publisher")
        base = rss_bytes(a.pid)
        refused = 0
        half = None
        rounds = 40
        for r in range(rounds):
            for slot in range(slots):
                keys = long_keys(f"r{r}s{slot}", 112)
                try:
                    engine.client.publish(keys, [slot] * len(keys))
                except KvpeerError as e:
                    self.assertEqual(e.code, "conflict")
                    self.assertIn("max-keys-per-slot (16)", e.message)
                    refused += 1
            if r == rounds // 2:
                half = rss_bytes(a.pid)
        end = rss_bytes(a.pid)
        print(f"PUBLISHED KEYS rss base={base / MIB:.1f} half={half / MIB:.1f} end={end / MIB:.1f} MiB "
              f"refused={refused}", file=sys.stderr)
        # 112 keys at once are over the bound: every one of these publishes is refused.
        self.assertEqual(refused, rounds * slots)
        self.assertLess(end - base, 48 * MIB)
        self.assertLess(end - half, 8 * MIB)
        # Up to the bound is fine, one more is not.
        self.assertEqual(engine.client.publish(long_keys("ok", 16), [0] * 16), 16)
        with self.assertRaises(KvpeerError):
            engine.client.publish(long_keys("one-more", 1), [0])
        self.assertEqual(a.status()["counters"]["limit_max_keys_per_slot"], refused + 1)

    def test_published_key_bytes_are_bounded_per_engine(self):
        a = self.start_daemon("node", BLOCK, extra=["--max-published-key-bytes", str(1 * MIB)])
        engine = self.engine(a, 4096, BLOCK, name="publisher")
        other = self.engine(a, 16, BLOCK, name="other")
        per_key = 2048 + 96
        fits = MIB // per_key
        self.assertEqual(engine.client.publish(long_keys("a", fits), range(fits)), fits)
        with self.assertRaises(KvpeerError) as raised:
            engine.client.publish(long_keys("b", 1), [fits])
        self.assertEqual(raised.exception.code, "conflict")
        self.assertIn("max-published-key-bytes (1048576)", raised.exception.message)
        self.assertEqual(other.client.publish(long_keys("c", 4), range(4)), 4)  # its own budget


class OpenRequestsTest(DaemonTestCase):
    def test_unfinished_requests_are_bounded(self):
        a = self.start_daemon("node", BLOCK, env=small_asan_quarantine())
        b = self.start_daemon("peer", BLOCK)
        engine = self.engine(a, 4, BLOCK, name="hoarder")
        bystander = self.engine(a, 4, BLOCK, name="bystander")
        key = make_keys("k", 1)
        self.assertEqual(engine.probe(b.listen, "warm", key), ["miss"])
        engine.client.finish("warm")
        base = rss_bytes(a.pid)
        first_refusal = None
        refusal_rss = None
        accepted = 0
        for i in range(20000):
            kv = f"req-{i:06d}-" + "x" * 2036
            try:
                engine.client.lookup(b.listen, kv, key)
                accepted += 1
            except KvpeerError as e:
                self.assertEqual(e.code, "conflict")
                self.assertIn("max-open-request-bytes (33554432)", e.message)
                if first_refusal is None:
                    first_refusal = i
                    refusal_rss = rss_bytes(a.pid)
        end = rss_bytes(a.pid)
        at_refusal = "-" if refusal_rss is None else f"{refusal_rss / MIB:.1f}"
        print(f"OPEN REQUESTS accepted={accepted} first_refusal={first_refusal} rss base={base / MIB:.1f} "
              f"at_refusal={at_refusal} end={end / MIB:.1f} MiB", file=sys.stderr)
        self.assertIsNotNone(first_refusal)
        self.assertGreater(accepted, 3000)
        # Release: ~40 MiB (RequestCost bounds 32 MiB of accounted bytes);
        # AddressSanitizer's redzones and shadow made it 66.5 MiB in CI.
        self.assertLess(end - base, 96 * MIB)
        self.assertLess(end - refusal_rss, 8 * MIB)
        # Another engine is not affected; finishing makes room again.
        self.assertEqual(bystander.client.lookup(b.listen, "bystander-req", key, wait_ms=5000), ["miss"])
        new_one = "new-one-" + "x" * 2040
        with self.assertRaises(KvpeerError):
            engine.client.lookup(b.listen, new_one, key)
        engine.client.finish("req-000000-" + "x" * 2036)
        engine.client.lookup(b.listen, new_one, key)


if __name__ == "__main__":
    unittest.main()
