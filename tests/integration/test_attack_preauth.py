"""Nothing before authentication (wire-protocol.md 1.1 section 4, item 6),
shown by performing the attacks against real daemons:

  (a) an unauthenticated `connect` claiming a ready peer's id with a new
      epoch does not tear that peer's session down;
  (b) hundreds of bogus connects with made-up peer ids leave no peer entry,
      no per-peer metrics, and `handshaking` back at 0;
  (c) idle sockets from one source address cannot crowd out a real peer;
      beyond --max-handshaking-per-source they are closed before a byte is
      read;
  (d) peer entries with no connection and no work are reaped;
  (e) a daemon out of descriptors neither spins nor floods its log in its
      peer accept loop, and serves again once the connections close.

The raw peers here speak the no-PSK handshake (connect, then connect_ack)
with a few lines of their own, so this module does not depend on the
helpers in wire_peer.py.
"""

import json
import os
import socket
import struct
import time
import unittest

from kvpeer_testing.harness import Daemon, DaemonTestCase, dump, ubsan_without_vptr
from kvpeer import KvpeerError
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, make_keys

BLOCK_LEN = 4096
MAGIC = b"KVP1"
SMALL = 64 * 1024  # bytes: the bound on status and metrics after the flood


def frame(header):
    body = json.dumps(header).encode()
    return MAGIC + struct.pack(">IQ", len(body), 0) + body


def connect_msg(peer_id, epoch=None):
    return {"type": "connect", "peer_id": peer_id, "wire_major": 1, "wire_minor": 0,
            "epoch": epoch or os.urandom(16).hex(), "block_len": BLOCK_LEN,
            "config_fingerprint": DEFAULT_FINGERPRINT, "hash_seed": DEFAULT_HASH_SEED,
            "nonce": os.urandom(16).hex()}


def dial(addr, source="127.0.0.1", timeout=5.0):
    host, _, port = addr.rpartition(":")
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.bind((source, 0))
    s.connect((host, int(port)))
    return s


def read_frame(sock):
    """One frame's header (dict), or None at EOF."""
    prefix = recv_exactly(sock, 16)
    if prefix is None:
        return None
    header_len, payload_len = struct.unpack(">IQ", prefix[4:])
    header = recv_exactly(sock, header_len)
    if header is None or payload_len:
        return None
    return json.loads(header)


