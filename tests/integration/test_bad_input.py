"""Bad input, each kind tried against a real daemon: malformed frames of
every class, strict-JSON violations, handshake mismatches, replayed
handshakes and wrong PSK proofs, oversized and deeply nested JSON, forged
block_data (unknown round, an index not requested, a duplicate index, a wrong
length, after the result), a slowloris peer, a control client sending
garbage or dribbling, a region file smaller than declared, block ids out of
range.

For every case the test checks that the daemon answers cleanly: a peer gets
`disconnect{reason}` naming the problem and the connection is closed; the
reason is in the daemon's log; a control client gets the documented error
code and its connection stays usable. And that it disturbs nothing else:
the victim daemon's session with a real neighbour stays ready (same `since`),
its engines are untouched, and a real transfer between the two daemons still
verifies byte for byte afterwards.

The raw peer is wire_peer.py (written from the wire spec, not from the
daemon's code).
"""

import json
import os
import random
import socket
import struct
import sys
import tempfile
import threading
import time
import unittest

from kvpeer_testing.harness import DaemonTestCase, dump, settled_status, snapshot
from kvpeer import Client, KvpeerError, ProtocolError, Region
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, block_content, make_keys
from kvpeer_testing.wire_peer import MAX_HEADER_LEN, MAX_PAYLOAD_LEN, WireListener, WirePeer, encode_frame, psk_proof

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
        deadline = time.monotonic() + timeout
        while text not in daemon.log_text():
            if time.monotonic() > deadline:
                self.fail(f"{daemon.name}'s log does not mention {text!r}")
            time.sleep(0.02)

    def rejected(self, peer, *needles, daemon=None, timeout=5.0):
        """The daemon's disconnect reason; it must contain every needle and
        be logged; the connection must be closed."""
        reason = peer.expect_disconnect(timeout=timeout)
        for n in needles:
            self.assertIn(n, reason)
        self.assertTrue(reason, "a disconnect must carry a reason")
        self.assert_logged(daemon or self.v, reason[:200])
        return reason


