"""Faults injected into running kvpeer nodes, each checked for the same
guarantees: every load ends with exactly one result (successes verified byte
for byte, failures with a reason, failed requests reported), nothing hangs
past its bound, the producer's pins are all released afterwards, and the
nodes work again once the fault is gone.

  ProxyFaultTest    a fault_proxy.FaultProxy between consumer and producer:
                    cut (FIN and RST), stall (short, and past the liveness
                    timeout), delay, corrupt (a block_data header, the magic of
                    a fetch, a payload byte caught by the xxh3 checksum),
                    refuse connections;
  SignalFaultTest   SIGSTOP/SIGCONT of a producer daemon (short, and past the
                    liveness timeout), of a consumer daemon, of engine
                    processes; SIGKILL of a producer engine mid-transfer and
                    of a consumer daemon holding pins;
  RestartTest       a daemon restarted (SIGTERM, and kill -9 with its socket
                    file left behind) while its engines and peers keep
                    running: engines get a clear error and re-register on
                    the new process; peers see the new epoch (the old session
                    closed, the peer ready again) and transfers work.

To route through the proxy the producer runs with --node-id = the proxy's
address: a dialled session requires the peer's connect to carry the dialled
id, and a node's id is the host:port it is reached at.
"""

import json
import os
import subprocess
import sys
import time
import unittest

from kvpeer_testing.fault_proxy import FaultProxy
from kvpeer_testing.fault_tools import FixedDaemon, engine_entry, free_port, metric_value, peer_entry
from kvpeer_testing.wait import poll as wait_for
from kvpeer_testing.harness import DaemonTestCase, dump, model_flags
from kvpeer import Client, KvpeerError, ProtocolError
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, make_keys

MiB = 1024 * 1024
BLOCK_LEN = 256 * 1024
COUNT = 128  # 32 MiB published by the producer
LOAD_TIMEOUT_S = 8
LIVENESS_S = 10  # wire spec section 4, step 8
HERE = os.path.dirname(os.path.abspath(__file__))


class FaultBase(DaemonTestCase):

    # -- topology --------------------------------------------------------------

    def proxied_pair(self, consumer_flags=(), throttle=16 * MiB):
        """Producer node A behind proxy P (A's node id is P's address) and a
        consumer node B whose engines name P as the peer."""
        self.proxy = FaultProxy(name="to-producer")
        self.addCleanup(self.proxy.close)
        self.a = self.start_daemon("producer-node", BLOCK_LEN, extra=["--node-id", self.proxy.address])
        self.proxy.set_target(self.a.listen)
        self.proxy.throttle(throttle)
        self.b = self.start_daemon("consumer-node", BLOCK_LEN,
                                   extra=["--load-timeout-s", str(LOAD_TIMEOUT_S), *consumer_flags])
        self.peer = self.proxy.address
        self.producer = self.engine(self.a, COUNT, BLOCK_LEN, name="producer")
        self.consumer = self.engine(self.b, 2 * COUNT, BLOCK_LEN, name="consumer")
        self.keys = make_keys(self.id(), COUNT)
        self.producer.fill_and_publish(self.keys, range(COUNT))

    def start_fixed(self, name, extra=(), port=None):
        d = FixedDaemon(self.workdir, name, port or free_port(), model_flags(BLOCK_LEN) + list(extra))
        self.daemons.append(d)
        return d.start()

    # -- work and its outcome --------------------------------------------------

    def submit(self, engine, peer, keys, nreq, tag, slot_base=0):
        """Probes then loads `nreq` requests of len(keys)/nreq keys each;
        returns {job: (kv, keys, slots)}. All probes first, so every load
        goes out back to back."""
        per = len(keys) // nreq
        batches = []
        for r in range(nreq):
            kv = f"{tag}-{r}"
            ks = keys[r * per:(r + 1) * per]
            ss = list(range(slot_base + r * per, slot_base + (r + 1) * per))
            self.assertEqual(engine.probe(peer, kv, ks), ["hit"] * per)
            batches.append((kv, ks, ss))
        return {engine.load(peer, kv, ks, ss): (kv, ks, ss) for kv, ks, ss in batches}

    def outcome(self, engine, jobs, timeout):
        """Every job's one result: successes verified, failures with a
        reason. Returns (ok jobs, failed jobs)."""
        results = engine.wait_jobs(list(jobs), timeout=timeout)
        ok, failed = [], []
        for job, res in results.items():
            kv, ks, ss = jobs[job]
            if res["success"]:
                self.assertEqual(engine.verify(ks, ss), [], f"job {job} ({kv}) succeeded with wrong bytes")
                ok.append(job)
            else:
                self.assertTrue(res.get("reason"), f"a failure without a reason: {dump(res)}")
                failed.append(job)
        engine.poll_once(wait_ms=300)  # a second result for any job raises here
        return ok, failed

    def finish(self, engine, jobs):
        for kv in sorted({v[0] for v in jobs.values()}):
            engine.client.finish(kv)

    def assert_failed_reported(self, engine, jobs, failed, timeout=5.0):
        want = {jobs[j][0] for j in failed}

        def reported():
            engine.poll_once(0)
            return want <= set(engine.failed_requests)
        self.assertTrue(wait_for(reported, timeout), f"failed requests {sorted(want)} not all in "
                                                     f"failed_requests {sorted(set(engine.failed_requests))}")

    def assert_no_pins(self, daemon, engine, keys, slots, timeout=15.0):
        """Nothing of the producer stays pinned: no round is served any more
        and withdrawing every key releases every slot (at once or through a
        `released` event), then the keys go back."""
        quiet = wait_for(lambda: all(p["rounds_serving"] == 0 for p in daemon.status()["peers"]), timeout)
        self.assertTrue(quiet, f"rounds still served: {dump(daemon.status()['peers'])}")
        withdrawn = engine.client.unpublish(keys)
        self.assertEqual(sorted(withdrawn["released"] + withdrawn["pinned"]), sorted(slots), dump(withdrawn))
        if withdrawn["pinned"]:
            engine.wait_released(withdrawn["pinned"], timeout=timeout)
        engine.client.publish(keys, slots)

    def assert_recovered(self, tag="after"):
        """A new request through the same path transfers and verifies."""
        keys = self.keys[:32]
        report = self.consumer.fetch(self.peer, f"{tag}-{time.monotonic_ns()}", keys,
                                     range(COUNT, COUNT + 32), batch=16, timeout=30)
        self.assertTrue(report.ok, dump(report.__dict__))
        entry = peer_entry(self.b, self.peer)
        self.assertEqual(entry["state"], "ready", dump(entry))
        self.assertEqual(entry["loads_in_flight"], 0, dump(entry))

    def wait_bytes_down(self, n, timeout=10.0):
        self.assertTrue(wait_for(lambda: self.proxy.stats["bytes_down"] >= n, timeout),
                        f"only {self.proxy.stats['bytes_down']} bytes moved")