def recv_exactly(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def read_until(sock, kind):
    while True:
        f = read_frame(sock)
        if f is None or f["type"] == kind:
            return f


def closed_without_a_byte(sock, within_s):
    """True when the daemon closed `sock` (EOF or reset) within `within_s`
    without ever sending a byte (not even its `connect`)."""
    sock.settimeout(within_s)
    try:
        data = sock.recv(1)
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False
    return data == b""


class RlimitDaemon(Daemon):
    """A kvpeerd started under `prlimit --nofile=N`."""

    def __init__(self, workdir, name, args, nofile):
        super().__init__(workdir, name, args, env=ubsan_without_vptr(workdir, name))
        self.nofile = nofile

    def command(self):
        return ["prlimit", f"--nofile={self.nofile}:{self.nofile}", "--"] + super().command()


class PreauthAttackTest(DaemonTestCase):

    def peer_entry(self, daemon, peer_id):
        return [p for p in daemon.status()["peers"] if p["peer_id"] == peer_id]

    def ready_pair(self):
        """A (consumer) and B (producer), A's session with B ready after one
        verified fetch."""
        a = self.start_daemon("a", BLOCK_LEN)
        b = self.start_daemon("b", BLOCK_LEN)
        producer = self.engine(b, 32, BLOCK_LEN, name="producer")
        consumer = self.engine(a, 32, BLOCK_LEN, name="consumer")
        keys = make_keys("preauth", 32)
        producer.fill_and_publish(keys, range(32))
        report = consumer.fetch(b.listen, "before", keys[:16], range(16))
        self.assertTrue(report.ok, dump(report.__dict__))
        return a, b, consumer, keys

    # (a) ---------------------------------------------------------------------

    def test_unauthenticated_restart_claim_leaves_the_session_alone(self):
        a, b, consumer, keys = self.ready_pair()
        [before] = self.peer_entry(a, b.node_id)
        self.assertEqual(before["state"], "ready", dump(before))
        for _ in range(3):  # it was repeatable against the released daemon
            s = dial(a.listen)
            s.sendall(frame(connect_msg(b.node_id)))  # B's id, a new epoch, never an ack
            self.assertEqual(read_frame(s)["type"], "connect")
            self.wait_until(lambda: a.status()["handshaking"] >= 1, what="the claim is handshaking")
            time.sleep(0.3)
            [now] = self.peer_entry(a, b.node_id)
            self.assertEqual((now["state"], now["since"]), ("ready", before["since"]), dump(now))
            s.close()
        [on_b] = self.peer_entry(b, a.node_id)
        self.assertEqual(on_b["state"], "ready", dump(on_b))
        report = consumer.fetch(b.listen, "after", keys[16:], range(16, 32))
        self.assertTrue(report.ok, dump(report.__dict__))
        self.assertEqual(self.peer_entry(a, b.node_id)[0]["since"], before["since"])
        self.wait_until(lambda: a.status()["handshaking"] == 0, what="handshaking back to 0")

    # (b) ---------------------------------------------------------------------

    def test_bogus_connects_leave_no_entries(self):
        a = self.start_daemon("a", BLOCK_LEN)
        bogus = set()
        for i in range(200):  # one after the other, each answered by A
            peer_id = f"10.77.{i // 250}.{i % 250 + 1}:5710"
            bogus.add(peer_id)
            s = dial(a.listen)
            s.sendall(frame(connect_msg(peer_id)))
            self.assertIsNotNone(read_until(s, "connect_ack"), "A answers a valid connect")
            s.close()
        for batch in range(4):  # and 100 at once, from several sources
            socks = []
            for i in range(25):
                peer_id = f"10.78.{batch}.{i + 1}:5710"
                bogus.add(peer_id)
                s = dial(a.listen, source=f"127.0.{batch + 1}.{i % 4 + 1}")
                try:
                    s.sendall(frame(connect_msg(peer_id)))
                except OSError:
                    pass  # closed at once by a bound: fine too
                socks.append(s)
            for s in socks:
                try:
                    read_until(s, "connect_ack")
                except OSError:
                    pass
            for s in socks:
                s.close()
        st = self.wait_until(lambda: (lambda st: st if st["handshaking"] == 0 else None)(a.status()),
                             what="handshaking back to 0")
        self.assertEqual([p for p in st["peers"] if p["peer_id"] in bogus], [], dump(st["peers"]))
        self.assertLess(len(json.dumps(st)), SMALL)
        with self.client(a) as c:
            metrics = c.metrics()
        text = metrics if isinstance(metrics, str) else json.dumps(metrics)
        self.assertLess(len(text), SMALL)
        for peer_id in list(bogus)[:20]:
            self.assertNotIn(peer_id, text)

    # (c) ---------------------------------------------------------------------

    def test_idle_sockets_from_one_source_do_not_block_a_real_peer(self):
        a = self.start_daemon("a", BLOCK_LEN)
        b = self.start_daemon("b", BLOCK_LEN)
        idle = [dial(a.listen, source="127.0.0.2") for _ in range(64)]
        time.sleep(0.3)
        # The first 8 are handshaking (A sent them its connect); the other 56
        # were closed before A read (or wrote) a byte.
        kept = [s for s in idle[:8] if not closed_without_a_byte(s, 0.5)]
        self.assertEqual(len(kept), 8)
        shut = sum(1 for s in idle[8:] if closed_without_a_byte(s, 1.0))
        self.assertEqual(shut, 56)
        st = a.status()
        self.assertEqual(st["handshaking"], 8, dump(st))
        self.assertGreaterEqual(st["counters"].get("limit_max_handshaking_per_source", 0), 56, dump(st["counters"]))
        # A real peer from 127.0.0.1 still gets in.
        producer = self.engine(a, 8, BLOCK_LEN, name="producer")
        consumer = self.engine(b, 8, BLOCK_LEN, name="consumer")
        keys = make_keys("crowd", 8)
        producer.fill_and_publish(keys, range(8))
        report = consumer.fetch(a.listen, "crowd", keys, range(8))
        self.assertTrue(report.ok, dump(report.__dict__))
        self.wait_until(lambda: any(p["peer_id"] == b.node_id and p["state"] == "ready"
                                    for p in a.status()["peers"]), what="B ready on A")
        for s in idle:
            s.close()

    # (d) ---------------------------------------------------------------------

    def test_idle_entries_are_reaped(self):
        a = self.start_daemon("a", BLOCK_LEN, extra=["--peer-reap-after-s", "1"])
        self.assertEqual(a.status()["config"]["peer-reap-after-s"], 1)
        engine = self.engine(a, 8, BLOCK_LEN, name="engine")
        # An engine-named peer that refuses connections.
        spare = socket.socket()
        spare.bind(("127.0.0.1", 0))
        unreachable = f"127.0.0.1:{spare.getsockname()[1]}"
        spare.close()
        self.assertEqual(engine.probe(unreachable, "gone", make_keys("gone", 2)), ["miss", "miss"])
        self.assertTrue(self.peer_entry(a, unreachable), "a dialled peer is listed")
        # An inbound peer that authenticates and goes away.
        inbound = "127.0.0.1:9"
        s = dial(a.listen)
        hello = connect_msg(inbound)
        s.sendall(frame(hello))
        read_until(s, "connect")
        s.sendall(frame({"type": "connect_ack", "peer_id": inbound, "wire_major": 1, "wire_minor": 0,
                         "epoch": hello["epoch"]}))
        self.assertIsNotNone(read_until(s, "connect_ack"))
        self.wait_until(lambda: [p for p in self.peer_entry(a, inbound) if p["state"] == "ready"],
                        what="the authenticated inbound peer listed ready")
        s.close()
        self.wait_until(lambda: not self.peer_entry(a, unreachable) and not self.peer_entry(a, inbound),
                        timeout=10, what="both entries reaped")
        with self.client(a) as c:
            metrics = c.metrics()
        text = metrics if isinstance(metrics, str) else json.dumps(metrics)
        self.assertNotIn(unreachable, text)
        self.assertNotIn(inbound, text)

    # (e) ---------------------------------------------------------------------

    def test_out_of_descriptors_neither_spins_nor_floods(self):
        d = RlimitDaemon(self.workdir, "low-fd", ["--block-len", str(BLOCK_LEN), "--config-fingerprint",
                                                  DEFAULT_FINGERPRINT, "--hash-seed", DEFAULT_HASH_SEED,
                                                  "--max-handshaking", "1000",
                                                  "--max-handshaking-per-source", "1000"], nofile=48)
        self.daemons.append(d)
        d.start()
        socks = []
        for _ in range(80):
            try:
                socks.append(dial(d.listen, timeout=2.0))
            except OSError:
                break
        start = time.monotonic()
        time.sleep(3.0)
        cpu_before = self.cpu_seconds(d.pid)
        time.sleep(1.0)
        spent = self.cpu_seconds(d.pid) - cpu_before
        for s in socks:
            s.close()
        failures = [line for line in d.log_text().splitlines() if "peer accept failed" in line]
        self.assertGreater(len(failures), 0, "the descriptors ran out (else the test proves nothing)")
        self.assertLessEqual(len(failures), int(time.monotonic() - start) + 3, "\n".join(failures[:5]))
        self.assertLess(spent, 0.5, f"{spent:.2f} s of CPU in one idle second: the accept loop spins")
        st = self.wait_until(lambda: self.try_status(d), timeout=20, what="status answers again")
        self.assertEqual(st["handshaking"], 0, dump(st))

    @staticmethod
    def cpu_seconds(pid):
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    @staticmethod
    def try_status(daemon):
        try:
            st = daemon.status()
        except (OSError, KvpeerError):
            return None
        return st if st["handshaking"] == 0 else None


if __name__ == "__main__":
    unittest.main()
