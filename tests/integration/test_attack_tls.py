"""TLS identity under attack, against real daemons (wire spec 1.1 section 5,
"With TLS"; docs/security.md "TLS identity").

The impostor of issue 11 item 1: nodes A and B run TLS with certificates
from one CA, and A has a ready session with B. M holds a valid certificate
from the same CA, but for another name, connects to A from an allowed
address and claims B's peer_id with a new epoch, then sends a lookup, a
fetch and a block_data in the same write. Before, the accepting side did not
check the certificate against the claimed peer_id, so M replaced A's session
with B and A's next load "from B" took M's bytes. Now A answers
`disconnect{reason:"authentication failed"}` and nothing else, counts and
logs the failure with what the certificate does not name, and its session
with B stays as it was; A's next load from B gets B's bytes.
"""

import os
import socket
import ssl
import unittest

from kvpeer_testing.harness import DaemonTestCase, dump
from test_tls import OPENSSL, Pki, tls_flags
from kvpeer_testing.wire_peer import WirePeer, encode_frame
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, make_keys

BLOCK_LEN = 4096
NUM_BLOCKS = 16


@unittest.skipUnless(OPENSSL, "the openssl CLI is needed to make test certificates")
class TlsImpostorTest(DaemonTestCase):

    def setUp(self):
        super().setUp()
        self.pki = Pki(os.path.join(self.workdir, "pki"))

    def tls_daemon(self, name):
        cert, key = self.pki.issue(name, "IP:127.0.0.1")
        return self.start_daemon(name, BLOCK_LEN, extra=tls_flags(cert, key, self.pki.ca_crt))

    def impostor(self, daemon, claimed_id, san):
        """A raw TLS wire peer with a CA-signed certificate for `san`."""
        cert, key = self.pki.issue("m-" + san.replace(":", "-").replace(",", "_"), san)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        context.load_verify_locations(self.pki.ca_crt)
        context.load_cert_chain(cert, key)
        host, _, port = daemon.listen.rpartition(":")
        raw = socket.create_connection((host, int(port)), timeout=10)
        tls = context.wrap_socket(raw, server_hostname=host)
        p = WirePeer(tls, claimed_id, BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, timeout=5.0)
        self.addCleanup(p.close)
        return p

    def ready_entry(self, daemon, peer_id):
        return [p for p in daemon.status()["peers"] if p["peer_id"] == peer_id and p["state"] == "ready"]

    def check_impostor_refused(self, san):
        a = self.tls_daemon("a")
        b = self.tls_daemon("b")
        producer = self.engine(b, NUM_BLOCKS, BLOCK_LEN, name="producer")
        keys = make_keys(self.id(), 4)
        producer.fill_and_publish(keys, range(4))
        consumer = self.engine(a, NUM_BLOCKS, BLOCK_LEN, name="consumer")
        report = consumer.fetch(b.listen, "before", keys, range(4), batch=4)
        consumer.client.finish("before")
        self.assertTrue(report.ok, dump(report.__dict__))
        session_before = self.ready_entry(a, b.node_id)
        self.assertEqual(len(session_before), 1, dump(a.status()["peers"]))
        a_published = make_keys(self.id() + "-a", 2)
        consumer.fill_and_publish(a_published, [8, 9])

        m = self.impostor(a, b.node_id, san)
        lookup = {"type": "lookup", "kv_request_id": "m", "keys": [k.hex() for k in a_published], "round_seq": 1}
        fetch = {"type": "fetch", "kv_request_id": "m", "keys": [k.hex() for k in a_published],
                 "block_indexes": [0, 1], "round_seq": 1}
        connect = m.make_connect()  # B's peer_id, a new epoch
        ack = {"type": "connect_ack", "peer_id": b.node_id, "wire_major": 1, "wire_minor": 1,
               "epoch": connect["epoch"]}
        m.send_raw(encode_frame(connect) + encode_frame(ack) + encode_frame(lookup) + encode_frame(fetch))
        self.assertEqual(m.expect_disconnect(), "authentication failed")
        types = [f.type for f in m.received]
        for never in ("connect_ack", "lookup_resp", "block_data", "transfer_done"):
            self.assertNotIn(never, types)

        self.wait_until(lambda: a.status()["counters"].get("auth_failures", 0) >= 1, what="A counts the impostor")
        self.wait_until(lambda: "does not name address 127.0.0.1" in a.log_text(), what="A logs what did not match")
        self.assertNotIn("restarted", a.log_text())
        # The real session is untouched: the same entry, ready since before.
        self.assertEqual(self.ready_entry(a, b.node_id), session_before)
        # A's next load from B is B's bytes, over the session it had.
        report = consumer.fetch(b.listen, "after", keys, range(4, 8), batch=4)
        consumer.client.finish("after")
        self.assertTrue(report.ok, dump(report.__dict__))
        self.assertEqual(consumer.verify(keys, range(4, 8)), [])
        self.assertEqual(self.ready_entry(a, b.node_id)[0]["since"], session_before[0]["since"])

    def test_a_certificate_for_an_outside_name_cannot_claim_a_member(self):
        self.check_impostor_refused("DNS:evil.example")

    def test_a_certificate_of_another_member_cannot_claim_a_third(self):
        # A real member's certificate (its own address and name), not B's.
        self.check_impostor_refused("IP:127.0.0.2,DNS:node-c.test")

    def test_the_certificate_of_the_claimed_host_is_accepted(self):
        """The check is not over-strict: a raw peer whose certificate names
        the claimed host completes the handshake."""
        a = self.tls_daemon("a")
        m = self.impostor(a, "127.0.0.1:20001", "IP:127.0.0.1")
        m.handshake()
        self.wait_until(lambda: self.ready_entry(a, "127.0.0.1:20001"), what="the peer is ready on A")
        self.assertEqual(a.status()["counters"].get("auth_failures", 0), 0)


if __name__ == "__main__":
    unittest.main()