class MalformedFrameTest(BadInputBase):

    CASES = [
        # (name, frame bytes, words the reason must contain)
        ("bad magic", encode_frame({"type": "ping", "nonce": "1" * 32}, magic=b"KVP2"), ["magic"]),
        ("header_len 0", encode_frame(b"", header_len=0), ["header_len"]),
        ("header_len 1", encode_frame(b"{", header_len=1), ["header_len"]),
        ("header_len over 16 MiB", encode_frame(b"{}", header_len=MAX_HEADER_LEN + 1), ["header_len"]),
        ("payload_len over 64 MiB", encode_frame({"type": "block_data"}, payload_len=MAX_PAYLOAD_LEN + 1),
         ["payload_len"]),
        ("payload_len 2^64-1", encode_frame({"type": "block_data"}, payload_len=2 ** 64 - 1), ["payload_len"]),
        ("header not JSON", encode_frame(b"not json at all"), ["JSON"]),
        ("header truncated JSON", encode_frame(b'{"type":"ping","nonce":'), ["JSON"]),
        ("header a JSON array", encode_frame(b"[1,2,3]"), ["object"]),
        ("header a JSON number", encode_frame(b"42"), ["object"]),
        ("header a JSON string", encode_frame(b'"connect"'), ["object"]),
        ("header without type", encode_frame({"peer_id": "x"}), ["type"]),
        ("type not a string", encode_frame({"type": 5}), ["type"]),
        ("type null", encode_frame({"type": None}), ["type"]),
        ("header not UTF-8", encode_frame(b'{"type":"\xff\xfe"}'), ["JSON"]),
        ("NUL in header", encode_frame(b'{"type":"ping"\x00}'), ["JSON"]),
        ("known type with payload", encode_frame({"type": "ping", "nonce": "1" * 32}, b"abcd"), ["payload_len"]),
        ("deeply nested JSON", encode_frame(b'{"type":"ping","nonce":"' + b"1" * 32 + b'","x":' + b"[" * 30000
                                            + b"]" * 30000 + b"}"), ["JSON"]),
    ]

    def test_malformed_frames_before_handshake(self):
        """Each class as the first frame of a connection."""
        for name, frame, needles in self.CASES:
            with self.subTest(name):
                p = self.dial()
                # A real peer sends its connect first; reading the daemon's
                # first makes the check independent of its write timing.
                p.read_connect()
                p.send_raw(frame)
                self.rejected(p, *needles)
                self.assert_undisturbed()
        self.assert_undisturbed(transfer=True)

    def test_malformed_frames_after_handshake(self):
        """Each class on a ready session: the session dies, nothing else."""
        for name, frame, needles in self.CASES:
            with self.subTest(name):
                p = self.dial()
                p.handshake()
                p.send_raw(frame)
                self.rejected(p, *needles)
                self.assert_undisturbed()
        self.assert_undisturbed(transfer=True)

    def test_truncated_frame_then_close(self):
        """A peer that dies mid-frame (prefix only, half a header, a header
        promising a payload) is just a closed connection."""
        for cut in (3, 10, 16, 30):
            p = self.dial()
            p.handshake()
            frame = encode_frame({"type": "lookup", "kv_request_id": "t", "keys": ["ab"], "round_seq": 1})
            p.send_raw(frame[:cut])
            p.close(rst=(cut % 2 == 0))
        self.wait_until(lambda: all(p["peer_id"] == self.h.node_id or p["state"] != "ready"
                                    for p in self.v.status()["peers"]), what="fake sessions closed")
        self.assert_undisturbed(transfer=True)

    def test_strict_json_and_field_rules(self):
        """Well-framed messages that break the field rules (spec section 2)."""
        lk = {"type": "lookup", "kv_request_id": "x", "keys": ["ab"], "round_seq": 1}
        fetch = {"type": "fetch", "kv_request_id": "x", "keys": ["ab"], "block_indexes": [1], "round_seq": 1}
        cases = [
            ("odd hex key", dict(lk, keys=["abc"]), ["keys[0]"]),
            ("uppercase hex key", dict(lk, keys=["AB"]), ["keys[0]"]),
            ("empty key", dict(lk, keys=[""]), ["keys[0]"]),
            ("key over 4096 bytes", dict(lk, keys=["ab" * 4097]), ["keys[0]"]),
            ("round_seq negative", dict(lk, round_seq=-1), ["round_seq"]),
            ("round_seq 2^64", dict(lk, round_seq=2 ** 64), ["round_seq"]),
            ("round_seq bool", dict(lk, round_seq=True), ["round_seq"]),
            ("round_seq float", dict(lk, round_seq=1.5), ["round_seq"]),
            ("round_seq string", dict(lk, round_seq="1"), ["round_seq"]),
            ("kv_request_id empty", dict(lk, kv_request_id=""), ["kv_request_id"]),
            ("kv_request_id 4097 chars", dict(lk, kv_request_id="x" * 4097), ["kv_request_id"]),
            ("kv_request_id not a string", dict(lk, kv_request_id=7), ["kv_request_id"]),
            ("keys missing", {k: v for k, v in lk.items() if k != "keys"}, ["keys"]),
            ("keys not an array", dict(lk, keys="ab"), ["keys"]),
            ("65537 keys", dict(lk, keys=["ab"] * 65537), ["keys"]),
            ("fetch lengths differ", dict(fetch, block_indexes=[1, 2]), ["block_indexes"]),
            ("block index 2^31", dict(fetch, block_indexes=[2 ** 31]), ["block_indexes[0]"]),
            ("block index negative", dict(fetch, block_indexes=[-1]), ["block_indexes[0]"]),
            ("ping nonce short", {"type": "ping", "nonce": "ab"}, ["nonce"]),
            ("pong nonce missing", {"type": "pong"}, ["nonce"]),
            ("transfer_done success int", {"type": "transfer_done", "kv_request_id": "x", "success": 1,
                                           "round_seq": 1}, ["success"]),
            ("disconnect reason 4097", {"type": "disconnect", "reason": "r" * 4097}, ["reason"]),
            ("connect again after ready", None, ["connect after handshake"]),
            ("connect_ack with other content", {"type": "connect_ack", "peer_id": "127.0.0.1:1", "wire_major": 1,
                                                "wire_minor": 0, "epoch": "1" * 32}, ["connect_ack"]),
        ]
        for name, header, needles in cases:
            with self.subTest(name):
                p = self.dial()
                p.handshake()
                p.send(header if header is not None else p.make_connect())
                self.rejected(p, *needles)
                self.assert_undisturbed()
        self.assert_undisturbed(transfer=True)

    def test_unknown_types_are_skipped(self):
        """Forward compatibility: an unknown type (with or without payload)
        is ignored, not a reason to disconnect."""
        p = self.dial()
        p.handshake()
        p.send({"type": "from_the_future", "x": [1, 2]})
        p.send({"type": "bulk_from_the_future"}, os.urandom(100000))
        p.send({"type": "ping", "nonce": "3" * 32, "unknown_field": {"a": 1}})
        pong = p.recv_until("pong")
        self.assertEqual(pong.header["nonce"], "3" * 32)
        # A lookup still works on the same session.
        p.send({"type": "lookup", "kv_request_id": "fc", "keys": [self.keys[0].hex()], "round_seq": 7})
        resp = p.recv_until("lookup_resp")
        self.assertEqual((resp.header["hits"], resp.header["round_seq"]), ([True], 7))
        p.send({"type": "fetch", "kv_request_id": "fc", "keys": [], "block_indexes": [], "round_seq": 8})
        self.assert_undisturbed(transfer=True)


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


