"""An engine dies (SIGKILL of its process, or an abrupt close) in the middle
of its work: the daemon cleans up after it alone. Other engines keep
working, the dead engine disappears from status, and whatever its probes
pinned on the producer node is released (the publisher's pinned slots show
up in a `released` event)."""

import json
import os
import subprocess
import sys
import unittest

from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer.simulator import make_keys

BLOCK_LEN = 64 * 1024
HERE = os.path.dirname(os.path.abspath(__file__))


class EngineCrashTest(DaemonTestCase):

    def setUp(self):
        super().setUp()
        self.a = self.start_daemon("a", BLOCK_LEN)
        self.b = self.start_daemon("b", BLOCK_LEN)
        self.publisher = self.engine(self.a, 256, BLOCK_LEN, name="publisher")
        self.keys = make_keys("crash-pinned", 32)
        self.publisher.fill_and_publish(self.keys, range(32))
        self.other_keys = make_keys("crash-other", 32)
        self.publisher.fill_and_publish(self.other_keys, range(32, 64))
        self.bystander = self.engine(self.b, 256, BLOCK_LEN, name="bystander")

    def start_engine_proc(self, daemon, *args):
        """Runs engine_proc.py and returns (process, its ready line)."""
        argv = [sys.executable, os.path.join(HERE, "engine_proc.py"), "--socket", daemon.socket_path,
                "--block-len", str(BLOCK_LEN), *args]
        p = self.spawn(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        if not line:
            self.fail(f"engine process exited with {p.wait()} before it was ready")
        return p, json.loads(line)

    def engine_names(self, daemon):
        return sorted(e["client"] for e in daemon.status()["engines"])

    def test_consumer_killed_with_pins_and_load_outstanding(self):
        proc, ready = self.start_engine_proc(
            self.b, "--name", "doomed", "--prefix", "crash-pinned", "--count", "32",
            "--probe", self.a.listen, "--kv", "doomed-kv", "--load", self.a.listen)
        self.assertEqual(ready["answers"], ["hit"] * 32)
        engines = self.b.status()["engines"]
        self.assertIn(("doomed", proc.pid), [(e["client"], e["pid"]) for e in engines], dump(engines))

        # The probe pinned the publisher's slots: unpublish can't free them.
        withdrawn = self.publisher.client.unpublish(self.keys)
        self.assertEqual(sorted(withdrawn["pinned"]), list(range(32)), dump(withdrawn))

        proc.kill()
        proc.wait()
        self.wait_until(lambda: self.engine_names(self.b) == ["bystander"], what="dead engine gone from status")
        self.publisher.wait_released(range(32), timeout=15)

        # The bystander on the same node, and the publisher, carry on.
        report = self.bystander.fetch(self.a.listen, "bystander-kv", self.other_keys, range(32))
        self.assertTrue(report.ok, dump(report.__dict__))
        self.assertEqual(self.bystander.failed_requests, [])

    def test_consumer_socket_closed_abruptly(self):
        """Same clean-up when the engine's connection just drops mid-load."""
        c = self.engine(self.b, 64, BLOCK_LEN, name="abrupt")
        self.assertEqual(c.probe(self.a.listen, "abrupt-kv", self.keys), ["hit"] * 32)
        c.load(self.a.listen, "abrupt-pd", make_keys("never-stored", 4), range(60, 64))
        withdrawn = self.publisher.client.unpublish(self.keys)
        self.assertEqual(sorted(withdrawn["pinned"]), list(range(32)))
        c.client.abort()
        self.wait_until(lambda: self.engine_names(self.b) == ["bystander"], what="closed engine gone from status")
        self.publisher.wait_released(range(32), timeout=15)
        report = self.bystander.fetch(self.a.listen, "bystander-kv", self.other_keys, range(32))
        self.assertTrue(report.ok, dump(report.__dict__))

    def test_publisher_killed_while_pinned(self):
        """The producer-side engine dies while a remote probe holds its
        slots: the consumer's load still gets exactly one result (the pin
        keeps the region mapped, so success is allowed, with correct bytes),
        the producer node survives, and the keys are gone afterwards."""
        proc, ready = self.start_engine_proc(
            self.a, "--name", "doomed-publisher", "--prefix", "crash-publisher", "--count", "16", "--publish")
        self.assertEqual(ready["published"], 16)
        keys = make_keys("crash-publisher", 16)
        self.assertEqual(self.bystander.probe(self.a.listen, "pub-kv", keys), ["hit"] * 16)
        proc.kill()
        proc.wait()
        self.wait_until(lambda: self.engine_names(self.a) == ["publisher"], what="dead publisher gone")
        job = self.bystander.load(self.a.listen, "pub-kv", keys, range(100, 116))
        res = self.bystander.wait_jobs([job], timeout=15)[job]
        if res["success"]:
            self.assertEqual(self.bystander.verify(keys, range(100, 116)), [])
        self.bystander.client.finish("pub-kv")
        self.assertEqual(self.bystander.probe(self.a.listen, "pub-kv-2", keys), ["miss"] * 16)
        self.bystander.client.finish("pub-kv-2")


if __name__ == "__main__":
    unittest.main()
