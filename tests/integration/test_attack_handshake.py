"""The wire 1.1 handshake under attack, against real daemons (wire spec 1.1
sections 2, 4, 5; docs/security.md "The PSK relay").

* The relay of issue 10 item 1: daemons A and B share a PSK; M, a raw peer
  without the key, dials A claiming to be B and dials B claiming to be A,
  forwarding A's nonce and epoch to B and B's to A, and tries to forward
  whatever proof it can get. Under 1.0 an acceptor proved itself at once, so
  M could relay; under 1.1 an acceptor proves nothing before the dialer has,
  so M never has a proof to forward: it is never ready on either, A's
  published blocks are never served to it, it writes no slot of A's engine,
  and both A and B count and log an authentication failure from M's address.
* A 1.0 peer (wire_minor 0) is refused with a PSK, naming wire_minor;
  without a PSK it still completes a load.
* A pre-ready prefix announcing a 16 MiB header is refused at once.
* A key file of mode 0602 is refused by --check-config.
"""

import os
import signal
import struct
import subprocess
import time
import unittest

from kvpeer_testing.harness import DaemonTestCase, dump, kvpeerd_path
from kvpeer_testing.wire_peer import MAX_HEADER_LEN, WirePeer, encode_frame
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, make_keys

BLOCK_LEN = 4096
NUM_BLOCKS = 16


def counter(status, name):
    return status["counters"].get(name, 0)


class AttackBase(DaemonTestCase):

    def key_file(self, name, key, mode=0o600):
        path = os.path.join(self.workdir, name)
        with open(path, "wb") as f:
            f.write(key + b"\n")
        os.chmod(path, mode)
        return path

    def raw(self, daemon, claimed_id, **kw):
        p = WirePeer.dial(daemon.listen, claimed_id, BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED,
                          timeout=5.0, **kw)
        self.addCleanup(p.close)
        return p

    def wait_logged(self, daemon, *texts, timeout=5.0):
        self.wait_until(lambda: all(t in daemon.log_text() for t in texts), timeout,
                        f"{daemon.name}'s log having {texts!r}", interval=0.02)


class RelayTest(AttackBase):

    def test_m_cannot_relay_between_a_and_b(self):
        psk = self.key_file("psk", os.urandom(24).hex().encode())
        a = self.start_daemon("a", BLOCK_LEN, extra=["--psk-file", psk])
        b = self.start_daemon("b", BLOCK_LEN, extra=["--psk-file", psk])
        producer = self.engine(a, NUM_BLOCKS, BLOCK_LEN, name="producer")
        keys = make_keys(self.id(), 4)
        producer.fill_and_publish(keys, range(4))
        before = [producer.region.read_block(slot) for slot in range(NUM_BLOCKS)]

        to_a = self.raw(a, b.node_id)  # M -> A, claiming to be B
        to_b = self.raw(b, a.node_id)  # M -> B, claiming to be A
        a_connect = to_a.read_connect()
        b_connect = to_b.read_connect()
        # Forward each end's own connect fields to the other.
        to_b.send_connect(nonce=a_connect["nonce"], epoch=a_connect["epoch"])
        to_a.send_connect(nonce=b_connect["nonce"], epoch=b_connect["epoch"])
        # Give both acceptors time to answer: under 1.0 they would now send
        # their proofs, which M would forward. Under 1.1 they send nothing.
        for p in (to_a, to_b):
            with self.assertRaises(Exception):
                p.recv_until("connect_ack", timeout=1.0)
            self.assertNotIn("connect_ack", [f.type for f in p.received])
        # M's best effort: an ack with a forged proof (none to relay), and in
        # the same write a lookup, a fetch and a block_data aimed at slot 0.
        lookup = {"type": "lookup", "kv_request_id": "m", "keys": [k.hex() for k in keys], "round_seq": 1}
        fetch = {"type": "fetch", "kv_request_id": "m", "keys": [k.hex() for k in keys],
                 "block_indexes": [0, 1, 2, 3], "round_seq": 1}
        for p, claimed in ((to_a, b_connect), (to_b, a_connect)):
            ack = {"type": "connect_ack", "peer_id": p.peer_id, "wire_major": 1, "wire_minor": 1,
                   "epoch": claimed["epoch"], "proof": "0" * 64}
            p.send_raw(encode_frame(ack) + encode_frame(lookup) + encode_frame(fetch))
            self.assertEqual(p.expect_disconnect(), "authentication failed")
            types = [f.type for f in p.received]
            for never in ("connect_ack", "lookup_resp", "block_data", "transfer_done"):
                self.assertNotIn(never, types)
        for d in (a, b):
            self.wait_until(lambda d=d: counter(d.status(), "auth_failures") >= 1, what=f"{d.name} counts it")
            self.wait_logged(d, "authentication failed", "127.0.0.1")
            peers = d.status()["peers"]
            self.assertFalse([p for p in peers if p["state"] == "ready"], dump(peers))
        # A's engine: the published blocks are intact and still served to a real peer.
        self.assertEqual([producer.region.read_block(slot) for slot in range(NUM_BLOCKS)], before)
        # (A lookup right after B refused M may meet B's backoff towards the
        # address M claimed; the real session follows within the backoff cap.)
        consumer = self.engine(b, NUM_BLOCKS, BLOCK_LEN, name="consumer")
        deadline = time.monotonic() + 8
        attempt = 0
        while True:
            attempt += 1
            report = consumer.fetch(a.listen, f"real-{attempt}", keys, range(4, 8), batch=4)
            consumer.client.finish(f"real-{attempt}")
            if report.ok or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        self.assertTrue(report.ok, dump(report.__dict__))
        self.assertEqual(consumer.verify(keys, range(4, 8)), [])


