"""Security against real daemons: PSK mutual authentication (wire spec
section 5), the peer CIDR allowlist, and the control socket's uid/gid
allowlist and group (control-api.md section 4).

* PSK: matching keys reach `ready` on both nodes; mismatched keys (or a key
  on one side only) fail the handshake: both daemons log "authentication
  failed", count it (`auth_failures` for the side that found a bad or
  missing proof, `auth_rejected_by_peer` for the side told so), the dialler
  ends in backoff with that `last_error`, and the key never appears in
  status or the logs.
* CIDR: with only 10.0.0.0/8 allowed, a connection from 127.0.0.1 is closed
  before the daemon reads or writes a byte (no connect frame comes back),
  logged and counted; 127.0.0.0/8 lets the same peer in.
* Control socket (needs root, to run clients as other users): the socket
  file gets the configured group and mode 0660; a user that can open it but
  is in neither allowlist is disconnected before any request is read,
  logged and counted; an allowed uid, an allowed primary gid and the
  daemon's own uid are served.
"""

import json
import os
import socket
import stat
import subprocess
import sys
import unittest

from kvpeer_testing.harness import DaemonTestCase, dump
from kvpeer_testing.wire_peer import WirePeer
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, make_keys

BLOCK_LEN = 4096


def counter(status, name):
    return status["counters"].get(name, 0)


class PskTest(DaemonTestCase):

    def key_file(self, name, key):
        path = os.path.join(self.workdir, name)
        with open(path, "wb") as f:
            f.write(key + b"\n")
        os.chmod(path, 0o600)
        return path

    def test_matching_keys_authenticate_and_transfer(self):
        psk = self.key_file("psk", os.urandom(24).hex().encode())
        a = self.start_daemon("a", BLOCK_LEN, extra=["--psk-file", psk])
        b = self.start_daemon("b", BLOCK_LEN, extra=["--psk-file", psk])
        with self.client(a) as c:
            c.connect(b.listen)
        for d, other in ((a, b), (b, a)):
            peers = {p["peer_id"]: p for p in d.status()["peers"]}
            self.assertEqual(peers[other.node_id]["state"], "ready", dump(peers))
        # Work flows over the authenticated session.
        producer = self.engine(b, 4, BLOCK_LEN, name="producer")
        consumer = self.engine(a, 4, BLOCK_LEN, name="consumer")
        keys = make_keys("psk-ok", 4)
        producer.fill_and_publish(keys, range(4))
        report = consumer.fetch(b.listen, "psk-req", keys, list(range(4)))
        self.assertEqual((report.hits, report.jobs_failed, report.bad_blocks), (4, 0, []), report.reasons)
        for d in (a, b):
            st = d.status()
            self.assertEqual(counter(st, "auth_failures") + counter(st, "auth_rejected_by_peer"), 0)
            self.assertEqual(st["config"]["psk-file"], psk)

    def assert_auth_failed(self, a, b, secrets):
        """a dialled b and the handshake must fail on both sides."""
        with self.client(a) as c:
            err = self.assertApiError("peer_unavailable", c.connect, b.listen)
        self.assertIn("authentication failed", err.message)
        for d in (a, b):
            self.wait_until(lambda d=d: "authentication failed" in d.log_text(), what=f"{d.name} logs the failure")
        peer = {p["peer_id"]: p for p in a.status()["peers"]}[b.listen]
        self.assertEqual(peer["state"], "backoff", dump(peer))
        self.assertIn("authentication failed", peer["last_error"])
        sa, sb = a.status(), b.status()
        for st in (sa, sb):
            self.assertGreaterEqual(counter(st, "auth_failures") + counter(st, "auth_rejected_by_peer"), 1,
                                    dump(st["counters"]))
        self.assertGreaterEqual(counter(sa, "auth_failures") + counter(sb, "auth_failures"), 1)
        for d in (a, b):
            for secret in secrets:
                self.assertNotIn(secret.decode(), d.log_text())
                self.assertNotIn(secret.decode(), json.dumps(d.status()))
        return err

    def test_mismatched_keys_fail_on_both_sides(self):
        k1, k2 = os.urandom(24).hex().encode(), os.urandom(24).hex().encode()
        a = self.start_daemon("a", BLOCK_LEN, extra=["--psk-file", self.key_file("k1", k1)])
        b = self.start_daemon("b", BLOCK_LEN, extra=["--psk-file", self.key_file("k2", k2)])
        self.assert_auth_failed(a, b, [k1, k2])
        # Nothing reached ready, so no session is listed as ready on b either.
        self.assertNotIn("ready", [p["state"] for p in b.status()["peers"]])

    def test_key_on_one_side_only_fails(self):
        k1 = os.urandom(24).hex().encode()
        a = self.start_daemon("a", BLOCK_LEN, extra=["--psk-file", self.key_file("k1", k1)])
        b = self.start_daemon("b", BLOCK_LEN)
        self.assert_auth_failed(a, b, [k1])
        # b, without a key, accepted a's proof but a refused b's missing one.
        self.assertGreaterEqual(counter(a.status(), "auth_failures"), 1)

    def test_wire_peer_without_proof_is_refused_before_any_work(self):
        """A raw peer that completes the handshake without a proof gets
        disconnect{authentication failed} and its lookup is never answered."""
        k1 = os.urandom(24).hex().encode()
        a = self.start_daemon("a", BLOCK_LEN, extra=["--psk-file", self.key_file("k1", k1)])
        with WirePeer.dial(a.listen, "127.0.0.1:1", BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED) as p:
            p.send_connect()
            p.read_connect()
            # Wire 1.1: the acceptor sends no ack (no proof) before the dialer proved itself.
            p.send(p.make_ack())  # no proof
            p.send({"type": "lookup", "kv_request_id": "r", "keys": ["00"], "round_seq": 0})
            self.assertEqual(p.expect_disconnect(), "authentication failed")
            self.assertNotIn("lookup_resp", [f.type for f in p.received])
            self.assertNotIn("connect_ack", [f.type for f in p.received])
        self.wait_until(lambda: counter(a.status(), "auth_failures") >= 1, what="auth_failures counted")