class ProxyFaultTest(FaultBase):

    def setUp(self):
        super().setUp()
        self.proxied_pair()

    def cut_mid_transfer(self, rst):
        jobs = self.submit(self.consumer, self.peer, self.keys, 8, "cut")
        self.wait_bytes_down(8 * MiB)
        started = time.monotonic()
        self.assertGreaterEqual(self.proxy.cut(rst=rst), 1)
        ok, failed = self.outcome(self.consumer, jobs, timeout=10)
        self.assertLess(time.monotonic() - started, 3.0, "loads on a cut connection took too long to fail")
        self.assertTrue(failed, "the cut came after the transfer had finished: nothing was tested")
        self.assert_failed_reported(self.consumer, jobs, failed)
        self.finish(self.consumer, jobs)
        self.assert_no_pins(self.a, self.producer, self.keys, range(COUNT))
        self.assert_recovered()

    def test_cut_mid_transfer_fin(self):
        self.cut_mid_transfer(rst=False)

    def test_cut_mid_transfer_rst(self):
        self.cut_mid_transfer(rst=True)

    def test_short_stall_recovers(self):
        """A 1.5 s stall (below every timeout) only delays the transfer."""
        jobs = self.submit(self.consumer, self.peer, self.keys, 8, "stall")
        self.wait_bytes_down(4 * MiB)
        self.proxy.stall()
        before = self.proxy.stats["bytes_down"]
        time.sleep(1.5)
        self.assertLessEqual(self.proxy.stats["bytes_down"] - before, 512 * 1024, "the stall let bytes through")
        self.proxy.pass_through()
        ok, failed = self.outcome(self.consumer, jobs, timeout=LOAD_TIMEOUT_S + 5)
        self.assertEqual(failed, [], "a short stall failed loads")
        self.finish(self.consumer, jobs)
        self.assert_no_pins(self.a, self.producer, self.keys, range(COUNT))

    def test_stall_past_liveness(self):
        """Stalled for good: the loads fail (load timeout), the session is
        declared dead within the liveness bound, the producer lets go of its
        pins, and the path works once the link is back."""
        jobs = self.submit(self.consumer, self.peer, self.keys, 8, "dead-link")
        self.wait_bytes_down(4 * MiB)
        self.proxy.stall()
        started = time.monotonic()
        ok, failed = self.outcome(self.consumer, jobs, timeout=LOAD_TIMEOUT_S + LIVENESS_S)
        self.assertTrue(failed)
        # (Bounded by the liveness timeout rather than the load timeout when
        # the stall caught a frame mid-payload: test_load_timeout_mid_frame.)
        self.assertLess(time.monotonic() - started, max(LOAD_TIMEOUT_S, LIVENESS_S) + 3)
        dead = wait_for(lambda: peer_entry(self.b, self.peer)["state"] != "ready", LIVENESS_S + 4)
        elapsed = time.monotonic() - started
        self.assertTrue(dead, "a silent peer was never declared dead")
        self.assertLess(elapsed, LIVENESS_S + 4)
        self.assertIn("silent", peer_entry(self.b, self.peer)["last_error"] or "")
        self.proxy.pass_through()
        self.finish(self.consumer, jobs)
        self.assert_no_pins(self.a, self.producer, self.keys, range(COUNT))
        self.assert_recovered()

    def test_delay(self):
        """40 ms each way: everything works, slower; the measured RTT shows it."""
        self.proxy.delay(40)
        started = time.monotonic()
        self.assertEqual(self.consumer.probe(self.peer, "slow-probe", self.keys[:4]), ["hit"] * 4)
        self.assertGreater(time.monotonic() - started, 0.08)
        jobs = self.submit(self.consumer, self.peer, self.keys, 4, "delayed")
        ok, failed = self.outcome(self.consumer, jobs, timeout=LOAD_TIMEOUT_S + 5)
        self.assertEqual(failed, [])
        rtt = wait_for(lambda: peer_entry(self.b, self.peer)["rtt_us"], 6)
        self.assertTrue(rtt, "no ping round trip measured")
        self.assertGreaterEqual(rtt, 70000, f"rtt {rtt} us through an 80 ms round trip")
        self.finish(self.consumer, jobs)
        self.consumer.client.finish("slow-probe")
        self.assert_no_pins(self.a, self.producer, self.keys, range(COUNT))

    def test_corrupt_block_data_header(self):
        """A flipped byte in a block_data header: the consumer drops the
        connection (malformed frame), the loads on it fail, the producer is
        told why, and a new session works."""
        c = self.proxy.corrupt("down", where="header", only_payload_frames=True, nth=2)
        jobs = self.submit(self.consumer, self.peer, self.keys, 8, "bad-header")
        ok, failed = self.outcome(self.consumer, jobs, timeout=LOAD_TIMEOUT_S + 5)
        self.assertTrue(c.fired.is_set())
        self.assertTrue(failed)
        self.assertIn("protocol violation (malformed_frame)", self.b.log_text())
        self.assertTrue(wait_for(lambda: "peer disconnected: header" in self.a.log_text(), 5),
                        "the producer was not told why")
        self.finish(self.consumer, jobs)
        self.assert_no_pins(self.a, self.producer, self.keys, range(COUNT))
        self.assert_recovered()

    def test_corrupt_fetch_magic(self):
        """A flipped magic byte in the consumer's fetch: the producer drops
        the connection and the consumer's loads fail with its reason."""
        per = COUNT // 8
        batches = []
        for r in range(8):
            kv = f"bad-magic-{r}"
            ks, ss = self.keys[r * per:(r + 1) * per], list(range(r * per, (r + 1) * per))
            self.assertEqual(self.consumer.probe(self.peer, kv, ks), ["hit"] * per)
            batches.append((kv, ks, ss))
        c = self.proxy.corrupt("up", where="magic", nth=3)
        jobs = {self.consumer.load(self.peer, kv, ks, ss): (kv, ks, ss) for kv, ks, ss in batches}
        ok, failed = self.outcome(self.consumer, jobs, timeout=LOAD_TIMEOUT_S + 5)
        self.assertTrue(c.fired.is_set())
        self.assertTrue(failed)
        self.assertTrue(wait_for(lambda: "magic" in self.a.log_text(), 5))
        # The producer is usually in the middle of writing a data frame: it
        # finishes that frame, then sends disconnect{reason} (a graceful
        # close), so every failed load names the magic.
        reasons = [self.consumer.results[j].get("reason", "") for j in failed]
        self.assertTrue(all("magic" in r for r in reasons), dump(reasons))
        self.finish(self.consumer, jobs)
        self.assert_no_pins(self.a, self.producer, self.keys, range(COUNT))
        self.assert_recovered()

    def test_corrupt_payload_byte(self):
        """A flipped payload byte is caught by the per-block xxh3 checksum
        (wire spec section 7; on by default on both daemons): exactly the
        load whose block_data frame carried the byte fails, with a reason
        naming the checksum and the block; every other load succeeds and
        verifies; no load succeeds with wrong bytes; the session stays up
        (no reconnect) and the mismatch is counted once. (Without the
        feature the byte would be delivered as-is: test_checksums.py
        CorruptionRunTest.test_corruption_undetected_without_xxh3.)"""
        c = self.proxy.corrupt("down", where="payload", offset=1000, only_payload_frames=True, nth=1)
        jobs = self.submit(self.consumer, self.peer, self.keys, 4, "bad-payload")
        ok, failed = self.outcome(self.consumer, jobs, timeout=LOAD_TIMEOUT_S + 5)  # successes verified there
        self.assertTrue(c.fired.is_set())
        hit = json.loads(c.frame_header)
        hit_block = hit["block_indexes"][c.part_offset // BLOCK_LEN]
        self.assertEqual([jobs[j][0] for j in failed], [hit["kv_request_id"]],
                         f"not exactly the corrupted load failed: {dump(self.consumer.results)}")
        reason = self.consumer.results[failed[0]].get("reason", "")
        self.assertIn("checksum", reason)
        self.assertIn(f"block {hit_block}", reason)
        self.assertEqual(len(ok), len(jobs) - 1)
        self.assertEqual(peer_entry(self.b, self.peer)["state"], "ready")
        self.assertEqual(self.proxy.stats["accepted"], 1, "the session was reconnected")
        self.assertEqual(self.b.status()["counters"].get("checksum_failures"), 1)
        self.finish(self.consumer, jobs)
        self.assert_no_pins(self.a, self.producer, self.keys, range(COUNT))

    def use_consumer(self, name, load_timeout_s):
        """Another consumer node (own load timeout) takes over the tests' role."""
        self.b = self.start_daemon(name, BLOCK_LEN, extra=["--load-timeout-s", str(load_timeout_s)])
        self.consumer = self.engine(self.b, 2 * COUNT, BLOCK_LEN, name=name)

    def test_load_timeout_mid_frame(self):
        """Wire spec section 6: on the load timeout abort_fetch is sent and
        the load fails at once. A link that stalls in the middle of a data
        frame must not hold the result back until the session dies."""
        self.use_consumer("consumer-short-timeout", load_timeout_s=2)
        self.assertEqual(self.consumer.probe(self.peer, "mid-frame", self.keys[:32]), ["hit"] * 32)
        started = time.monotonic()
        job = self.consumer.load(self.peer, "mid-frame", self.keys[:32], range(32))
        self.wait_bytes_down(1 * MiB + 4096)  # inside the second 1 MiB frame
        self.proxy.stall()
        res = self.consumer.wait_jobs([job], timeout=LIVENESS_S + 5)[job]
        elapsed = time.monotonic() - started
        self.proxy.pass_through()
        self.assertFalse(res["success"])
        self.assertLess(elapsed, 2 + 2.5, f"the 2 s load timeout took {elapsed:.1f} s (reason: {res.get('reason')})")
        self.assertIn("timed out", res.get("reason", ""))
        # The rest of the stalled frame is read and dropped once the link
        # moves again; the session lives on and serves the next load.
        self.assertEqual(peer_entry(self.b, self.peer)["state"], "ready")
        self.consumer.client.finish("mid-frame")
        self.assertEqual(self.consumer.probe(self.peer, "after-stall", self.keys[32:40]), ["hit"] * 8)
        job = self.consumer.load(self.peer, "after-stall", self.keys[32:40], range(32, 40))
        res = self.consumer.wait_jobs([job], timeout=LOAD_TIMEOUT_S)[job]
        self.assertTrue(res["success"], dump(res))
        self.assertEqual(self.consumer.verify(self.keys[32:40], range(32, 40)), [])
        self.consumer.client.finish("after-stall")
        self.assertEqual(peer_entry(self.b, self.peer)["state"], "ready")
        self.assert_no_pins(self.a, self.producer, self.keys, range(COUNT))

    def test_slow_link_is_not_silent(self):
        """Wire spec section 4, step 8: a connection is dead after 10 s with
        nothing received. A slow but steady link (one 1 MiB data frame taking
        longer than that) keeps delivering bytes: the session must live."""
        self.use_consumer("consumer-patient", load_timeout_s=60)
        self.proxy.throttle(80 * 1024)  # 13 s per frame
        self.assertEqual(self.consumer.probe(self.peer, "slow-link", self.keys[:16]), ["hit"] * 16)
        job = self.consumer.load(self.peer, "slow-link", self.keys[:16], range(16))
        started = time.monotonic()
        while time.monotonic() - started < LIVENESS_S + 2.5:
            self.consumer.poll_once(wait_ms=500)
            if job in self.consumer.results:
                break
        moved = self.proxy.stats["bytes_down"]
        entry = peer_entry(self.b, self.peer)
        self.proxy.throttle(0)
        res = self.consumer.wait_jobs([job], timeout=30)[job]
        self.assertTrue(res["success"] and entry["state"] == "ready",
                        f"a link moving ~80 KB/s ({moved} bytes so far) was declared dead: {dump(res)} "
                        f"{dump(entry)}")
        self.assertEqual(self.consumer.verify(self.keys[:16], range(16)), [])

    def test_hits_lost_with_the_session(self):
        """A request probed the producer (hits, pinned there), then the
        connection dies before it loads. Those hits are gone with the
        session (the producer dropped its pins). The engine learns it at
        once: the request is listed in failed_requests (beyond the
        reference, which lists only loads and unresolved probes)."""
        self.assertEqual(self.consumer.probe(self.peer, "stale-hits", self.keys[:8]), ["hit"] * 8)
        self.assertEqual(self.consumer.probe(self.peer, "all-missed", [b"\x01" * 16]), ["miss"])
        self.proxy.cut()

        def reported():
            self.consumer.poll_once(0)
            return "stale-hits" in self.consumer.failed_requests

        self.assertTrue(wait_for(reported, 3), f"failed_requests: {sorted(self.consumer.failed_requests)}")
        self.assertNotIn("all-missed", self.consumer.failed_requests)
        self.consumer.client.finish("stale-hits")
        self.consumer.client.finish("all-missed")
        self.assert_no_pins(self.a, self.producer, self.keys, range(COUNT))

    def test_refused_connections_then_back(self):
        """The producer unreachable (connections closed at once): loads fail
        within the handshake bound, lookups answer without hanging, and the
        consumer reconnects on its own once the path is back."""
        self.proxy.refuse(True)
        started = time.monotonic()
        try:
            job = self.consumer.load(self.peer, "refused-pd", self.keys[:2], [0, 1])
            res = self.consumer.wait_jobs([job], timeout=15)[job]
            self.assertFalse(res["success"])
            self.assertTrue(res.get("reason"))
        except KvpeerError as e:
            self.assertEqual(e.code, "peer_unavailable")
        self.assertLess(time.monotonic() - started, 11.0)
        for _ in range(5):
            t = time.monotonic()
            answers = self.consumer.client.lookup(self.peer, "refused-sym", self.keys[:2], flush=True)
            self.assertLess(time.monotonic() - t, 1.0)
            self.assertTrue(set(answers) <= {"miss", "retry"}, answers)
            time.sleep(0.1)
        self.consumer.client.finish("refused-sym")
        self.proxy.refuse(False)
        ok = wait_for(lambda: self.try_fetch(), 12, interval=0.3)
        self.assertTrue(ok, "the consumer never reconnected")
        self.assertGreaterEqual(metric_value(self.b, "kvpeer_peer_dials_total", peer=self.peer), 2)

    def try_fetch(self):
        try:
            report = self.consumer.fetch(self.peer, f"back-{time.monotonic_ns()}", self.keys[:8],
                                         range(COUNT, COUNT + 8), timeout=20)
        except KvpeerError as e:
            if e.code == "peer_unavailable":
                return False
            raise
        return report.ok


class SignalFaultTest(FaultBase):

    def setUp(self):
        super().setUp()
        self.proxied_pair(consumer_flags=())

    def spawn_engine(self, script, daemon, *args):
        argv = [sys.executable, os.path.join(HERE, script), "--socket", daemon.socket_path,
                "--block-len", str(BLOCK_LEN), *args]
        p = self.spawn(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.addCleanup(p.stdout.close)
        self.addCleanup(p.stdin.close)
        line = p.stdout.readline()
        if not line:
            self.fail(f"{script} exited with {p.wait()} before it was ready")
        return p, json.loads(line)

    def ask(self, proc, cmd):
        proc.stdin.write(json.dumps(cmd) + "\n")
        proc.stdin.flush()
        out = json.loads(proc.stdout.readline())
        self.assertNotIn("error", out, dump(out))
        return out

    def test_sigstop_producer_daemon_briefly(self):
        jobs = self.submit(self.consumer, self.peer, self.keys, 8, "stop-a")
        self.wait_bytes_down(4 * MiB)
        self.a.pause()
        try:
            time.sleep(3)
        finally:
            self.a.resume()
        ok, failed = self.outcome(self.consumer, jobs, timeout=LOAD_TIMEOUT_S + 5)
        self.assertEqual(failed, [], "a 3 s pause of the producer failed loads")
        self.finish(self.consumer, jobs)
        self.assert_no_pins(self.a, self.producer, self.keys, range(COUNT))

    def test_sigstop_producer_daemon_past_liveness(self):
        jobs = self.submit(self.consumer, self.peer, self.keys, 8, "stop-a-long")
        self.wait_bytes_down(4 * MiB)
        self.a.pause()
        try:
            started = time.monotonic()
            ok, failed = self.outcome(self.consumer, jobs, timeout=LOAD_TIMEOUT_S + LIVENESS_S)
            self.assertTrue(failed)
            dead = wait_for(lambda: peer_entry(self.b, self.peer)["state"] != "ready", LIVENESS_S + 4)
            self.assertTrue(dead, "a stopped peer was never declared dead")
            self.assertLess(time.monotonic() - started, LIVENESS_S + 4)
        finally:
            self.a.resume()
        self.finish(self.consumer, jobs)
        self.assert_no_pins(self.a, self.producer, self.keys, range(COUNT))
        self.assert_recovered()

    def test_sigstop_consumer_daemon_briefly(self):
        jobs = self.submit(self.consumer, self.peer, self.keys, 8, "stop-b")
        self.wait_bytes_down(4 * MiB)
        self.b.pause()
        try:
            time.sleep(3)
        finally:
            self.b.resume()
        ok, failed = self.outcome(self.consumer, jobs, timeout=LOAD_TIMEOUT_S + 5)
        self.assertEqual(failed, [], "a 3 s pause of the consumer failed loads")
        self.finish(self.consumer, jobs)
        self.assert_no_pins(self.a, self.producer, self.keys, range(COUNT))

    def test_sigstop_engines(self):
        """A stopped producer engine is still served from (the daemon reads
        its region without it); a stopped consumer engine's loads complete
        while it sleeps and it collects each result once after SIGCONT."""
        self.proxy.throttle(0)
        pub, ready = self.spawn_engine("engine_proc.py", self.a, "--name", "stopped-producer",
                                       "--prefix", "stopped-pub", "--count", "64", "--num-blocks", "64",
                                       "--publish")
        self.assertEqual(ready["published"], 64)
        os.kill(pub.pid, 19)  # SIGSTOP
        try:
            keys = make_keys("stopped-pub", 64)
            report = self.consumer.fetch(self.peer, "from-stopped", keys, range(64), batch=16)
            self.assertTrue(report.ok, dump(report.__dict__))
            self.consumer.client.finish("from-stopped")
        finally:
            os.kill(pub.pid, 18)  # SIGCONT
        self.proxy.throttle(16 * MiB)
        cons, _ = self.spawn_engine("fault_engine.py", self.b, "--name", "stopped-consumer")
        sub = self.ask(cons, {"cmd": "submit", "peer": self.peer, "kv": "to-stopped", "prefix": self.id(),
                              "count": 64, "batch": 16})
        self.assertEqual(sub["hits"], 64)
        os.kill(cons.pid, 19)
        try:
            idle = wait_for(lambda: (engine_entry(self.b, "stopped-consumer") or {}).get("loads_in_flight") == 0,
                            LOAD_TIMEOUT_S + 5)
            self.assertTrue(idle, "the stopped engine's loads never finished")
        finally:
            os.kill(cons.pid, 18)
        out = self.ask(cons, {"cmd": "collect", "timeout": 10})
        self.assertEqual((out["results"], out["ok"], out["failed"], out["bad_blocks"]), (4, 4, 0, []), dump(out))

    def test_kill9_producer_engine_mid_transfer(self):
        """The producer engine dies while its blocks are being sent: every
        load ends once, a success carries the right bytes (the daemon keeps
        the region mapped until the transfer ends), the engine's keys are
        withdrawn."""
        pub, ready = self.spawn_engine("engine_proc.py", self.a, "--name", "doomed-producer", "--prefix", "doomed",
                                       "--count", "128", "--num-blocks", "128", "--publish")
        keys = make_keys("doomed", 128)
        jobs = self.submit(self.consumer, self.peer, keys, 8, "doomed")
        self.wait_bytes_down(4 * MiB)
        pub.kill()
        pub.wait()
        ok, failed = self.outcome(self.consumer, jobs, timeout=LOAD_TIMEOUT_S + 5)
        self.assertTrue(wait_for(lambda: engine_entry(self.a, "doomed-producer") is None, 5))
        self.finish(self.consumer, jobs)
        self.assertEqual(self.consumer.probe(self.peer, "doomed-again", keys[:4]), ["miss"] * 4)
        self.consumer.client.finish("doomed-again")
        self.assert_no_pins(self.a, self.producer, self.keys, range(COUNT))

    def test_kill9_consumer_daemon_releases_pins(self):
        """The consumer node dies holding pins (probed, not loaded) and loads
        in flight: the producer's rounds end and every slot is released."""
        per = COUNT // 4
        self.assertEqual(self.consumer.probe(self.peer, "pinned-only", self.keys[:per]), ["hit"] * per)
        withdrawn = self.producer.client.unpublish(self.keys[:per])
        self.assertEqual(sorted(withdrawn["pinned"]), list(range(per)), "the probe did not pin")
        self.submit(self.consumer, self.peer, self.keys[per:], 3, "inflight", slot_base=per)
        self.wait_bytes_down(2 * MiB)
        self.assertGreater(sum(p["rounds_serving"] for p in self.a.status()["peers"]), 0)
        self.b.kill()
        self.producer.wait_released(range(per), timeout=5)
        self.producer.client.publish(self.keys[:per], range(per))
        self.assert_no_pins(self.a, self.producer, self.keys, range(COUNT), timeout=5)
        b2 = self.start_daemon("consumer-node-2", BLOCK_LEN)
        e2 = self.engine(b2, COUNT, BLOCK_LEN, name="consumer-2")
        report = e2.fetch(self.peer, "after-kill", self.keys, range(COUNT), batch=32, timeout=30)
        self.assertTrue(report.ok, dump(report.__dict__))


class RestartTest(FaultBase):

    def reattach(self, engine, daemon, keys):
        """The engine's way back after its daemon restarted: a new control
        connection, hello, the same region (its bytes survived), publish."""
        engine.client.close()
        engine.client = Client(daemon.socket_path, timeout=30)
        engine.hello = engine.client.hello(engine.name, BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED)
        engine.client.register_region_fd(engine.region.fd, engine.region.num_blocks)
        if keys:
            engine.client.publish(keys, range(len(keys)))

    def assert_clear_error(self, engine, within=3.0):
        """The engine's next request fails with an error (EOF, reset, or a
        shutting_down answer) instead of hanging."""
        started = time.monotonic()
        with self.assertRaises((ProtocolError, OSError, KvpeerError)) as cm:
            for _ in range(100):
                engine.client.status()
                time.sleep(0.05)
        self.assertLess(time.monotonic() - started, within)
        if isinstance(cm.exception, KvpeerError):
            self.assertEqual(cm.exception.code, "shutting_down")
        return cm.exception

    def test_producer_restarted_with_sigterm(self):
        a = self.start_fixed("producer-node")
        b = self.start_daemon("consumer-node", BLOCK_LEN)
        ea = self.engine(a, 64, BLOCK_LEN, name="producer")
        eb = self.engine(b, 64, BLOCK_LEN, name="consumer")
        keys = make_keys("restart-term", 32)
        ea.fill_and_publish(keys, range(32))
        self.assertTrue(eb.fetch(a.listen, "before", keys, range(32)).ok)
        eb.client.finish("before")
        # Work outstanding across the restart: a store on A, a PD load on B.
        store = ea.supply("never-fetched", make_keys("restart-store", 2), [40, 41])
        pd = eb.load(a.listen, "pd-across-restart", make_keys("restart-pd", 2), [40, 41])
        a.send_term()
        # The drain delivers the store's result before the socket closes.
        wait_for(lambda: self._poll_or_none(ea) or store in ea.results, 5, interval=0.02)
        self.assertIn(store, ea.results, "the store job got no result before the daemon went away")
        self.assertFalse(ea.results[store]["success"])
        self.assertTrue(ea.results[store].get("reason"))
        self.assertEqual(a.wait_exit(), 0)
        self.assert_clear_error(ea)
        res = eb.wait_jobs([pd], timeout=5)[pd]
        self.assertFalse(res["success"])
        self.assertTrue(res.get("reason"))
        entry = peer_entry(b, a.node_id)
        self.assertNotEqual(entry["state"], "ready")
        self.assertIn("shutting down", entry["last_error"] or "")

        a2 = a.restart_as()
        self.daemons.append(a2)
        a2.start()
        self.assertEqual(a2.node_id, a.node_id)
        self.reattach(ea, a2, keys)
        eb.region.clear()
        report = eb.fetch(a.listen, "after", keys, range(32))
        self.assertTrue(report.ok, dump(report.__dict__))
        self.assertEqual(peer_entry(b, a.node_id)["state"], "ready")
        self.assertEqual(metric_value(b, "kvpeer_peer_sessions_total", peer=a.node_id), 2)

    def _poll_or_none(self, engine):
        try:
            engine.poll_once(wait_ms=50)
        except (ProtocolError, OSError):
            return True  # gone: stop waiting
        return False

    def test_consumer_restarted_with_sigterm(self):
        """The consumer node restarts while it holds pins on the producer:
        the producer releases them, the consumer's engine re-registers and
        fetches again."""
        a = self.start_daemon("producer-node", BLOCK_LEN)
        b = self.start_fixed("consumer-node")
        ea = self.engine(a, 64, BLOCK_LEN, name="producer")
        eb = self.engine(b, 64, BLOCK_LEN, name="consumer")
        keys = make_keys("restart-consumer", 32)
        ea.fill_and_publish(keys, range(32))
        self.assertEqual(eb.probe(a.listen, "pinning", keys), ["hit"] * 32)
        withdrawn = ea.client.unpublish(keys)
        self.assertEqual(sorted(withdrawn["pinned"]), list(range(32)), "the probe did not pin")
        self.assertEqual(b.stop(), 0)
        self.assert_clear_error(eb)
        ea.wait_released(range(32), timeout=5)
        ea.client.publish(keys, range(32))
        b2 = b.restart_as()
        self.daemons.append(b2)
        b2.start()
        self.reattach(eb, b2, [])
        report = eb.fetch(a.listen, "after", keys, range(32))
        self.assertTrue(report.ok, dump(report.__dict__))
        self.assertEqual(metric_value(a, "kvpeer_peer_sessions_total", peer=b.node_id), 2)

    def test_kill9_restart_detected_by_new_epoch(self):
        """kill -9 of the producer while the link to its peer is wedged, so
        the peer never sees the old connection end; the restarted producer
        (same address, same node id, its engine re-attached) dials the peer:
        the peer recognises the new epoch, closes the old session (its load
        fails with the reason), takes the new one, and transfers work."""
        self.proxy = FaultProxy(name="wedged")
        self.addCleanup(self.proxy.close)
        a = self.start_fixed("producer-node", extra=["--node-id", self.proxy.address])
        self.proxy.set_target(a.listen)
        b = self.start_daemon("consumer-node", BLOCK_LEN)
        ea = self.engine(a, 64, BLOCK_LEN, name="producer")
        eb = self.engine(b, 64, BLOCK_LEN, name="consumer")
        keys = make_keys("restart-kill", 32)
        ea.fill_and_publish(keys, range(32))
        self.assertTrue(eb.fetch(self.proxy.address, "before", keys, range(32)).ok)
        eb.client.finish("before")
        pd = eb.load(self.proxy.address, "pd-across-restart", make_keys("restart-kill-pd", 2), [40, 41])
        self.assertTrue(wait_for(lambda: peer_entry(b, self.proxy.address)["loads_in_flight"] == 1, 5))

        self.proxy.stall()
        a.kill()
        self.assert_clear_error(ea, within=1.0)
        self.assertTrue(os.path.exists(a.socket_path), "expected kill -9 to leave the socket file behind")
        a2 = a.restart_as()
        self.daemons.append(a2)
        a2.start()  # over the stale socket file
        self.assertEqual(a2.node_id, self.proxy.address)
        self.reattach(ea, a2, keys)
        self.assertEqual(peer_entry(b, self.proxy.address)["state"], "ready", "the peer noticed too early")
        # The restarted node dials the peer itself (its engine probes it).
        ea.client.lookup(b.listen, "wake", keys[:1], flush=True)
        replaced = wait_for(lambda: "restarted (new epoch)" in b.log_text(), 5)
        self.assertTrue(replaced, "the peer did not detect the new epoch\n" + b.log_tail(20))
        res = eb.wait_jobs([pd], timeout=5)[pd]
        self.assertFalse(res["success"])
        self.assertIn("restarted", res.get("reason", ""))
        self.assertEqual(metric_value(b, "kvpeer_peer_sessions_closed_total", reason="peer_restarted"), 1)
        self.assertTrue(wait_for(lambda: peer_entry(b, self.proxy.address)["state"] == "ready", 5))
        eb.region.clear()
        report = eb.fetch(self.proxy.address, "after", keys, range(32))
        self.assertTrue(report.ok, dump(report.__dict__))
        ea.client.finish("wake")
        self.proxy.pass_through()


if __name__ == "__main__":
    unittest.main()