class VersionAndLimitsTest(AttackBase):

    def test_wire_1_0_peer_refused_with_psk_naming_wire_minor(self):
        psk_bytes = os.urandom(24).hex().encode()
        a = self.start_daemon("a", BLOCK_LEN, extra=["--psk-file", self.key_file("psk", psk_bytes)])
        p = self.raw(a, "127.0.0.1:20001", psk=psk_bytes, wire_minor=0)
        p.send_connect()
        p.read_connect()
        reason = p.expect_disconnect()
        self.assertIn("wire_minor", reason)
        self.assertNotIn("connect_ack", [f.type for f in p.received])

    def test_wire_1_0_peer_without_psk_completes_a_load(self):
        a = self.start_daemon("a", BLOCK_LEN)
        producer = self.engine(a, NUM_BLOCKS, BLOCK_LEN, name="producer")
        keys = make_keys(self.id(), 2)
        producer.fill_and_publish(keys, [3, 5])
        p = self.raw(a, "127.0.0.1:20002", wire_minor=0)
        p.handshake()
        self.assertEqual(p.their_connect["wire_minor"], 1)
        p.send({"type": "lookup", "kv_request_id": "old", "keys": [k.hex() for k in keys], "round_seq": 1})
        self.assertEqual(p.recv_until("lookup_resp").header["hits"], [True, True])
        p.send({"type": "fetch", "kv_request_id": "old", "keys": [k.hex() for k in keys],
                "block_indexes": [0, 1], "round_seq": 1})
        got = {}
        while True:
            f = p.recv_until(("block_data", "transfer_done"))
            if f.type == "transfer_done":
                self.assertTrue(f.header["success"], f.header)
                break
            for i, index in enumerate(f.header["block_indexes"]):
                got[index] = f.payload[i * BLOCK_LEN:(i + 1) * BLOCK_LEN]
        self.assertEqual(got[0], producer.region.read_block(3))
        self.assertEqual(got[1], producer.region.read_block(5))

    def test_pre_ready_16_mib_header_refused_from_the_prefix(self):
        a = self.start_daemon("a", BLOCK_LEN)
        p = self.raw(a, "127.0.0.1:20003")
        p.read_connect()
        start = time.monotonic()
        p.send_raw(struct.pack(">4sIQ", b"KVP1", MAX_HEADER_LEN, 0) + b'{"type":"connect"')
        reason = p.expect_disconnect(timeout=3.0)
        self.assertLess(time.monotonic() - start, 2.0)
        self.assertIn("header_len: must be at most 65536 before the connection is ready", reason)
        # The control socket answers promptly meanwhile.
        t0 = time.monotonic()
        a.status()
        self.assertLess(time.monotonic() - t0, 1.0)

    def test_key_file_mode_0602_refused_by_check_config(self):
        path = self.key_file("loose", os.urandom(24).hex().encode(), mode=0o602)
        r = subprocess.run([str(kvpeerd_path()), "--check-config", "--psk-file", path],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("mode 0602", r.stderr)

    def test_key_file_made_0602_is_refused_on_sighup_reload(self):
        path = self.key_file("psk", os.urandom(24).hex().encode())
        a = self.start_daemon("a", BLOCK_LEN, extra=["--psk-file", path])
        os.chmod(path, 0o602)
        a.proc.send_signal(signal.SIGHUP)
        self.wait_logged(a, "reload: the settings are invalid", "mode 0602")
        self.wait_until(lambda: counter(a.status(), "config_reload_failures") >= 1, what="reload failure counted")


if __name__ == "__main__":
    unittest.main()
