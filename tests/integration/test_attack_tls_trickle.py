"""A trickled block payload, under TLS and over plain TCP, against a real
daemon (issue 11 item 3; docs/security.md "Where it is tested").

A raw producer (our listener, dialled by the consumer's daemon) answers the
fetch with a block_data header and then its payload one byte at a time, one
byte every 2 s (under TLS: one byte per TLS record). The consumer's load
timeout is 3 s. Before, under TLS the load stayed without a result past the
timeout and past `finish` (30 s later still loads_in_flight=1), because
every payload byte was placed into the slot as it came and counted as
progress; plain TCP failed it at 3.0 s. Now, on both transports:

* the load fails with "load timed out" at about the load timeout;
* `finish` during the trickle is answered at once and the load fails at once;
* nothing is in flight afterwards;
* no byte of the abandoned block lands in the slots after the result (under
  TLS, none at all: a block is staged and copied into its slot only whole).
"""

import os
import ssl
import threading
import time
import unittest

from kvpeer_testing.harness import DaemonTestCase, dump
from test_tls import OPENSSL, Pki, tls_flags
from kvpeer_testing.wire_peer import WireListener, WirePeer, encode_frame
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, make_keys

BLOCK_LEN = 4096
NUM_BLOCKS = 8
LOAD_TIMEOUT_S = 3
TRICKLE_INTERVAL_S = 2.0
SENTINEL = b"\x5a" * BLOCK_LEN
SLOTS = [2, 3]
# Generous for a slow, shared 2-core CI machine; the bug held the load for
# good, so the margin never hides it.
LATE_MARGIN_S = 1.5


class Trickler(threading.Thread):
    """Sends `data` one byte per `interval_s` (one TLS record each under
    TLS) until stopped or the daemon closes. Only this thread writes to the
    socket and nobody reads it, so an ssl socket is never used from two
    threads at once."""

    def __init__(self, sock, data, interval_s):
        super().__init__(daemon=True)
        self.sock, self.data, self.interval_s = sock, data, interval_s
        self.stop = threading.Event()
        self.sent = 0

    def run(self):
        while self.sent < len(self.data) and not self.stop.is_set():
            try:
                self.sock.send(self.data[self.sent:self.sent + 1])
            except OSError:
                return
            self.sent += 1
            self.stop.wait(self.interval_s)


