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
  RawProducerTest       a raw wire_peer.WirePeer as the producer a consumer
                        daemon dials: with xxh3 on, block_data without a valid
                        xxh3 array (missing, wrong length, not 16 lowercase
                        hex digits) is a violation that closes the session
                        naming xxh3; a well-formed but wrong value fails only
                        that load, the session goes on; with the feature off
                        a block_data without xxh3 (or with a junk one) is
                        accepted.
  SealTest              a block published or stored sealed and then
                        overwritten by its engine fails the consumer's load
                        with checksum; unsealed, the load succeeds with the
                        new bytes.

The corruption run prints one line to stderr:
  CHECKSUM RUN xxh3=on loads=.. corrupted=.. detected=.. wrong_as_success=0 ...
Its random choices come from KVPEER_CHECKSUM_SEED (default fixed), printed in
that line, so a failure can be replayed.
"""

import json
import os
import random
import re
import socket
import sys
import time
import unittest

from kvpeer_testing.fault_tools import metric_value, peer_entry
from kvpeer_testing.wait import poll as wait_for
from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, block_content, make_keys
from test_faults import BLOCK_LEN, COUNT, LOAD_TIMEOUT_S, FaultBase
from kvpeer_testing.wire_peer import WireListener, WirePeer, xxh3_list

FRAME_BLOCKS = 4  # data frames are at most 1 MiB: four 256 KiB blocks
SEED = int(os.environ.get("KVPEER_CHECKSUM_SEED", "20261204"))
HEX16 = re.compile(r"^[0-9a-f]{16}$")
NO_FEATURES = ["--features", ""]


def counters(daemon):
    return daemon.status()["counters"]


def features_of(daemon, peer_id):
    entry = peer_entry(daemon, peer_id)
    return None if entry is None else entry.get("features")


def block_number(reason):
    m = re.search(r"block (\d+)", reason or "")
    return int(m.group(1)) if m else None


# -- the corruption run ----------------------------------------------------------


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


class RawProducerTest(DaemonTestCase):
    """The consumer daemon dials a WireListener its engine names as the
    peer; the WirePeer accepting that dial is the producer (named after the
    listener's address, as the dialer requires). Each case uses a fresh
    listener, so no case meets the backoff left by the previous one."""

    NUM_BLOCKS = 16

    def setUp(self):
        super().setUp()
        self.v = self.start_daemon("consumer-node", BLOCK_LEN, extra=["--load-timeout-s", str(LOAD_TIMEOUT_S)])
        self.e = self.engine(self.v, self.NUM_BLOCKS, BLOCK_LEN, name="consumer")
        self.n = 0

    def fake_producer(self, features):
        """A new listener, the engine's first lookup (which makes the daemon
        dial it), the accepted connection's handshake. Returns the peer."""
        listener = WireListener()
        self.addCleanup(listener.close)
        self.n += 1
        kv = f"raw-{self.n}-0"
        keys = make_keys(kv, 4)
        first = self.e.client.lookup(listener.address, kv, keys, flush=True)
        peer = listener.accept_peer(BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, timeout=5.0,
                                    features=features)
        self.addCleanup(peer.close)
        their = peer.handshake()
        self.assertIn("xxh3", their.get("features", []), f"the daemon did not offer xxh3: {dump(their)}")
        self.assertEqual(self.probe(peer, kv, keys, first), ["hit"] * 4)
        return peer, kv, keys

    def probe(self, peer, kv, keys, answers=None, timeout=10.0):
        """Asks the engine's lookup until it is no longer "retry", answering
        every lookup frame the daemon sends with all hits."""
        deadline = time.monotonic() + timeout
        while True:
            if answers is not None and "retry" not in answers:
                return answers
            self.assertLess(time.monotonic(), deadline, f"lookup still {answers}")
            try:
                f = peer.recv_frame(timeout=0.2)
            except (socket.timeout, TimeoutError):
                f = None
            if f is not None and f.type == "lookup":
                peer.send({"type": "lookup_resp", "kv_request_id": f.header["kv_request_id"],
                           "keys": f.header["keys"], "hits": [True] * len(f.header["keys"]),
                           "round_seq": f.header["round_seq"]})
            elif f is not None and f.type == "ping":
                peer.send({"type": "pong", "nonce": f.header["nonce"]})
            elif f is not None:
                self.fail(f"unexpected {f!r}")
            answers = self.e.client.lookup(peer.peer_id, kv, keys, flush=True)

    def load(self, peer, kv, keys, slots):
        for s in slots:
            self.e.region.write_block(s, bytes(BLOCK_LEN))
        job = self.e.load(peer.peer_id, kv, keys, slots)
        fetch = peer.recv_until("fetch").header
        self.assertEqual((fetch["kv_request_id"], fetch["block_indexes"]), (kv, list(slots)), dump(fetch))
        return job, fetch

    @staticmethod
    def block_data(fetch, indexes, payload, xxh3=WirePeer.DROP):
        h = {"type": "block_data", "kv_request_id": fetch["kv_request_id"], "round_seq": fetch["round_seq"],
             "block_indexes": list(indexes)}
        if xxh3 is not WirePeer.DROP:
            h["xxh3"] = xxh3
        return h, payload

    @staticmethod
    def done(peer, fetch, success=True):
        peer.send({"type": "transfer_done", "kv_request_id": fetch["kv_request_id"], "success": success,
                   "round_seq": fetch["round_seq"]})

    def test_malformed_xxh3_is_a_violation(self):
        """Feature on: block_data with no xxh3, an array one short or one
        long, an uppercase or a 15-digit or a non-string checksum: the
        consumer disconnects with a reason naming xxh3 (sent, and logged),
        the load fails with a reason, nothing is counted as a checksum
        failure."""
        slots = [4, 5, 6, 7]
        cases = [
            ("no xxh3", lambda good: WirePeer.DROP),
            ("one short", lambda good: good[:-1]),
            ("one long", lambda good: good + [good[0]]),
            ("uppercase hex", lambda good: [g.upper() if any(ch.isalpha() for ch in g) else "A" + g[1:]
                                            for g in good]),
            ("15 hex digits", lambda good: [g[1:] for g in good]),
            ("a number", lambda good: [int(g, 16) >> 12 for g in good]),
        ]
        for name, make in cases:
            with self.subTest(name):
                peer, kv, keys = self.fake_producer(["xxh3"])
                job, fetch = self.load(peer, kv, keys, slots)
                payload = b"".join(block_content(k, BLOCK_LEN) for k in keys)
                peer.send(*self.block_data(fetch, slots, payload, make(xxh3_list(payload, BLOCK_LEN))))
                reason = peer.expect_disconnect()
                self.assertIn("xxh3", reason)
                res = self.e.wait_jobs([job], timeout=10)[job]
                self.assertFalse(res["success"], dump(res))
                self.assertTrue(res.get("reason"), dump(res))
                self.assertNotIn("checksum mismatch", res["reason"])
                self.assertIn(reason[:120], self.v.log_text())
                self.e.client.finish(kv)
        self.e.poll_once(wait_ms=200)  # a second result would raise here
        self.assertEqual(counters(self.v).get("checksum_failures", 0), 0)
        self.assertTrue(self.v.running)

    def test_valid_and_wrong_checksums_on_one_session(self):
        """Feature on: a correct xxh3 array is accepted (load succeeds, bytes
        verify, status shows the feature on); a well-formed but wrong value
        for one block fails that load naming the checksum and the block,
        counted once, and the same session stays up: it answers a ping and
        serves the next load."""
        peer, kv, keys = self.fake_producer(["xxh3"])
        self.assertEqual(features_of(self.v, peer.peer_id), ["xxh3"])
        slots = [0, 1, 2, 3]
        job, fetch = self.load(peer, kv, keys, slots)
        payload = b"".join(block_content(k, BLOCK_LEN) for k in keys)
        sums = xxh3_list(payload, BLOCK_LEN)
        peer.send(*self.block_data(fetch, slots[:2], payload[:2 * BLOCK_LEN], sums[:2]))
        peer.send(*self.block_data(fetch, slots[2:], payload[2 * BLOCK_LEN:], sums[2:]))
        self.done(peer, fetch)
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertTrue(res["success"], dump(res))
        self.assertEqual(self.e.verify(keys, slots), [])
        self.e.client.finish(kv)

        kv2 = f"{kv}-wrong"
        keys2 = make_keys(kv2, 4)
        self.assertEqual(self.probe(peer, kv2, keys2, self.e.client.lookup(peer.peer_id, kv2, keys2, flush=True)),
                         ["hit"] * 4)
        slots2 = [8, 9, 10, 11]
        job, fetch = self.load(peer, kv2, keys2, slots2)
        payload = b"".join(block_content(k, BLOCK_LEN) for k in keys2)
        sums = xxh3_list(payload, BLOCK_LEN)
        sums[2] = format(int(sums[2], 16) ^ 1, "016x")  # well formed, wrong for block 10
        peer.send(*self.block_data(fetch, slots2, payload, sums))
        self.done(peer, fetch)
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertFalse(res["success"], dump(res))
        self.assertIn("checksum", res.get("reason", ""), dump(res))
        self.assertEqual(block_number(res["reason"]), 10, dump(res))
        self.e.client.finish(kv2)
        # Not a violation: the connection is up, the peer ready, and it serves another load.
        peer.send({"type": "ping", "nonce": "7" * 32})
        self.assertEqual(peer.recv_until("pong").header["nonce"], "7" * 32)
        self.assertEqual(peer_entry(self.v, peer.peer_id)["state"], "ready")
        self.assertEqual(counters(self.v).get("checksum_failures"), 1)
        self.assertEqual(metric_value(self.v, "kvpeer_peer_loads_total", peer=peer.peer_id, outcome="failed",
                                      reason="checksum"), 1)
        kv3 = f"{kv}-after"
        keys3 = make_keys(kv3, 4)
        self.assertEqual(self.probe(peer, kv3, keys3, self.e.client.lookup(peer.peer_id, kv3, keys3, flush=True)),
                         ["hit"] * 4)
        job, fetch = self.load(peer, kv3, keys3, slots2)
        payload = b"".join(block_content(k, BLOCK_LEN) for k in keys3)
        peer.send(*self.block_data(fetch, slots2, payload, xxh3_list(payload, BLOCK_LEN)))
        self.done(peer, fetch)
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertTrue(res["success"], dump(res))
        self.assertEqual(self.e.verify(keys3, slots2), [])
        self.assertEqual(metric_value(self.v, "kvpeer_peer_sessions_total", peer=peer.peer_id), 1)

    def test_feature_off_needs_no_xxh3(self):
        """The fake producer lists no features: the feature is off (status
        shows []), a block_data without xxh3 is accepted, and one with a
        junk xxh3 field too (ignored when off, wire spec section 7)."""
        peer, kv, keys = self.fake_producer([])
        self.assertEqual(features_of(self.v, peer.peer_id), [])
        slots = [0, 1, 2, 3]
        job, fetch = self.load(peer, kv, keys, slots)
        payload = b"".join(block_content(k, BLOCK_LEN) for k in keys)
        peer.send(*self.block_data(fetch, slots[:3], payload[:3 * BLOCK_LEN]))
        peer.send(*self.block_data(fetch, slots[3:], payload[3 * BLOCK_LEN:], xxh3=["NOT-A-CHECKSUM", 7]))
        self.done(peer, fetch)
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertTrue(res["success"], dump(res))
        self.assertEqual(self.e.verify(keys, slots), [])
        self.assertEqual(peer_entry(self.v, peer.peer_id)["state"], "ready")
        self.assertEqual(counters(self.v).get("checksum_failures", 0), 0)


# -- sealed publish and store ------------------------------------------------------------


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
