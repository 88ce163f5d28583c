"""Attacks on a peer connection's write path, against real daemons (wire spec
section 4 step 8, write-progress liveness; section 6, "A torn source";
docs/security.md, "Torn sources and stalled readers").

* A peer that fetches (store supply and published blocks) and then stops
  reading: within the liveness timeout the producer closes the connection,
  the store job gets exactly one result (a failure) and every pin goes.
* A producer engine that truncates its region while a large round is being
  written, plain TCP and TLS: the frame on the wire is finished (with
  zeros), the round ends transfer_done{success:false}, the daemon lives and
  the same connection then serves another round byte-exact.
* A consumer engine that truncates its destination region while a TLS load
  arrives: the consumer daemon lives, the load fails, the session serves the
  next load.

The peers are raw (wire_peer.py), wrapped in Python's ssl for TLS, so the
test decides exactly when the truncation happens: while the producer's
writer is blocked in the middle of the stream because the raw peer has not
read yet.
"""

import os
import socket
import ssl
import time
import unittest

from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, block_content, make_keys
from test_tls import OPENSSL, Pki, tls_flags
from kvpeer_testing.wire_peer import WireListener, WirePeer, encode_frame

BLOCK_LEN = 256 * 1024
NUM_BLOCKS = 64          # 16 MiB a region: far more than the socket buffers hold
LIVENESS_S = 10          # wire spec section 4 step 8
SMALL_RCVBUF = 64 * 1024  # the raw peer's receive buffer (no autotuning)


def pins(daemon):
    with daemon.client() as c:
        return [line for line in c.metrics().splitlines() if line.startswith("kvpeer_pins ")]


class WritePathBase(DaemonTestCase):

    def setUp(self):
        super().setUp()
        self.fake_port = 21000

    def fake_id(self):
        self.fake_port += 1
        return f"127.0.0.1:{self.fake_port}"

    def raw_socket(self, daemon):
        host, _, port = daemon.listen.rpartition(":")
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_RCVBUF)
        s.settimeout(10)
        s.connect((host, int(port)))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    def raw_peer(self, daemon, tls_context=None):
        s = self.raw_socket(daemon)
        if tls_context is not None:
            s = tls_context.wrap_socket(s, server_hostname="127.0.0.1")
        p = WirePeer(s, self.fake_id(), BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, timeout=10.0)
        self.addCleanup(p.close)
        p.handshake()
        return p

    def lookup(self, p, kv, keys, seq):
        p.send({"type": "lookup", "kv_request_id": kv, "keys": [k.hex() for k in keys], "round_seq": seq})
        resp = p.recv_until("lookup_resp").header
        self.assertEqual(resp["round_seq"], seq)
        return resp["hits"]

    def fetch(self, p, kv, keys, indexes, seq):
        p.send({"type": "fetch", "kv_request_id": kv, "keys": [k.hex() for k in keys],
                "block_indexes": list(indexes), "round_seq": seq})

    def read_round(self, p, kv, seq, timeout=30.0):
        """Reads the round's block_data frames up to its transfer_done;
        returns ({index: payload bytes}, success)."""
        blocks = {}
        deadline = time.monotonic() + timeout
        while True:
            f = p.recv_until(("block_data", "transfer_done"), timeout=max(0.1, deadline - time.monotonic()))
            h = f.header
            self.assertEqual((h["kv_request_id"], h["round_seq"]), (kv, seq), dump(h))
            if f.type == "transfer_done":
                return blocks, h["success"]
            # Well formed: the payload is exactly its blocks.
            self.assertEqual(len(f.payload), BLOCK_LEN * len(h["block_indexes"]), dump(h))
            for n, index in enumerate(h["block_indexes"]):
                self.assertNotIn(index, blocks, f"block {index} sent twice")
                blocks[index] = f.payload[n * BLOCK_LEN:(n + 1) * BLOCK_LEN]

    def assert_alive(self, *daemons):
        for d in daemons:
            self.assertTrue(d.running, f"{d.name} died\n" + d.log_tail(40))
            d.status()  # and still answers


# -- write-progress liveness --------------------------------------------------

