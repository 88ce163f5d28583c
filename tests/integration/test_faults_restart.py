"""A daemon restarted (SIGTERM, and kill -9 with its socket file left behind)
while its engines and peers keep running (fault_case.FaultBase's
guarantees): engines get a clear error and re-register on the new process;
peers see the new epoch (the old session closed, the peer ready again) and
transfers work.
"""

import os
import time
import unittest

from kvpeer_testing.fault_proxy import FaultProxy
from kvpeer_testing.fault_tools import metric_value, peer_entry
from kvpeer_testing.wait import poll as wait_for
from kvpeer_testing.harness import dump
from kvpeer import Client, KvpeerError, ProtocolError
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, make_keys
from fault_case import BLOCK_LEN, FaultBase


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
