"""Idle peer connections (--idle-peer-timeout-s; docs/operations.md, "Idle
peer connections") between two real nodes: a connection without work is
closed with disconnect "idle" and the next work redials it; work held open
(a probed hit not loaded yet, a disaggregated fetch waiting for supply)
keeps it open past the timeout."""

import time
import unittest

from kvpeer_testing.fault_tools import metric_value
from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer.simulator import make_keys

BLOCK_LEN = 64 * 1024
COUNT = 32
# The consumer's timeout is short; the producer's is long, so that only the
# consumer closes and each end's view of the close is known.
CONSUMER_IDLE_S = 1
PRODUCER_IDLE_S = 60
# Several consumer timeouts (and pings every 2 s) pass while work is held.
HOLD_S = 4


class IdlePeerTest(DaemonTestCase):

    def setUp(self):
        super().setUp()
        self.a = self.start_daemon("producer-node", BLOCK_LEN, extra=["--idle-peer-timeout-s", str(PRODUCER_IDLE_S)])
        self.b = self.start_daemon("consumer-node", BLOCK_LEN, extra=["--idle-peer-timeout-s", str(CONSUMER_IDLE_S)])
        self.producer = self.engine(self.a, COUNT, BLOCK_LEN, name="producer", region="shm")
        self.consumer = self.engine(self.b, COUNT, BLOCK_LEN, name="consumer")
        self.keys = make_keys(self.id(), COUNT)
        self.assertEqual(self.producer.fill_and_publish(self.keys, range(COUNT)), COUNT)

    def peer_entry(self, daemon, other):
        peers = [p for p in daemon.status()["peers"] if p["peer_id"] == other.node_id]
        return peers[0] if peers else None

    def dials(self):
        return metric_value(self.b, "kvpeer_peer_dials_total", peer=self.a.node_id)

    def idle_closes(self, daemon):
        return metric_value(daemon, "kvpeer_peer_sessions_closed_total", reason="idle")

    def fetch_all(self, kv_request_id):
        """Probe, load every hit into mirrored slots, every byte checked; finish."""
        dest = [COUNT - 1 - i for i in range(COUNT)]
        report = self.consumer.fetch(self.a.listen, kv_request_id, self.keys, dest, batch=COUNT)
        self.assertEqual(report.hits, COUNT, f"misses: {report.misses}")
        self.assertEqual(report.jobs_failed, 0, f"reasons: {report.reasons}")
        self.assertEqual(report.bad_blocks, [])
        self.assertEqual(report.bytes_loaded, COUNT * BLOCK_LEN)
        self.consumer.client.finish(kv_request_id)

    def wait_idle_closed(self):
        """The consumer closes the connection as idle; the producer hears "idle"."""
        self.wait_until(lambda: self.peer_entry(self.b, self.a)["state"] == "closed", timeout=15,
                        what="the consumer's idle close")
        entry = self.peer_entry(self.b, self.a)
        self.assertEqual(entry["last_error"], f"closed after {CONSUMER_IDLE_S} s without work", dump(entry))
        self.wait_until(lambda: self.peer_entry(self.a, self.b)["state"] == "closed", timeout=10,
                        what="the producer's side of the close")
        self.assertEqual(self.peer_entry(self.a, self.b)["last_error"], "peer disconnected: idle")
        self.assertIn(f"closed after {CONSUMER_IDLE_S} s without work (idle-peer-timeout-s)", self.b.log_text())

    def assert_held_open(self):
        """HOLD_S seconds pass; the one connection stays ready throughout."""
        self.wait_until(lambda: self.peer_entry(self.b, self.a)["state"] == "ready", timeout=10,
                        what="the connection carrying the held work")
        deadline = time.monotonic() + HOLD_S
        while time.monotonic() < deadline:
            self.assertEqual(self.peer_entry(self.b, self.a)["state"], "ready")
            time.sleep(0.25)
        self.assertEqual(self.idle_closes(self.b), 0)
        self.assertEqual(self.idle_closes(self.a), 0)
        self.assertEqual(self.dials(), 1)

    def test_idle_connection_closes_and_next_work_redials(self):
        self.assertEqual(self.b.status()["config"]["idle-peer-timeout-s"], CONSUMER_IDLE_S)
        self.fetch_all("idle-1")
        self.assertEqual(self.dials(), 1)
        self.wait_idle_closed()
        self.assertEqual(self.idle_closes(self.b), 1)
        self.assertEqual(self.idle_closes(self.a), 0)
        self.assertEqual(metric_value(self.a, "kvpeer_peer_sessions_closed_total", reason="peer_disconnected"), 1)
        # The next work dials a new connection and succeeds on it.
        self.fetch_all("idle-2")
        self.assertEqual(self.dials(), 2)
        self.wait_idle_closed()
        self.assertEqual(self.idle_closes(self.b), 2)
        self.assertEqual(self.consumer.failed_requests, [])

    def test_probed_hits_not_loaded_keep_the_connection(self):
        answers = self.consumer.probe(self.a.listen, "held-probe", self.keys)
        self.assertEqual(answers, ["hit"] * COUNT)
        self.assert_held_open()
        # The hits are still good: the load succeeds on the same connection.
        dest = list(range(COUNT))
        job = self.consumer.load(self.a.listen, "held-probe", self.keys, dest)
        result = self.consumer.wait_jobs([job], timeout=30)[job]
        self.assertTrue(result["success"], dump(result))
        self.assertEqual(self.consumer.verify(self.keys, dest), [])
        self.consumer.client.finish("held-probe")
        self.assertEqual(self.dials(), 1)
        self.wait_idle_closed()

    def test_parked_disaggregated_fetch_keeps_the_connection(self):
        pd_keys = make_keys("pd-" + self.id(), COUNT)
        dest = list(range(COUNT))
        job = self.consumer.load(self.a.listen, "held-pd", pd_keys, dest)
        self.assert_held_open()
        self.consumer.poll_once(wait_ms=0)
        self.assertNotIn(job, self.consumer.results, "the parked load must still wait for its supply")
        store = self.producer.supply("held-pd", pd_keys, range(COUNT))
        result = self.consumer.wait_jobs([job], timeout=30)[job]
        self.assertTrue(result["success"], dump(result))
        self.assertEqual(self.consumer.verify(pd_keys, dest), [])
        self.assertTrue(self.producer.wait_jobs([store], timeout=30)[store]["success"])
        self.consumer.client.finish("held-pd")
        self.wait_idle_closed()


if __name__ == "__main__":
    unittest.main()
