"""Bad handshakes from a peer, each kind tried against a real daemon:
mismatches, the wrong order, a reflected or replayed connect, a handshake
timeout, wrong PSK proofs and replayed handshakes.

For every case the test checks that the daemon answers cleanly and disturbs
nothing else (bad_input_case.BadInputBase). The raw peer is
kvpeer_testing.wire_peer (written from the wire spec, not from the daemon's
code).
"""

import os
import tempfile
import time
import unittest

from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED
from kvpeer_testing.wire_peer import MAX_PAYLOAD_LEN, WirePeer, encode_frame, psk_proof
from bad_input_case import BLOCK_LEN, HANDSHAKE_TIMEOUT_S, BadInputBase


class HandshakeTest(BadInputBase):

    def test_handshake_mismatches(self):
        """Each connect field the receiver checks, named in the reason (the
        hash seed by name only)."""
        cases = [
            ("wire_major", dict(wire_major=2), ["wire_major", "1", "2"]),
            ("block_len", dict(block_len=4096), ["block_len", "65536", "4096"]),
            ("config_fingerprint", dict(config_fingerprint="another-model"),
             ["config_fingerprint", "another-model"]),
            ("hash_seed", dict(hash_seed="another-secret-seed"), ["hash_seed"]),
            ("epoch all zeros", dict(epoch="0" * 32), ["epoch"]),
            ("epoch uppercase", dict(epoch="A" * 32), ["epoch"]),
            ("epoch short", dict(epoch="ab"), ["epoch"]),
            ("nonce bad", dict(nonce="xyz"), ["nonce"]),
            ("peer_id empty", dict(peer_id=""), ["peer_id"]),
            ("peer_id 4097", dict(peer_id="p" * 4097), ["peer_id"]),
            ("block_len 0", dict(block_len=0), ["block_len"]),
            ("block_len bool", dict(block_len=True), ["block_len"]),
            ("block_len over 64 MiB", dict(block_len=MAX_PAYLOAD_LEN + 1), ["block_len"]),
            ("wire_minor missing", dict(wire_minor=WirePeer.DROP), ["wire_minor"]),
        ]
        for name, overrides, needles in cases:
            with self.subTest(name):
                p = self.dial()
                p.read_connect()
                p.send_connect(**overrides)
                reason = self.rejected(p, *needles)
                if name == "hash_seed":
                    self.assertNotIn("another-secret-seed", reason)
                    self.assertNotIn(DEFAULT_HASH_SEED, reason)
                    self.assertNotIn("another-secret-seed", self.v.log_text())
                self.assert_undisturbed()
        self.assert_undisturbed(transfer=True)

    def test_wrong_order(self):
        cases = [
            ("role message before the handshake",
             {"type": "lookup", "kv_request_id": "x", "keys": ["ab"], "round_seq": 1}, ["before handshake"]),
            # Wire 1.1 section 2: no payload before ready, refused from the prefix.
            ("block_data before the handshake",
             {"type": "block_data", "kv_request_id": "x", "round_seq": 1, "block_indexes": [0]},
             ["payload_len", "before the connection is ready"]),
            ("unknown type before the handshake", {"type": "from_the_future"}, ["before handshake"]),
            ("connect_ack before connect",
             {"type": "connect_ack", "peer_id": "127.0.0.1:1", "wire_major": 1, "wire_minor": 0,
              "epoch": "1" * 32}, ["connect_ack before connect"]),
        ]
        for name, header, needles in cases:
            with self.subTest(name):
                p = self.dial()
                p.read_connect()
                payload = bytes(BLOCK_LEN) if header["type"] == "block_data" else b""
                p.send(header, payload)
                self.rejected(p, *needles)
        # Our connect, then block_data before our ack: still before the handshake.
        p = self.dial()
        p.read_connect()
        p.send_connect()
        p.send({"type": "block_data", "kv_request_id": "x", "round_seq": 1, "block_indexes": [0]}, bytes(BLOCK_LEN))
        self.rejected(p, "before the connection is ready")
        self.assert_undisturbed(transfer=True)

    def test_reflected_connect(self):
        """The daemon's own connect sent back to it is refused (a connection
        to itself or a reflection)."""
        p = self.dial()
        theirs = p.read_connect()
        q = self.dial()
        q.read_connect()
        q.send(dict(theirs))
        self.rejected(q, "epoch")
        p.close()
        self.assert_undisturbed(transfer=True)

    def test_replayed_connect_is_a_duplicate(self):
        """Without PSK: a second connection replaying a ready session's
        connect (same peer_id, same epoch) is closed as a duplicate; the
        first session keeps working."""
        p = self.dial()
        p.handshake()
        q = WirePeer.dial(self.v.listen, p.peer_id, BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED,
                          epoch=p.epoch, timeout=5.0)
        self.addCleanup(q.close)
        q.nonce = p.nonce
        q.read_connect()
        q.send_raw(p.sent_bytes[0])  # the very bytes of p's connect
        q.send(q.make_ack())
        self.rejected(q, "duplicate")
        p.send({"type": "ping", "nonce": "4" * 32})
        self.assertEqual(p.recv_until("pong").header["nonce"], "4" * 32)
        self.assert_undisturbed(transfer=True)

    def test_handshake_timeout(self):
        """A connect and then silence: closed at the handshake timeout."""
        p = self.dial()
        p.read_connect()
        p.send_connect()
        started = time.monotonic()
        reason = self.rejected(p, "handshake", timeout=HANDSHAKE_TIMEOUT_S + 5)
        elapsed = time.monotonic() - started
        self.assertIn("timed out", reason)
        self.assertGreater(elapsed, HANDSHAKE_TIMEOUT_S - 0.5)
        self.assertLess(elapsed, HANDSHAKE_TIMEOUT_S + 2)
        self.assert_undisturbed()


