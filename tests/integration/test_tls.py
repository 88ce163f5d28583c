"""TLS for peer connections (--tls-cert, --tls-key, --tls-ca) against real
daemons, with certificates made at test time by the openssl CLI.

* Two nodes with certificates from one CA reach `ready` and move blocks
  byte-exact (symmetric and disaggregated loads).
* Mutual verification: a node whose certificate comes from another CA is
  refused by the other side, and a node refuses a peer certificate that
  does not name the host it dialled; a TLS client without a certificate,
  one limited to TLS 1.2, and a plain-TCP peer are all refused; the
  failures name the reason on the refusing side and nothing reaches the
  session.
* Configuration: the three flags go together (exit 2 otherwise), and a key
  that does not match its certificate stops the daemon at start (exit 1).
"""

import os
import shutil
import socket
import ssl
import subprocess
import unittest

from kvpeer_testing.harness import DaemonTestCase, Daemon, dump, kvpeerd_path
from kvpeer.simulator import make_keys

BLOCK_LEN = 64 * 1024
OPENSSL = shutil.which("openssl")


def run_openssl(*args, cwd):
    subprocess.run([OPENSSL, *args], cwd=cwd, check=True, capture_output=True, timeout=60)


class Pki:
    """A throwaway CA in `directory`, issuing EC P-256 node certificates."""

    def __init__(self, directory, name="ca"):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.ca_key = os.path.join(directory, f"{name}.key")
        self.ca_crt = os.path.join(directory, f"{name}.crt")
        run_openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", self.ca_key, "-out", self.ca_crt, "-days", "2", "-subj", f"/CN=kvpeer test {name}",
                    cwd=directory)

    def issue(self, name, san="IP:127.0.0.1"):
        """Returns (cert, key) paths of a certificate for subjectAltName `san`."""
        key = os.path.join(self.dir, f"{name}.key")
        csr = os.path.join(self.dir, f"{name}.csr")
        crt = os.path.join(self.dir, f"{name}.crt")
        ext = os.path.join(self.dir, f"{name}.ext")
        with open(ext, "w") as f:
            f.write(f"subjectAltName={san}\nextendedKeyUsage=serverAuth,clientAuth\n")
        run_openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", key,
                    "-out", csr, "-subj", f"/CN={name}", cwd=self.dir)
        run_openssl("x509", "-req", "-in", csr, "-CA", self.ca_crt, "-CAkey", self.ca_key, "-CAcreateserial",
                    "-out", crt, "-days", "2", "-extfile", ext, cwd=self.dir)
        os.chmod(key, 0o600)
        return crt, key


def tls_flags(cert, key, ca):
    return ["--tls-cert", cert, "--tls-key", key, "--tls-ca", ca]