class ForgedBlockDataTest(DaemonTestCase):
    """A consumer engine on V loads from a fake producer (our listener);
    the fake answers the fetch with forged block_data. Each forgery must
    close the session with a reason, fail the load (exactly one result, with
    a reason), report the request failed, and leave every slot the forgery
    aimed at untouched."""

    def setUp(self):
        super().setUp()
        self.v = self.start_daemon("victim", BLOCK_LEN)
        self.h = self.start_daemon("neighbour", BLOCK_LEN)
        self.e = self.engine(self.v, NUM_BLOCKS, BLOCK_LEN, name="consumer")
        self.listener = WireListener()
        self.addCleanup(self.listener.close)
        self.n = 0

    def sentinel_slots(self):
        for s in range(NUM_BLOCKS):
            self.e.region.write_block(s, SENTINEL)

    def untouched(self, except_slots=()):
        return [s for s in range(NUM_BLOCKS)
                if s not in except_slots and self.e.region.read_block(s) != SENTINEL]

    def start_load(self, count=4, base=8):
        """A PD load of `count` keys into slots base.. from the fake; returns
        (job, keys, slots, fake peer, fetch header)."""
        self.n += 1
        kv = f"forged-{self.n}"
        keys = make_keys(kv, count)
        slots = list(range(base, base + count))
        self.sentinel_slots()
        job = self.e.load(self.listener.address, kv, keys, slots)
        peer = self.listener.accept_peer(BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, timeout=5.0)
        self.addCleanup(peer.close)
        peer.handshake()
        fetch = peer.recv_until("fetch").header
        self.assertEqual(fetch["kv_request_id"], kv)
        self.assertEqual(fetch["keys"], [k.hex() for k in keys])
        self.assertEqual(fetch["block_indexes"], slots)
        return job, keys, slots, peer, fetch

    def block_data(self, fetch, indexes, payload=None, **over):
        h = {"type": "block_data", "kv_request_id": fetch["kv_request_id"], "round_seq": fetch["round_seq"],
             "block_indexes": list(indexes)}
        h.update(over)
        if payload is None:
            payload = b"\xee" * (BLOCK_LEN * len(indexes))
        return h, payload

    def expect_failed(self, job, peer, needles, fetch):
        reason = peer.expect_disconnect()
        for n in needles:
            self.assertIn(n, reason)
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertFalse(res["success"], dump(res))
        self.assertTrue(res.get("reason"), f"a failure must carry a reason: {dump(res)}")
        self.e.poll_once(wait_ms=200)
        self.assertIn(fetch["kv_request_id"], self.e.failed_requests)
        self.wait_until(lambda: all(p["loads_in_flight"] == 0 for p in self.v.status()["peers"]),
                        what="no loads in flight", timeout=5)
        self.assertTrue(self.v.running)
        logged = self.v.log_text()
        self.assertIn(reason[:120], logged)
        return reason

    def test_forgeries(self):
        cases = [
            ("unknown round", lambda f: [self.block_data(f, [f["block_indexes"][0]],
                                                         round_seq=f["round_seq"] + 1000)],
             ["no load of this round"], ()),
            ("unknown kv_request_id", lambda f: [self.block_data(f, [f["block_indexes"][0]],
                                                                 kv_request_id="someone-else")],
             ["no load"], ()),
            ("index not requested", lambda f: [self.block_data(f, [f["block_indexes"][0] + 20])],
             ["not requested"], ()),
            ("one good index, one not requested", lambda f: [self.block_data(f, [f["block_indexes"][0], 0])],
             ["not requested"], ()),
            ("duplicate index in a frame", lambda f: [self.block_data(f, [f["block_indexes"][1]] * 2)],
             ["twice"], ()),
            ("payload one byte short", lambda f: [self.block_data(f, [f["block_indexes"][0]],
                                                                  payload=b"\xee" * (BLOCK_LEN - 1))],
             ["payload_len"], ()),
            ("payload one byte long", lambda f: [self.block_data(f, [f["block_indexes"][0]],
                                                                 payload=b"\xee" * (BLOCK_LEN + 1))],
             ["payload_len"], ()),
            ("payload of one block for two indexes", lambda f: [self.block_data(f, f["block_indexes"][:2],
                                                                                payload=b"\xee" * BLOCK_LEN)],
             ["payload_len"], ()),
            ("empty block_indexes", lambda f: [self.block_data(f, [], payload=b"")], ["block"], ()),
        ]
        for name, frames, needles, _ in cases:
            with self.subTest(name):
                job, keys, slots, peer, fetch = self.start_load()
                for header, payload in frames(fetch):
                    peer.send(header, payload)
                self.expect_failed(job, peer, needles, fetch)
                self.assertEqual(self.untouched(), [], f"{name}: a forged frame wrote into a slot")
        self.check_neighbours()

    def test_duplicate_index_across_frames(self):
        """A correct block, then the same index again: the second is a
        violation; only the correct bytes are in that slot."""
        job, keys, slots, peer, fetch = self.start_load()
        good = block_content(keys[0], BLOCK_LEN)
        peer.send(*self.block_data(fetch, [slots[0]], payload=good))
        peer.send(*self.block_data(fetch, [slots[0]]))
        self.expect_failed(job, peer, ["already received"], fetch)
        self.assertEqual(self.untouched(except_slots=[slots[0]]), [])
        self.assertEqual(self.e.region.read_block(slots[0]), good)
        self.check_neighbours()

    def test_block_data_after_the_result(self):
        """A complete, correct transfer; then more block_data for the
        finished round: a violation, and the delivered bytes stay."""
        job, keys, slots, peer, fetch = self.start_load()
        for k, s in zip(keys, slots):
            peer.send(*self.block_data(fetch, [s], payload=block_content(k, BLOCK_LEN)))
        peer.send({"type": "transfer_done", "kv_request_id": fetch["kv_request_id"], "success": True,
                   "round_seq": fetch["round_seq"]})
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertTrue(res["success"], dump(res))
        self.assertEqual(self.e.verify(keys, slots), [])
        peer.send(*self.block_data(fetch, [slots[1]]))
        reason = peer.expect_disconnect()
        self.assertIn("no load of this round", reason)
        self.assertEqual(self.e.verify(keys, slots), [], "a late frame overwrote a delivered slot")
        self.e.poll_once(wait_ms=300)  # a second result would raise here
        self.check_neighbours()

    def test_transfer_done_with_blocks_missing(self):
        """transfer_done{success:true} before every block arrived: the load
        fails (never reported successful with holes)."""
        job, keys, slots, peer, fetch = self.start_load()
        peer.send(*self.block_data(fetch, [slots[0]], payload=block_content(keys[0], BLOCK_LEN)))
        peer.send({"type": "transfer_done", "kv_request_id": fetch["kv_request_id"], "success": True,
                   "round_seq": fetch["round_seq"]})
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertFalse(res["success"], dump(res))
        self.assertTrue(res.get("reason"), dump(res))
        self.check_neighbours()

    def test_transfer_done_failure(self):
        job, keys, slots, peer, fetch = self.start_load()
        peer.send({"type": "transfer_done", "kv_request_id": fetch["kv_request_id"], "success": False,
                   "round_seq": fetch["round_seq"]})
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertFalse(res["success"], dump(res))
        self.assertTrue(res.get("reason"), dump(res))
        self.assertEqual(self.untouched(), [])

    def test_block_data_for_an_aborted_round(self):
        """finish while the fake holds the fetch: abort_fetch goes out and the
        load fails at once; block_data sent before our abort_ack is
        discarded silently; after abort_ack it is a violation. No slot is
        written either way."""
        job, keys, slots, peer, fetch = self.start_load()
        self.e.client.finish(fetch["kv_request_id"])
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertFalse(res["success"], dump(res))
        abort = peer.recv_until("abort_fetch").header
        self.assertEqual(abort["round_seq"], fetch["round_seq"])
        peer.send(*self.block_data(fetch, [slots[0]]))  # in flight before we saw the abort: discarded
        peer.send({"type": "abort_ack", "kv_request_id": fetch["kv_request_id"], "round_seq": fetch["round_seq"]})
        peer.send({"type": "ping", "nonce": "6" * 32})
        self.assertEqual(peer.recv_until("pong").header["nonce"], "6" * 32)  # still connected
        self.assertEqual(self.untouched(), [])
        peer.send(*self.block_data(fetch, [slots[1]]))
        self.assertIn("no load of this round", peer.expect_disconnect())
        self.assertEqual(self.untouched(), [])
        self.check_neighbours()

    def test_valid_fake_producer(self):
        """The fake is a correct producer when it wants to be (so the
        forgeries above fail for their own reason)."""
        job, keys, slots, peer, fetch = self.start_load(count=6)
        payload = b"".join(block_content(k, BLOCK_LEN) for k in keys[:3])
        peer.send(*self.block_data(fetch, slots[:3], payload=payload))
        payload = b"".join(block_content(k, BLOCK_LEN) for k in reversed(keys[3:]))
        peer.send(*self.block_data(fetch, list(reversed(slots[3:])), payload=payload))
        peer.send({"type": "transfer_done", "kv_request_id": fetch["kv_request_id"], "success": True,
                   "round_seq": fetch["round_seq"]})
        res = self.e.wait_jobs([job], timeout=10)[job]
        self.assertTrue(res["success"], dump(res))
        self.assertEqual(self.e.verify(keys, slots), [])
        self.assertEqual(self.untouched(except_slots=slots), [])

    def check_neighbours(self):
        """The victim still works with a real peer, both ways."""
        ph = self.engine(self.h, NUM_BLOCKS, BLOCK_LEN, name=f"producer-{self.n}")
        keys = make_keys(f"neighbour-{self.n}", 8)
        ph.fill_and_publish(keys, range(8))
        report = self.e.fetch(self.h.listen, f"neighbour-{self.n}", keys, range(40, 48))
        self.assertTrue(report.ok, dump(report.__dict__))
        self.e.client.finish(f"neighbour-{self.n}")


