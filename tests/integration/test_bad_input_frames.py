"""Bad frames from a peer, each kind tried against a real daemon: malformed
frames of every class, strict-JSON violations, unknown types, oversized and
deeply nested JSON, a slowloris peer.

For every case the test checks that the daemon answers cleanly and disturbs
nothing else (bad_input_case.BadInputBase). The raw peer is
kvpeer_testing.wire_peer (written from the wire spec, not from the daemon's
code).
"""

import json
import os
import struct
import threading
import time
import unittest

from kvpeer_testing.wire_peer import MAX_HEADER_LEN, MAX_PAYLOAD_LEN, encode_frame
from bad_input_case import HANDSHAKE_TIMEOUT_S, BadInputBase


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


if __name__ == "__main__":
    unittest.main()
