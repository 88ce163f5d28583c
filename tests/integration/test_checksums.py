"""Per-block xxh3 checksums (wire-protocol.md section 7; control-api.md
`publish`/`store` `seal` and `--features`), against real daemons.

  CorruptionRunTest     payload bytes flipped in transit by a fault_proxy
                        between consumer and producer, many times over: with
                        the feature on (the default) every corrupted load
                        fails naming the checksum, every other load succeeds
                        byte for byte, no load succeeds with wrong bytes, the
                        session survives, and each detection is counted and
                        logged; with the consumer's `--features ""` the same
                        corruption is delivered as a successful load with
                        wrong bytes (what the run above would miss if the
                        check were not there: the test can fail).
  NegotiationTest       the feature is on only when both connects list it
                        (status peers[].features), loads work either way, and
                        on the wire the producer sends block_data.xxh3 that
                        is XXH3-64 (seed 0, 16 lowercase hex digits) of each
                        block only when the feature is on.

The producer's side is in test_checksums_raw_producer.py (a raw producer's
malformed or wrong xxh3) and test_checksums_seal.py (sealed publish/store).

The corruption run prints one line to stderr:
  CHECKSUM RUN xxh3=on loads=.. corrupted=.. detected=.. wrong_as_success=0 ...
Its random choices come from KVPEER_CHECKSUM_SEED (default fixed), printed in
that line, so a failure can be replayed.
"""

import json
import random
import re
import sys
import time
import unittest

from kvpeer_testing.fault_tools import metric_value, peer_entry
from kvpeer_testing.wait import poll as wait_for
from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, block_content, make_keys
from fault_case import BLOCK_LEN, COUNT, LOAD_TIMEOUT_S, FaultBase
from kvpeer_testing.wire_peer import WirePeer, xxh3_list
from checksum_tools import FRAME_BLOCKS, HEX16, NO_FEATURES, SEED, block_number, counters, features_of