class CidrTest(DaemonTestCase):

    def test_disallowed_address_is_closed_before_anything_is_read(self):
        a = self.start_daemon("a", BLOCK_LEN, extra=["--allow-cidr", "10.0.0.0/8"])
        host, _, port = a.listen.rpartition(":")
        s = socket.create_connection((host, int(port)), timeout=10)
        try:
            # A daemon that accepted would send its connect at once; this one
            # closes without a byte in either direction.
            s.settimeout(10)
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                data = b""
            self.assertEqual(data, b"", "the daemon sent something to a refused address")
        finally:
            s.close()
        self.assertIn("address not in allow-cidr", a.log_text())
        self.wait_until(lambda: counter(a.status(), "peer_connections_refused_allow_cidr") >= 1,
                        what="refusal counted")
        self.assertEqual(a.status()["peers"], [])
        self.assertEqual(a.status()["config"]["allow-cidr"], ["10.0.0.0/8"])

        # Another daemon on 127.0.0.1 cannot get in either.
        b = self.start_daemon("b", BLOCK_LEN)
        with self.client(b) as c:
            self.assertApiError("peer_unavailable", c.connect, a.listen)
        self.assertGreaterEqual(counter(a.status(), "peer_connections_refused_allow_cidr"), 2)

    def test_allowed_address_gets_in(self):
        a = self.start_daemon("a", BLOCK_LEN, extra=["--allow-cidr", "10.0.0.0/8,127.0.0.0/8"])
        b = self.start_daemon("b", BLOCK_LEN)
        with self.client(b) as c:
            c.connect(a.listen)
        self.assertEqual(counter(a.status(), "peer_connections_refused_allow_cidr"), 0)