class TrickleTestBase:
    """The attack; subclasses choose the transport."""

    tls = False

    def setUp(self):
        super().setUp()
        extra = ["--load-timeout-s", str(LOAD_TIMEOUT_S)]
        if self.tls:
            self.pki = Pki(os.path.join(self.workdir, "pki"))
            cert, key = self.pki.issue("consumer", "IP:127.0.0.1")
            extra += tls_flags(cert, key, self.pki.ca_crt)
        self.d = self.start_daemon("consumer", BLOCK_LEN, extra=extra)
        self.e = self.engine(self.d, NUM_BLOCKS, BLOCK_LEN, name="consumer")
        self.listener = WireListener()
        self.addCleanup(self.listener.close)
        self.n = 0

    def accept(self):
        sock = self.listener.accept(timeout=10)
        if self.tls:
            cert, key = self.pki.issue(f"producer-{self.n}", "IP:127.0.0.1")
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.minimum_version = ssl.TLSVersion.TLSv1_3
            context.load_cert_chain(cert, key)
            context.load_verify_locations(self.pki.ca_crt)
            context.verify_mode = ssl.CERT_REQUIRED
            sock = context.wrap_socket(sock, server_side=True)
        peer = WirePeer(sock, self.listener.address, BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED,
                        timeout=10.0, dialer=False)
        self.addCleanup(peer.close)
        return peer

    def start_trickled_load(self):
        """A PD load of two blocks from the fake producer, whose payload then
        trickles. Returns (job, submit time, trickler)."""
        self.n += 1
        kv = f"trickle-{self.n}"
        keys = make_keys(kv, len(SLOTS))
        for s in range(NUM_BLOCKS):
            self.e.region.write_block(s, SENTINEL)
        submitted = time.monotonic()
        job = self.e.load(self.listener.address, kv, keys, SLOTS)
        peer = self.accept()
        peer.handshake()
        fetch = peer.recv_until("fetch").header
        self.assertEqual(fetch["block_indexes"], SLOTS)
        header = {"type": "block_data", "kv_request_id": kv, "round_seq": fetch["round_seq"],
                  "block_indexes": SLOTS}
        payload = b"\xee" * (BLOCK_LEN * len(SLOTS))
        frame = encode_frame(header, payload)
        head_len = len(frame) - len(payload)
        peer.send_raw(frame[:head_len + 1])  # the header and the payload's first byte
        trickler = Trickler(peer.sock, frame[head_len + 1:], TRICKLE_INTERVAL_S)
        self.addCleanup(trickler.join, 5)
        self.addCleanup(trickler.stop.set)
        trickler.start()
        return kv, job, submitted, trickler

    def slots_now(self):
        return [self.e.region.read_block(s) for s in SLOTS]

    def assert_quiet_after(self, trickler, at_result):
        """Loads in flight drop to 0, and the trickle keeps coming for a few
        more bytes without any of them landing in the slots."""
        self.assertEqual(self.d.status()["engines"][0]["loads_in_flight"], 0, dump(self.d.status()))
        sent = trickler.sent
        self.wait_until(lambda: trickler.sent >= sent + 2 or not trickler.is_alive(), timeout=10,
                        what="two more trickled bytes")
        self.e.poll_once(wait_ms=200)  # a second result would raise
        self.assertEqual(self.slots_now(), at_result, "bytes landed in the slots after the load's result")
        if self.tls:  # staged: no partial block ever reached a slot
            self.assertEqual(self.slots_now(), [SENTINEL] * len(SLOTS))
        self.assertEqual(self.d.status()["engines"][0]["loads_in_flight"], 0)
        self.assertTrue(self.d.running)

    def test_a_trickled_load_times_out_on_time(self):
        kv, job, submitted, trickler = self.start_trickled_load()
        res = self.e.wait_jobs([job], timeout=LOAD_TIMEOUT_S + 20)[job]
        elapsed = time.monotonic() - submitted
        at_result = self.slots_now()
        self.assertFalse(res["success"], dump(res))
        self.assertIn("load timed out", res.get("reason", ""), dump(res))
        self.assertGreaterEqual(elapsed, LOAD_TIMEOUT_S - 0.2, "failed before the load timeout")
        self.assertLess(elapsed, LOAD_TIMEOUT_S + LATE_MARGIN_S, f"the result came {elapsed:.1f} s after the load")
        self.assert_quiet_after(trickler, at_result)
        self.e.client.finish(kv)

    def test_finish_during_a_trickle_ends_the_load_at_once(self):
        kv, job, _, trickler = self.start_trickled_load()
        self.wait_until(lambda: trickler.sent >= 1, what="the trickle started")
        self.assertNotIn(job, self.e.results)
        started = time.monotonic()
        self.e.client.finish(kv)
        answered = time.monotonic() - started
        res = self.e.wait_jobs([job], timeout=20)[job]
        elapsed = time.monotonic() - started
        at_result = self.slots_now()
        self.assertFalse(res["success"], dump(res))
        self.assertLess(answered, 1.0, "finish was not answered at once")
        self.assertLess(elapsed, LATE_MARGIN_S, f"the load's result came {elapsed:.1f} s after finish")
        self.assert_quiet_after(trickler, at_result)


@unittest.skipUnless(OPENSSL, "the openssl CLI is needed to make test certificates")
class TlsTrickleTest(TrickleTestBase, DaemonTestCase):
    tls = True


class PlainTrickleTest(TrickleTestBase, DaemonTestCase):
    tls = False


if __name__ == "__main__":
    unittest.main()