class CorruptionRunTest(FaultBase):
    """Many loads through a fault proxy, one payload corruption armed per
    round of a few loads. The proxy records which block_data frame it hit
    (its original header) and where, so every load's expected outcome is
    known exactly: the load whose frame carried the flipped bytes is the
    corrupted one, every other load must succeed."""

    KINDS = ("bit", "block", "last_byte")
    CONSUMER_FLAGS = {"test_corruption_undetected_without_xxh3": NO_FEATURES}

    def setUp(self):
        super().setUp()
        self.proxied_pair(consumer_flags=self.CONSUMER_FLAGS.get(self._testMethodName, ()))

    def arm(self, kind, rng, frames):
        """One corruption of the `down` payload of a random one of the
        round's next `frames` data frames."""
        nth = rng.randrange(frames)
        if kind == "bit":  # one bit anywhere in the frame
            return self.proxy.corrupt("down", where="payload", only_payload_frames=True, nth=nth,
                                      offset=rng.randrange(FRAME_BLOCKS * BLOCK_LEN), xor=0x01)
        if kind == "block":  # every byte of one whole block
            return self.proxy.corrupt("down", where="payload", only_payload_frames=True, nth=nth,
                                      offset=rng.randrange(FRAME_BLOCKS) * BLOCK_LEN, length=BLOCK_LEN, xor=0xFF)
        # the frame's last byte (the offset clamps to it)
        return self.proxy.corrupt("down", where="payload", only_payload_frames=True, nth=nth, offset=2 ** 62,
                                  xor=0x80)

    def quiesce(self, r, timeout=5.0):
        """Before the next corruption is armed: the producer serves no round
        of the consumer any more (a load failed on a checksum ends at once,
        while the producer may still be sending its other frames until our
        abort_fetch reaches it), and the proxy has read everything it sent
        (its stream offset stands still), so the next corruption can only
        hit a frame of the next round."""
        serving = wait_for(lambda: peer_entry(self.a, self.b.node_id)["rounds_serving"] == 0, timeout)
        self.assertTrue(serving, f"round {r}: the producer still serves {dump(peer_entry(self.a, self.b.node_id))}")
        deadline = time.monotonic() + timeout
        last = self.proxy.stream_offset("down")
        while time.monotonic() < deadline:
            time.sleep(0.05)
            now = self.proxy.stream_offset("down")
            if now == last:
                return
            last = now
        self.fail(f"round {r}: the producer's stream did not settle")

    def corruption_run(self, rounds, checksums_on, seed=SEED, loads_per_round=3):
        """`rounds` rounds of `loads_per_round` symmetric loads (4 or 8 keys,
        so whole 4-block frames), one corruption each. Returns the figures.
        Every per-load expectation is asserted here; `checksums_on` says
        whether the corrupted load must fail (on) or succeed with wrong
        bytes (off)."""
        rng = random.Random(seed)
        self.proxy.throttle(0)
        st = {"loads": 0, "corrupted": 0, "detected": 0, "wrong_as_success": 0, "ok": 0, "flipped_bytes": 0,
              "kinds": {k: 0 for k in self.KINDS}}
        detected_kvs = []
        started = time.monotonic()
        for r in range(rounds):
            kind = self.KINDS[r % len(self.KINDS)]
            sizes = [rng.choice((4, 8)) for _ in range(loads_per_round)]
            key_ix = rng.sample(range(COUNT), sum(sizes))
            batches, at = [], 0
            for i, n in enumerate(sizes):
                kv = f"ck-{r}-{i}"
                ks = [self.keys[k] for k in key_ix[at:at + n]]
                ss = list(range(at, at + n))  # distinct destinations within the round
                at += n
                for s in ss:
                    self.consumer.region.write_block(s, bytes(BLOCK_LEN))  # no stale right bytes
                self.assertEqual(self.consumer.probe(self.peer, kv, ks), ["hit"] * n)
                batches.append((kv, ks, ss))
            c = self.arm(kind, rng, sum(n // FRAME_BLOCKS for n in sizes))
            jobs = {self.consumer.load(self.peer, kv, ks, ss): (kv, ks, ss) for kv, ks, ss in batches}
            results = self.consumer.wait_jobs(list(jobs), timeout=LOAD_TIMEOUT_S + 5)
            self.assertTrue(c.done.wait(2), f"round {r}: the {kind} corruption did not complete (fired "
                                            f"{c.fired.is_set()}, {c.flipped} bytes)")
            hit = json.loads(c.frame_header)
            hit_kv = hit["kv_request_id"]
            hit_block = hit["block_indexes"][c.part_offset // BLOCK_LEN]
            self.assertIn(hit_kv, [b[0] for b in batches], f"round {r}: the corruption hit a frame of an earlier "
                                                           f"round (the quiesce below did not wait enough)")
            # The range stops at the frame's end (a frame may carry fewer than four blocks).
            frame_len = len(hit["block_indexes"]) * BLOCK_LEN
            self.assertEqual(c.flipped, min(c.length, frame_len - c.part_offset))
            self.assertEqual("xxh3" in hit, checksums_on, f"block_data.xxh3 presence: {dump(hit)}")
            st["corrupted"] += 1
            st["kinds"][kind] += 1
            st["flipped_bytes"] += c.flipped
            for job, res in results.items():
                kv, ks, ss = jobs[job]
                st["loads"] += 1
                where = f"round {r} ({kind}, seed {seed}) load {kv} slots {ss[0]}..{ss[-1]}"
                if res["success"]:
                    bad = self.consumer.verify(ks, ss)
                    if bad:
                        st["wrong_as_success"] += 1
                        # Only the corrupted block differs, by exactly the flipped bytes.
                        self.assertEqual((kv, bad), (hit_kv, [hit_block]), where)
                        got = self.consumer.region.read_block(hit_block)
                        want = block_content(ks[ss.index(hit_block)], BLOCK_LEN)
                        self.assertEqual(sum(1 for x, y in zip(got, want) if x != y), c.flipped, where)
                    else:
                        st["ok"] += 1
                        self.assertNotEqual(kv, hit_kv, f"{where}: its frame was corrupted in transit, yet "
                                                        f"every byte verifies")
                else:
                    reason = res.get("reason", "")
                    self.assertEqual(kv, hit_kv, f"{where}: an uncorrupted load failed: {dump(res)}")
                    self.assertTrue(checksums_on, f"{where}: failed without checksums: {dump(res)}")
                    self.assertIn("checksum", reason, f"{where}: {dump(res)}")
                    self.assertEqual(block_number(reason), hit_block, f"{where}: {dump(res)}")
                    st["detected"] += 1
                    detected_kvs.append(kv)
            self.consumer.poll_once(wait_ms=0)  # a second result for any job raises here
            self.finish(self.consumer, jobs)
            entry = peer_entry(self.b, self.peer)
            self.assertEqual(entry["state"], "ready", f"round {r}: {dump(entry)}")
            self.quiesce(r)
        st["seconds"] = round(time.monotonic() - started, 1)
        self.consumer.poll_once(wait_ms=300)
        sys.stderr.write(f"\nCHECKSUM RUN xxh3={'on' if checksums_on else 'off'} loads={st['loads']} "
                         f"corrupted={st['corrupted']} detected={st['detected']} "
                         f"wrong_as_success={st['wrong_as_success']} ok={st['ok']} kinds={st['kinds']} "
                         f"flipped_bytes={st['flipped_bytes']} seed={seed} seconds={st['seconds']}\n")
        # One session from start to end: nothing was reconnected.
        self.assertEqual(self.proxy.stats["accepted"], 1, dump(self.proxy.stats))
        self.assertEqual(metric_value(self.b, "kvpeer_peer_sessions_total", peer=self.peer), 1)
        self.assertEqual(metric_value(self.a, "kvpeer_peer_sessions_total", peer=self.b.node_id), 1)
        st["detected_kvs"] = detected_kvs
        return st

    def test_corruption_detected_with_xxh3(self):
        """Feature on (both daemons' default). 20 rounds x 3 loads, one
        corruption each, cycling a one-bit flip at a random offset, a whole
        block, and a frame's last byte: each corrupted load fails with a
        reason naming the checksum and the block hit, every other load
        succeeds and verifies, none succeeds with wrong bytes, one session
        throughout, and the consumer counts (status, Prometheus) and logs
        every detection."""
        st = self.corruption_run(rounds=20, checksums_on=True)
        self.assertEqual(features_of(self.b, self.peer), ["xxh3"])
        self.assertEqual(features_of(self.a, self.b.node_id), ["xxh3"])
        self.assertEqual(st["wrong_as_success"], 0)
        self.assertEqual(st["detected"], st["corrupted"], dump(st))
        self.assertEqual(st["ok"], st["loads"] - st["corrupted"], dump(st))
        # One corruption flips bytes of one block of one frame, and a frame
        # belongs to one load: each corruption is exactly one detection.
        self.assertEqual(counters(self.b).get("checksum_failures"), st["detected"], dump(counters(self.b)))
        self.assertEqual(counters(self.a).get("checksum_failures", 0), 0, "the producer checks nothing it sends")
        with self.b.client() as cl:
            text = cl.metrics()
        self.assertRegex(text, r"(?m)^kvpeer_checksum_failures_total(\{[^}]*\})? \S+$")
        self.assertEqual(metric_value(self.b, "kvpeer_checksum_failures_total"), st["detected"])
        self.assertEqual(metric_value(self.b, "kvpeer_peer_loads_total", peer=self.peer, outcome="failed",
                                      reason="checksum"), st["detected"])
        self.assertEqual(metric_value(self.b, "kvpeer_peer_loads_total", peer=self.peer, outcome="failed"),
                         st["detected"], "a load failed for another reason")
        log_lines = [ln for ln in self.b.log_text().splitlines() if "checksum mismatch" in ln and self.peer in ln]
        for kv in st["detected_kvs"]:
            named = re.compile(rf"\b{re.escape(kv)}\b")
            self.assertTrue([ln for ln in log_lines if named.search(ln) and "warn" in ln.lower()],
                            f"no warning names the mismatch of {kv}: {log_lines[:5]}")
        self.assert_no_pins(self.a, self.producer, self.keys, range(COUNT))

    def test_corruption_undetected_without_xxh3(self):
        """The consumer offers no features (`--features ""`): the same kinds
        of corruption are delivered as successful loads with wrong bytes.
        This is what the run above guards against, so it shows that run
        can fail; the status shows the feature off on both ends."""
        self.assertEqual(self.b.status()["config"].get("features"), [])
        st = self.corruption_run(rounds=6, checksums_on=False, loads_per_round=2)
        self.assertEqual(features_of(self.b, self.peer), [])
        self.assertEqual(features_of(self.a, self.b.node_id), [])
        self.assertGreaterEqual(st["wrong_as_success"], 1, dump(st))
        self.assertEqual(st["wrong_as_success"], st["corrupted"], dump(st))
        self.assertEqual(st["detected"], 0)
        self.assertEqual(counters(self.b).get("checksum_failures", 0), 0)


# -- negotiation ---------------------------------------------------------------------


class NegotiationTest(DaemonTestCase):

    def pair(self, tag, producer_flags, consumer_flags):
        a = self.start_daemon(f"producer-{tag}", BLOCK_LEN, extra=producer_flags)
        b = self.start_daemon(f"consumer-{tag}", BLOCK_LEN, extra=consumer_flags)
        ea = self.engine(a, 16, BLOCK_LEN, name=f"producer-{tag}")
        eb = self.engine(b, 16, BLOCK_LEN, name=f"consumer-{tag}")
        keys = make_keys(f"negotiate-{tag}", 16)
        ea.fill_and_publish(keys, range(16))
        return a, b, ea, eb, keys

    def test_matrix(self):
        """on/on: both peers[] entries show ["xxh3"]; on/off and off/on:
        [] on both ends (a feature is on only when both connects list it).
        Loads succeed and verify in all three."""
        cases = [("on-on", [], [], ["xxh3"]), ("on-off", [], NO_FEATURES, []), ("off-on", NO_FEATURES, [], [])]
        for tag, pf, cf, want in cases:
            with self.subTest(tag):
                a, b, ea, eb, keys = self.pair(tag, pf, cf)
                self.assertEqual(a.status()["config"].get("features"), [] if pf else ["xxh3"])
                report = eb.fetch(a.listen, f"neg-{tag}", keys, range(16), batch=8, timeout=30)
                self.assertTrue(report.ok, dump(report.__dict__))
                self.assertEqual(features_of(b, a.node_id), want, dump(b.status()["peers"]))
                self.assertEqual(features_of(a, b.node_id), want, dump(a.status()["peers"]))
                # Present from the start, so an alert sees the first failure as a rise.
                for daemon in (a, b):
                    self.assertEqual(counters(daemon)["checksum_failures"], 0)
                    with daemon.client() as c:
                        self.assertIn("kvpeer_checksum_failures_total 0", c.metrics().splitlines())
                eb.client.finish(f"neg-{tag}")
                self.assertEqual(b.stop(), 0)
                self.assertEqual(a.stop(), 0)

    def test_producer_sends_xxh3_only_when_negotiated(self):
        """A raw consumer dials a producer daemon and fetches: with xxh3 in
        its connect, every block_data carries one 16-lowercase-hex xxh3 per
        block, equal to XXH3-64 (seed 0) of that block's bytes as received;
        without it, no xxh3 field at all. The daemon's own connect lists
        xxh3 (offered by default), and not with --features ""."""
        a = self.start_daemon("producer", BLOCK_LEN)
        ea = self.engine(a, 16, BLOCK_LEN, name="producer")
        keys = make_keys("wire-xxh3", 10)
        ea.fill_and_publish(keys, range(10))
        for n, features in enumerate((["xxh3"], [], ["some-future-feature", "xxh3"])):
            with self.subTest(features=features):
                p = WirePeer.dial(a.listen, f"127.0.0.1:{23100 + n}", BLOCK_LEN, DEFAULT_FINGERPRINT,
                                  DEFAULT_HASH_SEED, features=features)
                self.addCleanup(p.close)
                their = p.handshake()
                self.assertIn("xxh3", their.get("features", []), dump(their))
                kv = f"wire-{n}"
                p.send({"type": "lookup", "kv_request_id": kv, "keys": [k.hex() for k in keys], "round_seq": 1})
                self.assertEqual(p.recv_until("lookup_resp").header["hits"], [True] * 10)
                p.send({"type": "fetch", "kv_request_id": kv, "keys": [k.hex() for k in keys],
                        "block_indexes": list(range(100, 110)), "round_seq": 1})  # closes lookup round 1
                got, frames = {}, 0
                while True:
                    f = p.recv_until(("block_data", "transfer_done"), timeout=20)
                    if f.type == "transfer_done":
                        self.assertTrue(f.header["success"], dump(f.header))
                        break
                    frames += 1
                    h = f.header
                    if "xxh3" in features:
                        self.assertEqual(len(h.get("xxh3", [])), len(h["block_indexes"]), dump(h))
                        self.assertTrue(all(HEX16.match(x) for x in h["xxh3"]), dump(h))
                        self.assertEqual(h["xxh3"], xxh3_list(f.payload, BLOCK_LEN), dump(h))
                    else:
                        self.assertNotIn("xxh3", h, dump(h))
                    for i, index in enumerate(h["block_indexes"]):
                        got[index] = f.payload[i * BLOCK_LEN:(i + 1) * BLOCK_LEN]
                self.assertEqual(sorted(got), list(range(100, 110)))
                self.assertTrue(all(got[100 + i] == block_content(k, BLOCK_LEN) for i, k in enumerate(keys)))
                self.assertGreaterEqual(frames, 3, "ten 256 KiB blocks in 1 MiB frames")
                entry = peer_entry(a, p.peer_id)
                self.assertEqual(entry["features"], ["xxh3"] if "xxh3" in features else [], dump(entry))
                p.close()
        off = self.start_daemon("producer-off", BLOCK_LEN, extra=NO_FEATURES)
        p = WirePeer.dial(off.listen, "127.0.0.1:23199", BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED,
                          features=["xxh3"])
        self.addCleanup(p.close)
        their = p.handshake()
        self.assertNotIn("xxh3", their.get("features", []), dump(their))


# -- a raw producer ------------------------------------------------------------------


if __name__ == "__main__":
    unittest.main()