@unittest.skipUnless(OPENSSL, "the openssl CLI is needed to make test certificates")
class TlsTest(DaemonTestCase):

    def setUp(self):
        super().setUp()
        self.pki = Pki(os.path.join(self.workdir, "pki"))

    def tls_daemon(self, name, pki=None, san="IP:127.0.0.1", extra=()):
        pki = pki or self.pki
        cert, key = pki.issue(name, san)
        return self.start_daemon(name, BLOCK_LEN, extra=tls_flags(cert, key, pki.ca_crt) + list(extra))

    def test_transfer_over_tls(self):
        a = self.tls_daemon("a")
        b = self.tls_daemon("b")
        self.assertIn("TLS 1.3", a.log_text())
        self.assertEqual(a.status()["config"]["tls-ca"], self.pki.ca_crt)
        count = 64
        producer = self.engine(a, count, BLOCK_LEN, name="producer")
        consumer = self.engine(b, count, BLOCK_LEN, name="consumer")
        keys = make_keys("tls", count)
        producer.fill_and_publish(keys, range(count))
        report = consumer.fetch(a.listen, "tls-req", keys, [count - 1 - i for i in range(count)], batch=16)
        self.assertEqual((report.hits, report.jobs_failed, report.bad_blocks), (count, 0, []), report.reasons)
        consumer.client.finish("tls-req")
        # Disaggregated prefill over the same TLS session.
        pd_keys = make_keys("tls-pd", 4)
        producer.supply("pd-req", pd_keys, range(4))
        job = consumer.load(a.listen, "pd-req", pd_keys, range(4))
        self.assertTrue(consumer.wait_jobs([job])[job]["success"])
        self.assertEqual(consumer.verify(pd_keys, range(4)), [])
        peer = {p["peer_id"]: p for p in b.status()["peers"]}[a.listen]
        self.assertEqual(peer["state"], "ready")
        # The payload went through TLS: records add bytes on the wire.
        self.assertGreater(peer["bytes_received"], (count + 4) * BLOCK_LEN)

    def assert_refused(self, dialler, target, words):
        with self.client(dialler) as c:
            err = self.assertApiError("peer_unavailable", c.connect, target.listen)
        peer = {p["peer_id"]: p for p in dialler.status()["peers"]}[target.listen]
        self.assertEqual(peer["state"], "backoff", dump(peer))
        self.assertNotIn("ready", [p["state"] for p in target.status()["peers"]])
        text = err.message + " " + peer["last_error"]
        self.assertTrue(any(w in text for w in words), f"{text!r} names none of {words}")
        return err

    def test_certificate_from_another_ca_is_refused(self):
        a = self.tls_daemon("a")
        other = Pki(os.path.join(self.workdir, "pki2"), name="other-ca")
        # b trusts only its own CA: it refuses a's certificate, and a refuses b's.
        b = self.tls_daemon("b", pki=other)
        self.assert_refused(a, b, ["certificate verify failed", "unknown ca", "TLS handshake"])
        self.wait_until(lambda: "TLS handshake" in b.log_text() or "certificate" in b.log_text(),
                        what="b logs the refusal")

    def test_certificate_not_naming_the_dialled_host_is_refused(self):
        a = self.tls_daemon("a")
        b = self.tls_daemon("b", san="IP:127.0.0.2,DNS:node-b.invalid")
        err = self.assert_refused(a, b, ["certificate verify failed"])
        self.assertIn("TLS handshake with", err.message + str(a.status()["peers"]))

    def test_plain_peer_and_plain_node_are_refused(self):
        a = self.tls_daemon("a")
        plain = self.start_daemon("plain", BLOCK_LEN)
        self.assert_refused(plain, a, ["peer closed", "connection", "handshake", "reset"])
        self.assert_refused(a, plain, ["TLS handshake", "wrong version", "packet length", "record"])

    def raw_tls(self, daemon, context):
        host, _, port = daemon.listen.rpartition(":")
        raw = socket.create_connection((host, int(port)), timeout=10)
        return context.wrap_socket(raw, server_hostname=None)

    def test_client_without_certificate_is_refused(self):
        a = self.tls_daemon("a")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.load_verify_locations(self.pki.ca_crt)
        with self.assertRaises((ssl.SSLError, ConnectionError, OSError)):
            with self.raw_tls(a, context) as s:
                # TLS 1.3 checks the client certificate after the client's
                # handshake: the refusal arrives on the first read.
                s.settimeout(10)
                if not s.recv(65536):
                    raise ConnectionError("closed")
        self.wait_until(lambda: "TLS handshake failed" in a.log_text(), what="a logs the refusal")
        self.assertEqual([p for p in a.status()["peers"] if p["state"] == "ready"], [])

    def test_tls_12_is_refused(self):
        a = self.tls_daemon("a")
        cert, key = self.pki.issue("c")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.load_verify_locations(self.pki.ca_crt)
        context.load_cert_chain(cert, key)
        context.maximum_version = ssl.TLSVersion.TLSv1_2
        with self.assertRaises((ssl.SSLError, ConnectionError, OSError)):
            with self.raw_tls(a, context):
                pass
        self.wait_until(lambda: "TLS handshake failed" in a.log_text(), what="a logs the refusal")

    def test_a_tls_client_with_a_good_certificate_speaks_the_wire_protocol(self):
        """The framing over TLS is the plain protocol: a Python TLS client
        with a CA-signed certificate gets the daemon's connect."""
        a = self.tls_daemon("a")
        cert, key = self.pki.issue("c")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.load_verify_locations(self.pki.ca_crt)
        context.load_cert_chain(cert, key)
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        host, _, port = a.listen.rpartition(":")
        raw = socket.create_connection((host, int(port)), timeout=10)
        with context.wrap_socket(raw, server_hostname=host) as s:
            self.assertEqual(s.version(), "TLSv1.3")
            data = b""
            while len(data) < 16:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
            self.assertEqual(data[:4], b"KVP1")
            self.assertIn(b'"type":"connect"', data)

    def test_flags_go_together_and_the_key_must_match(self):
        cert, key = self.pki.issue("a")
        r = subprocess.run([str(kvpeerd_path()), "--check-config", "--tls-cert", cert, "--tls-key", key],
                           capture_output=True, text=True, timeout=30)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("give all three or none (missing: tls-ca)", r.stderr)
        _, other_key = self.pki.issue("b")
        d = Daemon(self.workdir, "mismatch", ["--block-len", str(BLOCK_LEN)] + tls_flags(cert, other_key,
                                                                                         self.pki.ca_crt))
        with self.assertRaises(RuntimeError):
            d.start(timeout=10)
        self.assertEqual(d.proc.wait(timeout=10), 1)
        self.assertIn("is not the private key of the certificate", d.log_text())


if __name__ == "__main__":
    unittest.main()
