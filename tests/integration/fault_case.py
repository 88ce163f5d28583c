"""The shared set-up of the fault tests (test_faults_proxy, test_faults_signal,
test_faults_restart) and of test_checksums' corruption run: a producer node
A behind a fault_proxy.FaultProxy P and a consumer node B; work submitted
and its outcome checked for the same guarantees: every load ends with
exactly one result (successes verified byte for byte, failures with a
reason, failed requests reported), nothing hangs past its bound, the
producer's pins are all released afterwards, and the nodes work again once
the fault is gone.

To route through the proxy the producer runs with --node-id = the proxy's
address: a dialled session requires the peer's connect to carry the dialled
id, and a node's id is the host:port it is reached at.
"""

import os
import time

from kvpeer_testing.fault_proxy import FaultProxy
from kvpeer_testing.fault_tools import FixedDaemon, free_port, peer_entry
from kvpeer_testing.wait import poll as wait_for
from kvpeer_testing.harness import DaemonTestCase, dump, model_flags
from kvpeer.simulator import make_keys

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
