"""Signals to running kvpeer processes (fault_case.FaultBase's guarantees):
SIGSTOP/SIGCONT of a producer daemon (short, and past the liveness
timeout), of a consumer daemon, of engine processes; SIGKILL of a producer
engine mid-transfer and of a consumer daemon holding pins.
"""

import json
import os
import subprocess
import sys
import time
import unittest

from kvpeer_testing.fault_tools import engine_entry, peer_entry
from kvpeer_testing.wait import poll as wait_for
from kvpeer_testing.harness import dump
from kvpeer.simulator import make_keys
from fault_case import BLOCK_LEN, COUNT, HERE, LIVENESS_S, LOAD_TIMEOUT_S, MiB, FaultBase


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


if __name__ == "__main__":
    unittest.main()