class OversizedAndSlowTest(BadInputBase):

    def test_header_of_16_mib_is_accepted_one_more_byte_is_not(self):
        """A legal 16 MiB header (a lookup padded with an unknown field) is
        answered; header_len 16 MiB + 1 is refused from the prefix alone."""
        p = self.dial()
        p.handshake()
        head = {"type": "lookup", "kv_request_id": "big", "keys": [self.keys[0].hex()], "round_seq": 1, "pad": ""}
        base = len(json.dumps(head, separators=(",", ":")))
        head["pad"] = "a" * (MAX_HEADER_LEN - base)
        raw = json.dumps(head, separators=(",", ":")).encode()
        self.assertEqual(len(raw), MAX_HEADER_LEN)
        p.send_raw(encode_frame(raw))
        resp = p.recv_until("lookup_resp", timeout=20)
        self.assertEqual(resp.header["hits"], [True])
        p.send({"type": "fetch", "kv_request_id": "big", "keys": [], "block_indexes": [], "round_seq": 2})
        q = self.dial()
        q.handshake()
        # The prefix alone condemns it; the daemon may close before reading
        # more, so only the prefix and a little of the header go out.
        q.send_raw(encode_frame(raw[:1000], header_len=MAX_HEADER_LEN + 1))
        self.rejected(q, "header_len")
        self.assert_undisturbed(transfer=True)

    def test_prefix_promising_16_mib_then_silence(self):
        """A prefix announcing a 16 MiB header before ready is refused from
        the prefix at once (wire 1.1 section 2: 64 KiB before ready)."""
        p = self.dial()
        p.read_connect()
        p.send_raw(struct.pack(">4sIQ", b"KVP1", MAX_HEADER_LEN, 0) + b'{"type":"connect"')
        reason = self.rejected(p, "header_len", timeout=5)
        self.assertIn("at most 65536 before the connection is ready", reason)
        self.assert_undisturbed(transfer=True)

    def test_slowloris_before_handshake(self):
        """A connect dribbled one byte a second ends at the handshake timeout."""
        p = self.dial()
        p.read_connect()
        started = time.monotonic()
        sent, closed = p.send_slowly(encode_frame(p.make_connect()), 1.0, 30, HANDSHAKE_TIMEOUT_S + 5)
        self.assertTrue(closed, f"still open after {sent} bytes")
        self.assertLess(time.monotonic() - started, HANDSHAKE_TIMEOUT_S + 3)
        self.assertIn("handshake", p.expect_disconnect())
        self.assert_undisturbed()

    def test_slowloris_after_handshake(self):
        """A ready peer dribbling a frame one byte a second: the daemon keeps
        serving everyone else meanwhile, and closes the dribbler once nothing
        complete has arrived for the liveness timeout (10 s)."""
        p = self.dial()
        p.handshake()
        frame = encode_frame({"type": "lookup", "kv_request_id": "slow", "keys": ["ab" * 300], "round_seq": 1})
        outcome = {}

        def dribble():
            outcome["result"] = p.send_slowly(frame, 1.0, len(frame), 16.0)
            outcome["at"] = time.monotonic()

        started = time.monotonic()
        t = threading.Thread(target=dribble, daemon=True)
        t.start()
        transfers = 0
        while t.is_alive() and transfers < 100:
            self.assert_undisturbed(transfer=True)
            transfers += 1
            time.sleep(0.5)
        t.join(20)
        sent, closed = outcome["result"]
        self.assertTrue(closed, f"the dribbler is still connected after {sent} bytes")
        self.assertLess(outcome["at"] - started, 14.0)
        self.assertGreaterEqual(transfers, 3)
        reason = p.expect_disconnect()
        self.assertIn("silent", reason)
        self.assert_undisturbed(transfer=True)