# Runs one control-socket client as another user (the test runs as root).
CONTROL_CHILD = r"""
import json, socket, sys
path, mode = sys.argv[1], sys.argv[2]
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect(path)
except OSError as e:
    print(json.dumps({"connect_errno": e.errno}))
    sys.exit(0)
s.settimeout(10)
if mode == "status":
    try:
        s.sendall(b'{"id":1,"op":"status"}\n')
    except (BrokenPipeError, ConnectionResetError):  # closed before we wrote
        print(json.dumps({"closed": True, "epipe": True, "response": None}))
        sys.exit(0)
buf = b""
try:
    while not buf.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        buf += chunk
    print(json.dumps({"closed": not buf, "response": json.loads(buf) if buf else None}))
except ConnectionResetError:
    print(json.dumps({"closed": True, "reset": True, "response": None}))
except socket.timeout:
    print(json.dumps({"closed": False, "timeout": True, "response": None}))
"""

SOCKET_GID = 47421
ALLOWED_UID = 47401
ALLOWED_GID = 47431
OTHER_UID = 47402
OTHER_GID = 47432


@unittest.skipUnless(os.geteuid() == 0, "needs root to run clients as other users")
class ControlSocketAccessTest(DaemonTestCase):

    def run_as(self, daemon, uid, gid, extra_groups, mode):
        # The system interpreter: another user may not be able to run ours.
        python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
        r = subprocess.run([python, "-c", CONTROL_CHILD, daemon.socket_path, mode],
                           user=uid, group=gid, extra_groups=extra_groups, capture_output=True, timeout=30,
                           cwd="/")
        self.assertEqual(r.returncode, 0, r.stderr.decode())
        return json.loads(r.stdout)

    def test_uid_gid_allowlist_and_socket_group(self):
        os.chmod(self.workdir, 0o755)  # let other users reach the socket file
        a = self.start_daemon("a", BLOCK_LEN, extra=[
            "--socket-group", str(SOCKET_GID), "--allow-uid", str(ALLOWED_UID), "--allow-gid", str(ALLOWED_GID)])
        st = os.stat(a.socket_path)
        self.assertTrue(stat.S_ISSOCK(st.st_mode))
        self.assertEqual(st.st_gid, SOCKET_GID)
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o660)
        config = a.status()["config"]
        self.assertEqual((config["allow-uid"], config["allow-gid"], config["socket-group"]),
                         ([ALLOWED_UID], [ALLOWED_GID], SOCKET_GID))

        # In the socket's group but in neither allowlist: closed unread.
        for mode in ("wait", "status"):
            r = self.run_as(a, OTHER_UID, OTHER_GID, [SOCKET_GID], mode)
            self.assertTrue(r.get("closed"), dump(r))
            self.assertIsNone(r.get("response"), dump(r))
        log = a.log_text()
        self.assertIn(f"uid {OTHER_UID} gid {OTHER_GID} refused: not in the allowlist", log)
        self.assertEqual(counter(a.status(), "control_connections_refused"), 2)

        # An allowed uid, and an allowed primary gid, are served.
        r = self.run_as(a, ALLOWED_UID, OTHER_GID, [SOCKET_GID], "status")
        self.assertIs(r["response"]["ok"], True, dump(r))
        r = self.run_as(a, OTHER_UID, ALLOWED_GID, [SOCKET_GID], "status")
        self.assertIs(r["response"]["ok"], True, dump(r))
        # Not in the socket's group: mode 0660 keeps it out before the daemon.
        r = self.run_as(a, ALLOWED_UID, ALLOWED_GID, [], "status")
        self.assertEqual(r.get("connect_errno"), 13, dump(r))  # EACCES
        # The daemon's own uid (root here) is always allowed.
        self.assertEqual(counter(a.status(), "control_connections_refused"), 2)

    def test_no_allowlist_serves_anyone_who_can_open_the_socket(self):
        os.chmod(self.workdir, 0o755)
        a = self.start_daemon("a", BLOCK_LEN, extra=["--socket-group", str(SOCKET_GID)])
        r = self.run_as(a, OTHER_UID, OTHER_GID, [SOCKET_GID], "status")
        self.assertIs(r["response"]["ok"], True, dump(r))
        self.assertEqual(counter(a.status(), "control_connections_refused"), 0)


if __name__ == "__main__":
    unittest.main()