class PskTest(BadInputBase):
    """A victim and a neighbour sharing a PSK."""

    PSK = b"kvpeer-test-psk-0123456789abcdef-0123456789abcdef"

    def setUp(self):
        fd, self.psk_path = tempfile.mkstemp(prefix="kvpeer-psk-")
        os.write(fd, self.PSK + b"\n")
        os.close(fd)
        os.chmod(self.psk_path, 0o600)
        self.addCleanup(os.unlink, self.psk_path)
        self.extra_victim_flags = ("--psk-file", self.psk_path)
        super().setUp()

    def dial_psk(self, psk=None):
        return self.dial(psk=self.PSK if psk is None else psk)

    def test_correct_proof_is_mutual(self):
        p = self.dial_psk()
        p.handshake()  # checks the daemon's proof too
        p.send({"type": "ping", "nonce": "5" * 32})
        self.assertEqual(p.recv_until("pong").header["nonce"], "5" * 32)

    def test_wrong_proofs(self):
        def proof_for(p, **kw):
            their = p.their_connect
            args = dict(psk=self.PSK, nonce=their["nonce"], epoch=their["epoch"], prover_id=p.peer_id)
            args.update(kw)
            return psk_proof(args["psk"], args.get("role", p.role), args["nonce"], args.get("own", p.nonce),
                             args["prover_id"], args.get("verifier", their["peer_id"]))

        cases = [
            ("no proof", lambda p: {k: v for k, v in p.make_ack().items() if k != "proof"}),
            ("wrong key", lambda p: p.make_ack(proof=proof_for(p, psk=b"x" * 48))),
            ("over our own nonce", lambda p: p.make_ack(proof=proof_for(p, nonce=p.nonce))),
            ("in the acceptor's role", lambda p: p.make_ack(proof=proof_for(p, role="acceptor"))),
            ("nonces swapped", lambda p: p.make_ack(proof=proof_for(p, nonce=p.nonce, own=p.their_connect["nonce"]))),
            ("for another verifier", lambda p: p.make_ack(proof=proof_for(p, verifier="127.0.0.1:1"))),
            ("for another prover", lambda p: p.make_ack(proof=proof_for(p, prover_id="127.0.0.1:1"))),
            ("uppercase hex", lambda p: p.make_ack(proof=proof_for(p).upper())),
            ("truncated", lambda p: p.make_ack(proof=proof_for(p)[:-2])),
            ("not hex", lambda p: p.make_ack(proof="zz" * 32)),
            ("empty", lambda p: p.make_ack(proof="")),
            ("not a string", lambda p: p.make_ack(proof=12345)),
        ]
        for name, make_ack in cases:
            with self.subTest(name):
                p = self.dial_psk()
                p.send_connect()
                p.read_connect()
                # The bad ack and, in the same write, a lookup: nothing after
                # a failed authentication may be processed.
                ack = encode_frame(make_ack(p))
                lookup = encode_frame({"type": "lookup", "kv_request_id": "auth", "keys": [self.keys[0].hex()],
                                       "round_seq": 1})
                p.send_raw(ack + lookup)
                reason = p.expect_disconnect()
                if name == "not a string":
                    self.assertIn("proof", reason)
                else:
                    self.assertEqual(reason, "authentication failed")
                self.assertNotIn("lookup_resp", [f.type for f in p.received])
                self.assert_logged(self.v, reason)
                self.assert_undisturbed()
        self.assert_undisturbed(transfer=True)

    def test_no_psk_peer(self):
        """A peer without the key (no proof at all, and it cannot check the
        daemon's) is refused."""
        p = self.dial(psk=None)
        p.send_connect()
        p.read_connect()
        p.send(p.make_ack())
        self.assertEqual(p.expect_disconnect(), "authentication failed")
        self.assert_undisturbed()

    def test_replayed_handshake(self):
        """The bytes of a successful authenticated handshake, replayed on a
        new connection after the first closed: the daemon's fresh nonce
        makes the recorded proof worthless."""
        p = self.dial_psk()
        p.handshake()
        recorded = b"".join(p.sent_bytes)
        p.close()
        self.wait_until(lambda: all(x["state"] != "ready" for x in self.v.status()["peers"]
                                    if x["peer_id"] == p.peer_id), what="recorded session closed")
        q = WirePeer.dial(self.v.listen, p.peer_id, BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED,
                          timeout=5.0)
        self.addCleanup(q.close)
        q.read_connect()
        self.assertNotEqual(q.their_connect["nonce"], p.their_connect["nonce"], "the daemon reused a nonce")
        q.send_raw(recorded)
        self.assertEqual(q.expect_disconnect(), "authentication failed")
        self.assert_logged(self.v, "authentication failed")
        self.assert_undisturbed(transfer=True)


if __name__ == "__main__":
    unittest.main()
