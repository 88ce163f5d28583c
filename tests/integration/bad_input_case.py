"""The shared set-up of the bad-input tests (test_bad_input_*.py): a victim
daemon with a producer engine and a neighbour daemon whose consumer holds a
ready session to it.

For every case the tests check that the daemon answers cleanly: a peer gets
`disconnect{reason}` naming the problem and the connection is closed; the
reason is in the daemon's log; a control client gets the documented error
code and its connection stays usable. And that it disturbs nothing else:
the victim daemon's session with a real neighbour stays ready (same `since`),
its engines are untouched, and a real transfer between the two daemons still
verifies byte for byte afterwards.
"""


from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, make_keys
from kvpeer_testing.wire_peer import WirePeer


BLOCK_LEN = 64 * 1024
NUM_BLOCKS = 64
HANDSHAKE_TIMEOUT_S = 2
SENTINEL = bytes([0x5A]) * BLOCK_LEN


class BadInputBase(DaemonTestCase):
    """A victim daemon V (short handshake timeout) with a producer engine,
    and a neighbour daemon H whose consumer engine holds a ready session to
    V. Every case must leave that session alone."""

    extra_victim_flags = ()

    def setUp(self):
        super().setUp()
        self.v = self.start_daemon("victim", BLOCK_LEN,
                                   extra=["--handshake-timeout-s", str(HANDSHAKE_TIMEOUT_S),
                                          *self.extra_victim_flags])
        self.h = self.start_daemon("neighbour", BLOCK_LEN, extra=list(self.extra_victim_flags))
        self.producer = self.engine(self.v, NUM_BLOCKS, BLOCK_LEN, name="producer")
        self.consumer = self.engine(self.h, NUM_BLOCKS, BLOCK_LEN, name="consumer")
        self.keys = make_keys(self.id(), 16)
        self.producer.fill_and_publish(self.keys, range(16))
        self.rounds = 0
        self.real_transfer()
        self.baseline = self.neighbour_session()
        self.fake_ids = 0

    # -- the neighbour session that must stay untouched ------------------------

    def neighbour_session(self):
        """(since, sessions ever made) of V's session with the neighbour: a
        replaced session changes the count even within the same second."""
        peers = [p for p in self.v.status()["peers"] if p["peer_id"] == self.h.node_id]
        self.assertEqual(len(peers), 1, dump(self.v.status()["peers"]))
        self.assertEqual(peers[0]["state"], "ready", dump(peers[0]))
        with self.v.client() as c:
            text = c.metrics()
        label = f'kvpeer_peer_sessions_total{{peer="{self.h.node_id}"}} '
        count = [line[len(label):] for line in text.splitlines() if line.startswith(label)]
        return peers[0]["since"], count

    def real_transfer(self):
        """The neighbour fetches every key from V, bytes verified."""
        self.rounds += 1
        kv = f"real-{self.rounds}"
        self.consumer.region.clear()
        report = self.consumer.fetch(self.v.listen, kv, self.keys, range(16, 32), batch=8)
        self.assertTrue(report.ok, dump(report.__dict__))
        self.consumer.client.finish(kv)

    def assert_undisturbed(self, transfer=False):
        self.assertTrue(self.v.running, "the victim daemon died")
        self.assertEqual(self.neighbour_session(), self.baseline, "the neighbour's session was replaced")
        engines = sorted(e["client"] for e in self.v.status()["engines"])
        self.assertIn("producer", engines)
        if transfer:
            self.real_transfer()

    # -- raw peers -------------------------------------------------------------

    def fake_id(self):
        self.fake_ids += 1
        return f"127.0.0.1:{20000 + self.fake_ids}"

    def dial(self, target=None, **kw):
        p = WirePeer.dial((target or self.v).listen, self.fake_id(), BLOCK_LEN, DEFAULT_FINGERPRINT,
                          DEFAULT_HASH_SEED, timeout=5.0, **kw)
        self.addCleanup(p.close)
        return p

    def assert_logged(self, daemon, text, timeout=3.0):
        self.wait_until(lambda: text in daemon.log_text(), timeout, f"{daemon.name}'s log mentioning {text!r}",
                        interval=0.02)

    def rejected(self, peer, *needles, daemon=None, timeout=5.0):
        """The daemon's disconnect reason; it must contain every needle and
        be logged; the connection must be closed."""
        reason = peer.expect_disconnect(timeout=timeout)
        for n in needles:
            self.assertIn(n, reason)
        self.assertTrue(reason, "a disconnect must carry a reason")
        self.assert_logged(daemon or self.v, reason[:200])
        return reason