class ControlInputTest(BadInputBase):

    def raw(self):
        c = Client(self.v.socket_path, timeout=10)
        self.engines.append(c)
        return c

    def test_control_garbage(self):
        """Binary garbage, invalid UTF-8, NULs, deep nesting, huge numbers,
        empty lines, pipelined by the hundred: every line answered with
        bad_request, the connection stays usable, the node unchanged."""
        before = snapshot(settled_status(self.v))
        c = self.raw()
        rnd = random.Random(1234)
        lines = []
        for _ in range(200):
            n = rnd.randrange(1, 300)
            lines.append(bytes(rnd.choice([b for b in range(256) if b != 10]) for _ in range(n)))
        lines += [
            b"\xff\xfe\xfd",
            b'{"id": 1, "op": "sta\xfftus"}',
            b'{"id": 2, "op": "status\x00"}',
            b"\x00" * 100,
            b"[" * 100000 + b"]" * 100000,
            b'{"id": 3, "op": "status", "x": ' + b"{\"a\":" * 50000 + b"1" + b"}" * 50000 + b"}",
            b'{"id": 4, "op": "poll", "wait_ms": 1e400}',
            b'{"id": 5, "op": "hello", "client": "x", "block_len": 18446744073709551617, '
            b'"config_fingerprint": "kvpeer-sim-model", "hash_seed": "kvpeer-sim-seed"}',
            b'{"id": 6, "op": "hello", "op": "status"}',
            b"{}",
            b"   ",
            b"\r",
        ]
        payload = b"".join(line + b"\n" for line in lines)
        writer = threading.Thread(target=lambda: c._sock.sendall(payload), daemon=True)
        writer.start()
        answers = []
        for _ in range(len(lines)):
            # Raw lines, parsed strictly: a response must be RFC 8259 JSON
            # (no NaN/Infinity), whatever the request was.
            raw = self.read_raw_line(c)
            try:
                answers.append(json.loads(raw, parse_constant=self.no_constants))
            except ValueError as e:
                self.fail(f"the daemon answered with invalid JSON: {raw[:300]!r} ({e})")
        writer.join(10)
        for line, r in zip(lines, answers):
            if line == b'{"id": 6, "op": "hello", "op": "status"}':
                continue  # duplicate names: JSON leaves the choice to the parser; answered either way
            self.assertIs(r.get("ok"), False, f"{line[:80]!r} -> {dump(r)}")
            self.assertIn(r["error"]["code"], ("bad_request", "unknown_op"), f"{line[:80]!r} -> {dump(r)}")
            self.assertTrue(r["error"]["message"], dump(r))
        self.assertEqual(c.status()["node_id"], self.v.node_id)  # same connection still works
        self.assertEqual(snapshot(self.v.status()), before)
        self.assert_undisturbed(transfer=True)

    def test_echoed_id_is_strict_json(self):
        """`id` may be any JSON value and is echoed; the echo must still be
        JSON (RFC 8259 has no Infinity/NaN), or a strict client loses the
        connection's framing. 1e999999 is a valid JSON number text."""
        c = self.raw()
        for text in (b"1e999999", b"-1e999999", b"1.5e300", b"18446744073709551616", b'"x"', b"[1,{}]", b"null",
                     b"[1e999]", b'{"a": [2, {"b": -1e999}]}', b'"\xc3\xa9" '):
            with self.subTest(id=text):
                c.send_line(b'{"id": ' + text + b', "op": "status"}')
                raw = self.read_raw_line(c)
                try:
                    r = json.loads(raw, parse_constant=self.no_constants)
                except ValueError as e:
                    self.fail(f"id {text!r} echoed as invalid JSON: {raw[:120]!r} ({e})")
                self.assertIn("id", r)
        self.assertEqual(c.status()["node_id"], self.v.node_id)

    @staticmethod
    def no_constants(name):
        raise ValueError(f"{name} is not JSON")

    @staticmethod
    def read_raw_line(c):
        c._sock.settimeout(20)
        while b"\n" not in c._buf:
            chunk = c._sock.recv(1 << 20)
            if not chunk:
                raise ProtocolError("connection closed by the daemon")
            c._buf += chunk
        nl = c._buf.index(b"\n")
        raw = bytes(c._buf[:nl])
        del c._buf[:nl + 1]
        return raw

    def test_control_client_closing_mid_line(self):
        for n in range(20):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(self.v.socket_path)
            s.sendall(b'{"id": 1, "op": "hel' + b"x" * n)
            if n % 2:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        self.assert_undisturbed(transfer=True)

    def test_control_slowloris(self):
        """A control client dribbling a request does not hold up engines."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(s.close)
        s.connect(self.v.socket_path)
        line = b'{"id": 9, "op": "status"}\n'
        stop = threading.Event()

        def dribble():
            for b in line:
                if stop.is_set():
                    return
                s.sendall(bytes([b]))
                time.sleep(0.15)

        t = threading.Thread(target=dribble, daemon=True)
        t.start()
        for _ in range(3):
            started = time.monotonic()
            self.assert_undisturbed(transfer=True)
            self.assertLess(time.monotonic() - started, 3.0)
        t.join(10)
        s.settimeout(5)
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = s.recv(1 << 16)
            self.assertTrue(chunk, "the daemon closed the slow client")
            answer += chunk
        self.assertEqual(json.loads(answer)["id"], 9)

    def test_region_smaller_than_declared(self):
        """A region file (path or fd) smaller than offset + num_blocks *
        block_len, or a size that overflows, is bad_request; nothing changes."""
        before = snapshot(settled_status(self.v))
        c = self.raw()
        c.hello("small-region", BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED)
        with tempfile.NamedTemporaryFile(dir="/dev/shm", prefix="kvpeer-short-") as f:
            f.truncate(4 * BLOCK_LEN - 1)
            f.flush()
            for num, offset in ((4, None), (3, BLOCK_LEN), (2 ** 48, None), (2 ** 63, None), (1, 2 ** 64 - 1),
                                (2 ** 32 + 1, None)):
                with self.assertRaises(KvpeerError) as cm:
                    c.register_region(f.name, num, offset=offset)
                self.assertEqual(cm.exception.code, "bad_request", f"{num} {offset}: {cm.exception}")
            fd = os.memfd_create("kvpeer-short", os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, 4 * BLOCK_LEN - 1)
                with self.assertRaises(KvpeerError) as cm:
                    c.register_region_fd(fd, 4)
                self.assertEqual(cm.exception.code, "bad_request")
            finally:
                os.close(fd)
        self.assertEqual(snapshot(self.v.status())["engines"][:1], before["engines"][:1])
        # The refusals did not use up the session's region.
        with Region.memfd(4, BLOCK_LEN) as region:
            c.register_region_fd(region.fd, 4)
        self.assert_undisturbed(transfer=True)

    def test_region_shrunk_after_registration(self):
        """The engine truncates its region file after registering it (a
        buggy or hostile engine). Serving from it or loading into it must
        not crash the daemon; the load ends with one failure result; the
        peer connection, other engines and peers carry on."""
        shrinker = self.engine(self.v, 16, BLOCK_LEN, name="shrinker", region="shm")
        keys = make_keys("shrunk", 8)
        shrinker.fill_and_publish(keys, range(8))
        os.ftruncate(shrinker.region.fd, 0)
        # Producer side: the keys are still published (the index cannot
        # know), so the probe hits; the round then fails instead of the
        # connection when the daemon finds the source gone.
        self.assertEqual(self.consumer.probe(self.v.listen, "shrunk", keys), ["hit"] * 8)
        j = self.consumer.load(self.v.listen, "shrunk", keys, range(40, 48))
        res = self.consumer.wait_jobs([j], timeout=15)[j]
        self.assertFalse(res["success"], dump(res))
        self.assertIn("peer reported failure", res.get("reason", ""))
        self.consumer.client.finish("shrunk")
        # Consumer side: a truncated destination region.
        sink = self.engine(self.h, 16, BLOCK_LEN, name="sink", region="shm")
        os.ftruncate(sink.region.fd, 0)
        self.assertEqual(sink.probe(self.v.listen, "into-shrunk", self.keys[:4]), ["hit"] * 4)
        j = sink.load(self.v.listen, "into-shrunk", self.keys[:4], range(8, 12))
        res = sink.wait_jobs([j], timeout=15)[j]
        self.assertFalse(res["success"], dump(res))
        self.assertIn("no longer mapped", res.get("reason", ""))
        sink.client.finish("into-shrunk")
        self.assertTrue(self.h.running, "kvpeerd died receiving into a truncated region")
        self.assertTrue(self.v.running, "kvpeerd died serving from a truncated region\n" + self.v.log_tail(40))
        # Same sessions as before (assert_undisturbed checks), nothing pinned.
        self.assert_undisturbed(transfer=True)
        with self.v.client() as c:
            pins = [line for line in c.metrics().splitlines() if line.startswith("kvpeer_pins ")]
        self.assertEqual(pins, ["kvpeer_pins 0"])

    def test_region_flipped_while_hashed(self):
        """Checksums (on by default) make the daemons read engine memory in
        user space: the producer hashes a source block before sending it and
        on a sealed publish, the consumer hashes each block after it lands.
        Engines here flip their region files between 0 bytes and full size
        as fast as they can while that happens, on both sides. Every read of
        a vanished page must be caught (daemon/node/guarded_read.h): no daemon
        dies of SIGBUS, every load ends with exactly one result and a
        reason, and the two nodes transfer verified bytes afterwards. (The
        session itself may be replaced: a source page vanishing while the
        kernel sends it fails the write, which closes the connection;
        docs/architecture.md, "Failure handling in one place".)"""
        flipper = self.engine(self.v, 16, BLOCK_LEN, name="flip-source", region="shm")
        keys = make_keys("flip", 16)
        flipper.fill_and_publish(keys, range(16), seal=True)
        sink = self.engine(self.h, 16, BLOCK_LEN, name="flip-sink", region="shm")
        stop = threading.Event()

        def flip(region):
            while not stop.is_set():
                os.ftruncate(region.fd, 0)
                os.ftruncate(region.fd, 16 * BLOCK_LEN)

        threads = [threading.Thread(target=flip, args=(e.region,), daemon=True) for e in (flipper, sink)]
        for t in threads:
            t.start()
        outcomes = {"succeeded": 0, "failed": 0}
        reasons = set()
        try:
            deadline = time.monotonic() + 6.0
            n = 0
            while time.monotonic() < deadline and n < 400:
                n += 1
                for engine, peer_keys, kv in ((self.consumer, keys, f"from-flip-{n}"),
                                              (sink, self.keys, f"into-flip-{n}")):
                    if engine.probe(self.v.listen, kv, peer_keys[:4]) != ["hit"] * 4:
                        engine.client.finish(kv)
                        continue
                    job = engine.load(self.v.listen, kv, peer_keys[:4], range(4, 8))
                    res = engine.wait_jobs([job], timeout=15)[job]
                    outcomes["succeeded" if res["success"] else "failed"] += 1
                    if not res["success"]:
                        self.assertTrue(res.get("reason"), dump(res))
                        reasons.add(res["reason"].split(":")[0][:60])
                    engine.client.finish(kv)
                flipper.client.publish(keys, range(16), seal=True)  # sealing reads the flipping region too
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=5)
        sys.stderr.write(f"\nflipped regions: {n} rounds, loads {outcomes}, reasons {sorted(reasons)}\n")
        self.assertTrue(self.v.running, "kvpeerd died reading a flipping source region\n" + self.v.log_tail(40))
        self.assertTrue(self.h.running, "kvpeerd died hashing into a flipping destination region")
        self.assertGreater(sum(outcomes.values()), 0, "no load ran: nothing was tested")

        def transferred():
            try:
                self.real_transfer()  # every key, bytes verified
                return True
            except AssertionError:  # the first try may meet a session being replaced
                return False
        self.wait_until(transferred, 20, "a verified transfer after the flipping", interval=0.5)

    def test_block_ids_out_of_range(self):
        before = snapshot(settled_status(self.v))
        c = self.raw()
        c.hello("ranges", BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED)
        with Region.memfd(8, BLOCK_LEN) as region:
            c.register_region_fd(region.fd, 8)
            key = make_keys("range", 1)
            for bad in (8, 9, 2 ** 31, 2 ** 32, 2 ** 63, 2 ** 64 - 1):
                for op, args in (("publish", dict(keys=[key[0].hex()], block_ids=[bad])),
                                 ("load", dict(job_id=1, peer=self.h.listen, kv_request_id="r", keys=[key[0].hex()],
                                               block_ids=[bad])),
                                 ("store", dict(job_id=2, kv_request_id="r", keys=[key[0].hex()], block_ids=[bad]))):
                    with self.subTest(op=op, id=bad):
                        with self.assertRaises(KvpeerError) as cm:
                            c.request(op, **args)
                        self.assertEqual(cm.exception.code, "out_of_range", cm.exception.message)
            for bad in (-1, 2 ** 64, 1.5, "3", True, None, [1]):
                for op, args in (("publish", dict(keys=[key[0].hex()], block_ids=[bad])),
                                 ("store", dict(job_id=2, kv_request_id="r", keys=[key[0].hex()], block_ids=[bad]))):
                    with self.subTest(op=op, id=bad):
                        with self.assertRaises(KvpeerError) as cm:
                            c.request(op, **args)
                        self.assertIn(cm.exception.code, ("bad_request", "out_of_range"), cm.exception.message)
            self.assertEqual(c.publish(key, [7]), 1)  # the session still works
            c.unpublish(key)
        self.assertEqual(snapshot(self.v.status())["peers"], before["peers"])
        self.assert_undisturbed(transfer=True)


if __name__ == "__main__":
    unittest.main()