class StalledReaderTest(WritePathBase):

    def test_peer_that_stops_reading_is_dead_within_the_liveness_timeout(self):
        """Store supply and published blocks fetched, then never read: the
        writer blocks, the producer closes the connection within the
        liveness timeout although the peer keeps pinging, and its work ends:
        the store job's one failure result, no pin left."""
        p_daemon = self.start_daemon("producer", BLOCK_LEN)
        producer = self.engine(p_daemon, NUM_BLOCKS * 2, BLOCK_LEN, name="producer")
        published = make_keys("stall-published", 8)
        producer.fill_and_publish(published, range(NUM_BLOCKS, NUM_BLOCKS + 8))
        p = self.raw_peer(p_daemon)
        self.assertEqual(self.lookup(p, "stall-sym", published, 1), [True] * 8)
        stored = make_keys("stall-stored", NUM_BLOCKS)
        job = producer.supply("stall-pd", stored, range(NUM_BLOCKS))
        self.fetch(p, "stall-pd", stored, range(NUM_BLOCKS), 2)
        self.fetch(p, "stall-sym", published, range(8), 1)
        started = time.monotonic()
        # From here on nothing is read; pings keep the receive side alive.
        closed_at = None
        while time.monotonic() - started < LIVENESS_S + 8:
            try:
                p.send({"type": "ping", "nonce": "ab" * 16})
            except OSError:
                pass
            producer.poll_once(wait_ms=500)
            if job in producer.results:
                closed_at = time.monotonic()
                break
        self.assertIsNotNone(closed_at, "the stalled peer still held its store job\n" + p_daemon.log_tail(20))
        elapsed = closed_at - started
        self.assertGreater(elapsed, LIVENESS_S - 2, "closed before the liveness timeout: not for stalling")
        self.assertLess(elapsed, LIVENESS_S + 5, f"closed {elapsed:.1f} s after the writer stalled")
        self.assertFalse(producer.results[job]["success"], dump(producer.results[job]))
        self.assertIn("it stopped reading", p_daemon.log_text())
        # Exactly one result: a second would raise in poll_once.
        for _ in range(4):
            producer.poll_once(wait_ms=250)
        self.wait_until(lambda: pins(p_daemon) == ["kvpeer_pins 0"], timeout=5, what="every pin released")
        self.assertFalse([x for x in p_daemon.status()["peers"] if x["peer_id"] == p.peer_id
                          and x["state"] == "ready"])
        self.assert_alive(p_daemon)


# -- a torn source -----------------------------------------------------------

class TornSourceMixin:
    """A producer daemon with an engine that will truncate its region and a
    good engine; a raw consumer fetches from the first, the engine
    truncates while the producer's writer is blocked mid-stream, then the
    consumer reads on and fetches from the good engine."""

    tls = False

    def setUp(self):
        super().setUp()
        self.context = None
        extra = []
        if self.tls:
            pki = Pki(os.path.join(self.workdir, "pki"))
            extra = tls_flags(*pki.issue("producer"), pki.ca_crt)
            cert, key = pki.issue("raw")
            self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            self.context.check_hostname = False
            self.context.load_verify_locations(pki.ca_crt)
            self.context.load_cert_chain(cert, key)
        self.p_daemon = self.start_daemon("producer", BLOCK_LEN, extra=extra)

    def test_truncated_source_fails_only_its_round(self):
        shrinker = self.engine(self.p_daemon, NUM_BLOCKS, BLOCK_LEN, name="shrinker")
        good = self.engine(self.p_daemon, 8, BLOCK_LEN, name="good")
        torn_keys = make_keys("torn", NUM_BLOCKS)
        shrinker.fill_and_publish(torn_keys, range(NUM_BLOCKS))
        good_keys = make_keys("good", 8)
        good.fill_and_publish(good_keys, range(8))
        p = self.raw_peer(self.p_daemon, self.context)
        self.assertEqual(self.lookup(p, "torn", torn_keys, 1), [True] * NUM_BLOCKS)
        self.fetch(p, "torn", torn_keys, range(NUM_BLOCKS), 1)
        first = p.recv_until("block_data")
        self.assertEqual(first.payload[:BLOCK_LEN], block_content(torn_keys[0], BLOCK_LEN))
        time.sleep(0.5)  # the writer fills the socket buffers and blocks mid-frame
        os.ftruncate(shrinker.region.fd, 0)
        try:
            blocks, success = self.read_round(p, "torn", 1)
        except Exception:
            print(self.p_daemon.log_tail(30))
            raise
        self.assertFalse(success, "a round whose source was torn reported success")
        self.assertLess(len(blocks), NUM_BLOCKS - 1, "the truncation came too late to test anything")
        if not self.tls:
            # The writer blocks inside a frame's writev, so the tear is seen
            # there. (Under TLS the frame's current bounce chunk was read
            # before the truncation, so the tear may instead be found when
            # the next frame is made; tests/daemon covers the bounce tear.)
            self.assertIn("sent as zeros", self.p_daemon.log_text())
        # The connection goes on: the next round is byte-exact.
        self.assertEqual(self.lookup(p, "good", good_keys, 2), [True] * 8)
        self.fetch(p, "good", good_keys, range(8), 2)
        blocks, success = self.read_round(p, "good", 2)
        self.assertTrue(success)
        self.assertEqual(sorted(blocks), list(range(8)))
        for i, key in enumerate(good_keys):
            self.assertEqual(blocks[i], block_content(key, BLOCK_LEN), f"block {i}")
        self.assert_alive(self.p_daemon)
        p.close()
        self.wait_until(lambda: pins(self.p_daemon) == ["kvpeer_pins 0"], timeout=10, what="every pin released")


class TornSourcePlainTest(TornSourceMixin, WritePathBase):
    tls = False


@unittest.skipUnless(OPENSSL, "the openssl CLI is needed to make test certificates")
class TornSourceTlsTest(TornSourceMixin, WritePathBase):
    tls = True


# -- a torn destination under TLS ----------------------------------------------

@unittest.skipUnless(OPENSSL, "the openssl CLI is needed to make test certificates")
class TornDestinationTlsTest(WritePathBase):

    def test_truncated_destination_fails_the_load_not_the_daemon(self):
        pki = Pki(os.path.join(self.workdir, "pki"))
        consumer_daemon = self.start_daemon("consumer", BLOCK_LEN,
                                            extra=tls_flags(*pki.issue("consumer"), pki.ca_crt))
        sink = self.engine(consumer_daemon, 16, BLOCK_LEN, name="sink")
        other = self.engine(consumer_daemon, 16, BLOCK_LEN, name="other")
        server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        server.load_cert_chain(*pki.issue("raw"))
        server.load_verify_locations(pki.ca_crt)
        server.verify_mode = ssl.CERT_REQUIRED
        listener = WireListener()
        self.addCleanup(listener.close)
        keys = make_keys("into-torn", 16)
        job = sink.load(listener.address, "into-torn", keys, range(16))  # a PD load: no probe
        s = server.wrap_socket(listener.accept(timeout=10), server_side=True)
        p = WirePeer(s, listener.address, BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, timeout=10.0)
        self.addCleanup(p.close)
        p.handshake()
        fetch = p.recv_until("fetch").header
        payload = b"".join(block_content(k, BLOCK_LEN) for k in keys)
        header = {"type": "block_data", "kv_request_id": "into-torn", "round_seq": fetch["round_seq"],
                  "block_indexes": fetch["block_indexes"]}
        frame = encode_frame(header, payload)
        half = len(frame) // 2
        p.send_raw(frame[:half])
        time.sleep(0.3)
        os.ftruncate(sink.region.fd, 0)
        p.send_raw(frame[half:])
        p.send({"type": "transfer_done", "kv_request_id": "into-torn", "success": True,
                "round_seq": fetch["round_seq"]})
        res = sink.wait_jobs([job], timeout=15)[job]
        self.assertFalse(res["success"], dump(res))
        self.assert_alive(consumer_daemon)
        # The same session carries the next load, byte-exact.
        keys2 = make_keys("after-torn", 4)
        job2 = other.load(listener.address, "after-torn", keys2, range(4))
        fetch2 = p.recv_until("fetch").header
        self.assertEqual(fetch2["kv_request_id"], "after-torn")
        p.send({"type": "block_data", "kv_request_id": "after-torn", "round_seq": fetch2["round_seq"],
                "block_indexes": fetch2["block_indexes"]},
               b"".join(block_content(k, BLOCK_LEN) for k in keys2))
        p.send({"type": "transfer_done", "kv_request_id": "after-torn", "success": True,
                "round_seq": fetch2["round_seq"]})
        res2 = other.wait_jobs([job2], timeout=15)[job2]
        self.assertTrue(res2["success"], dump(res2))
        self.assertEqual(other.verify(keys2, range(4)), [])
        self.assert_alive(consumer_daemon)


if __name__ == "__main__":
    unittest.main()
