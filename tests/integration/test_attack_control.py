"""Attacks on the control socket and on engine isolation, against real
daemons (docs/security.md "Control socket and engines";
control API spec sections 1, 2 and 4):

  * more control connections than --max-control-connections;
  * a connection pipelining large lines without reading its answers;
  * running the daemon out of file descriptors (EMFILE) on the control socket;
  * two engines publishing one key, and one engine's store / finish of a
    kv_request_id another engine supplies;
  * a load into a slot that a peer's lookup round pins (conflict until the
    round ends, then the same load lands);
  * register_region of a symlink, a FIFO, another user's file and a sparse
    128 TiB file;
  * control characters in a client name, a peer id and a disconnect reason.
"""

import json
import os
import resource
import socket
import subprocess
import time
import unittest

from kvpeer_testing.harness import (DaemonTestCase, dump, kvpeerctl_path, rss_bytes, small_asan_quarantine,
                                    ubsan_without_vptr)
from kvpeer import KvpeerError
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, make_keys
from kvpeer_testing.wire_peer import WirePeer

BLOCK_LEN = 64 * 1024
ESC = "\x1b"


def raw_connect(path, timeout=5.0):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    s.connect(path)
    return s


def read_line(s, timeout=5.0):
    s.settimeout(timeout)
    data = b""
    while not data.endswith(b"\n"):
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


class ControlSocketBoundsTest(DaemonTestCase):

    def test_connections_beyond_the_cap_get_one_conflict_line(self):
        cap = 16
        a = self.start_daemon("a", BLOCK_LEN, extra=["--max-control-connections", str(cap)])
        b = self.start_daemon("b", BLOCK_LEN)
        keys = make_keys("cap", 8)
        producer = self.engine(a, 8, BLOCK_LEN, name="producer")
        producer.fill_and_publish(keys, range(8))
        held = []
        for _ in range(cap - 1):
            s = raw_connect(a.socket_path)
            s.sendall(b'{"op":"status","id":1}\n')
            self.assertIn(b'"ok":true', read_line(s))
            held.append(s)
        refused = 0
        for _ in range(300 - cap):
            s = raw_connect(a.socket_path)
            line = read_line(s)
            answer = json.loads(line)
            self.assertEqual(answer["id"], None)
            self.assertEqual(answer["ok"], False)
            self.assertEqual(answer["error"]["code"], "conflict")
            self.assertIn(f"max-control-connections ({cap})", answer["error"]["message"])
            self.assertEqual(s.recv(1), b"", "closed after the one line")
            s.close()
            refused += 1
        self.assertEqual(refused, 300 - cap)
        # Peers still work: node b loads from a while a's control socket is full.
        consumer = self.engine(b, 8, BLOCK_LEN, name="consumer")
        report = consumer.fetch(a.listen, "cap-req", keys, list(range(8)), batch=8)
        self.assertTrue(report.ok, dump(report.__dict__))
        # And a answers status once a connection has closed.
        held.pop().close()
        status = self.wait_until(lambda: self._status_or_none(a), what="status on a")
        self.assertGreaterEqual(status["counters"].get("limit_max_control_connections", 0), refused)
        self.assertEqual(status["config"]["max-control-connections"], cap)
        for s in held:
            s.close()

    def _status_or_none(self, daemon):
        try:
            return daemon.status()
        except (KvpeerError, OSError, ValueError):
            return None

    def test_pipelined_lines_without_reading_answers_stay_within_the_byte_bound(self):
        a = self.start_daemon("a", BLOCK_LEN, env=small_asan_quarantine())
        e = self.engine(a, 4, BLOCK_LEN, name="flooder")
        time.sleep(0.3)
        before = rss_bytes(a.pid)
        s = e.client._sock
        # A long poll keeps every later line unanswered; then 4 MiB lines, never reading.
        s.sendall(b'{"op":"poll","wait_ms":60000}\n')
        line = b'{"op":"status","pad":"' + b"a" * (4 << 20) + b'"}\n'
        s.setblocking(False)
        sent, deadline, flood = 0, time.monotonic() + 3.0, line * 24
        while time.monotonic() < deadline and sent < len(flood):
            try:
                sent += s.send(flood[sent:sent + (1 << 20)])
            except BlockingIOError:
                time.sleep(0.01)
        time.sleep(0.3)
        grown = rss_bytes(a.pid) - before
        self.assertLess(sent, 48 << 20, "the daemon stopped reading near the 32 MiB bound")
        self.assertLess(grown, 48 << 20, f"RSS grew {grown} bytes")
        # Other connections are unaffected.
        self.assertIn("node_id", a.status())
        s.setblocking(True)

    def test_out_of_descriptors_on_the_control_socket_pauses_and_recovers(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
        try:
            a = self.start_daemon("a", BLOCK_LEN, extra=["--max-control-connections", "1000"],
                                  env=ubsan_without_vptr(self.workdir, "a"))
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        held = []
        for _ in range(120):
            held.append(raw_connect(a.socket_path))  # queued in the backlog once accept fails
        time.sleep(3.0)
        log = a.log_text()
        failures = [line for line in log.splitlines() if "control socket: accept failed" in line]
        self.assertGreaterEqual(len(failures), 1, "EMFILE was hit and logged")
        self.assertLessEqual(len(failures), 5, "logged at most once a second, never in a loop")
        for s in held:
            s.close()
        status = self.wait_until(lambda: self._status_or_none(a), what="status after descriptors came back")
        self.assertIn("node_id", status)


class EngineIsolationTest(DaemonTestCase):

    def test_two_engines_hold_one_key_and_each_withdraws_only_its_own(self):
        a = self.start_daemon("a", BLOCK_LEN)
        b = self.start_daemon("b", BLOCK_LEN)
        keys = make_keys("shared", 4)
        e1 = self.engine(a, 8, BLOCK_LEN, name="engine-1")
        e2 = self.engine(a, 8, BLOCK_LEN, name="engine-2", region="shm")
        e1.fill_and_publish(keys, [0, 1, 2, 3])
        e2.fill_and_publish(keys, [4, 5, 6, 7])
        # Engine 2's publish moved nothing of engine 1's.
        e1.poll_once()
        self.assertEqual(e1.released, [])
        engines = {x["client"]: x["published"] for x in a.status()["engines"]}
        self.assertEqual(engines, {"engine-1": 4, "engine-2": 4})
        c = self.engine(b, 8, BLOCK_LEN, name="consumer")
        report = c.fetch(a.listen, "shared-1", keys, list(range(4)), batch=4)
        self.assertTrue(report.ok, dump(report.__dict__))
        c.client.finish("shared-1")

        released = e1.client.unpublish(keys)
        self.assertEqual(sorted(released["released"] + released["pinned"]), [0, 1, 2, 3])
        self.assertEqual(c.probe(a.listen, "shared-2", keys), ["hit"] * 4, "engine 2 still holds them")
        report = c.fetch(a.listen, "shared-3", keys, list(range(4, 8)), batch=4)
        self.assertTrue(report.ok, dump(report.__dict__))
        c.client.finish("shared-2")
        c.client.finish("shared-3")
        e1.poll_once()
        e2.poll_once()
        self.assertTrue(set(e1.released) <= {0, 1, 2, 3}, e1.released)
        self.assertEqual(e2.released, [], "engine 2 heard nothing of engine 1's unpublish")
        engines = {x["client"]: x["published"] for x in a.status()["engines"]}
        self.assertEqual(engines, {"engine-1": 0, "engine-2": 4})

    def test_store_supply_belongs_to_its_engine(self):
        a = self.start_daemon("a", BLOCK_LEN)
        b = self.start_daemon("b", BLOCK_LEN)
        keys = make_keys("supply", 4)
        e1 = self.engine(a, 8, BLOCK_LEN, name="prefill-1")
        e2 = self.engine(a, 8, BLOCK_LEN, name="prefill-2")
        e1.supply("pd-req", keys, [0, 1, 2, 3])
        with self.assertRaises(KvpeerError) as refused:
            e2.client.store(e2.new_job_id(), "pd-req", keys, [4, 5, 6, 7])
        self.assertEqual(refused.exception.code, "conflict")
        e2.client.finish("pd-req")  # changes nothing of engine 1's supply
        c = self.engine(b, 8, BLOCK_LEN, name="decoder")
        job = c.load(a.listen, "pd-req", keys, [0, 1, 2, 3])
        result = c.wait_jobs([job], timeout=30)[job]
        self.assertTrue(result["success"], dump(result))
        self.assertEqual(c.verify(keys, [0, 1, 2, 3]), [])
        c.client.finish("pd-req")
        e1.client.finish("pd-req")

    def test_load_into_a_slot_a_peer_round_pins_is_conflict_until_the_round_ends(self):
        # Issue 11, finding 5: the load was accepted, so B could then fetch
        # "stale" from A and be served the loaded bytes under that key.
        a = self.start_daemon("a", BLOCK_LEN)
        b = self.start_daemon("b", BLOCK_LEN)
        victim = self.engine(a, 4, BLOCK_LEN, name="victim")
        stale = make_keys("stale", 1)
        victim.fill_and_publish(stale, [1])
        prober = self.engine(b, 4, BLOCK_LEN, name="prober")
        self.assertEqual(prober.probe(a.listen, "probe-only", stale), ["hit"])  # A's round pins slot 1
        self.assertEqual([p["rounds_open"] for p in a.status()["peers"]], [1])
        source = self.engine(b, 4, BLOCK_LEN, name="source")
        fresh = make_keys("fresh", 1)
        source.fill_and_publish(fresh, [0])
        self.assertEqual(victim.probe(b.listen, "refill", fresh), ["hit"])

        with self.assertRaises(KvpeerError) as refused:
            victim.client.load(victim.new_job_id(), b.listen, "refill", fresh, [1])
        self.assertEqual(refused.exception.code, "conflict")
        self.assertIn("block id 1 is pinned", refused.exception.message)
        self.assertEqual(victim.verify(stale, [1]), [], "the pinned slot still holds what the peer looked up")

        prober.client.finish("probe-only")  # the round ends on A and unpins slot 1
        self.wait_until(lambda: [p["rounds_open"] for p in a.status()["peers"]] == [0], what="A's round ended")
        job = victim.load(b.listen, "refill", fresh, [1])
        result = victim.wait_jobs([job], timeout=30)[job]
        self.assertTrue(result["success"], dump(result))
        self.assertEqual(victim.verify(fresh, [1]), [])
        victim.client.finish("refill")


class RegionRulesTest(DaemonTestCase):

    REFUSED = "not accessible or not a regular file owned by uid"

    def _hello(self, a, name):
        c = self.client(a)
        c.hello(name, BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED)
        return c

    def test_symlink_and_fifo_are_refused_at_once(self):
        a = self.start_daemon("a", BLOCK_LEN)
        c = self._hello(a, "paths")
        target = os.path.join(self.workdir, "region")
        with open(target, "wb") as f:
            f.truncate(4 * BLOCK_LEN)
        link = os.path.join(self.workdir, "region.link")
        os.symlink(target, link)
        with self.assertRaises(KvpeerError) as ctx:
            c.register_region(link, 4)
        self.assertEqual(ctx.exception.code, "bad_request")
        self.assertIn(self.REFUSED, str(ctx.exception))
        fifo = os.path.join(self.workdir, "fifo")
        os.mkfifo(fifo)
        start = time.monotonic()
        with self.assertRaises(KvpeerError) as ctx:
            c.register_region(fifo, 4)
        self.assertLess(time.monotonic() - start, 2.0, "no hang on a FIFO")
        self.assertIn(self.REFUSED, str(ctx.exception))
        # The real file still works.
        self.assertEqual(c.register_region(target, 4)["bytes"], 4 * BLOCK_LEN)

    @unittest.skipUnless(os.geteuid() == 0, "needs root to run an engine as another uid")
    def test_another_users_file_reads_like_a_missing_one(self):
        a = self.start_daemon("a", BLOCK_LEN)
        os.chmod(self.workdir, 0o755)
        os.chmod(a.socket_path, 0o666)
        theirs = os.path.join(self.workdir, "root-owned")
        with open(theirs, "wb") as f:
            f.truncate(4 * BLOCK_LEN)
        missing = os.path.join(self.workdir, "missing")
        script = (
            "import json, socket, sys\n"
            "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); f = s.makefile('rwb')\n"
            "def call(**r):\n"
            "    f.write((json.dumps(r) + '\\n').encode()); f.flush(); return json.loads(f.readline())\n"
            f"print(json.dumps(call(op='hello', client='nobody', block_len={BLOCK_LEN}, "
            f"config_fingerprint={DEFAULT_FINGERPRINT!r}, hash_seed={DEFAULT_HASH_SEED!r})))\n"
            "print(json.dumps(call(op='register_region', path=sys.argv[2], num_blocks=4)))\n"
            "print(json.dumps(call(op='register_region', path=sys.argv[3], num_blocks=4)))\n")
        out = subprocess.run(["/usr/bin/python3", "-c", script, a.socket_path, theirs, missing], user=65534,
                             capture_output=True, timeout=30, check=True).stdout.decode().splitlines()
        hello, own, gone = (json.loads(line) for line in out)
        self.assertTrue(hello["ok"], hello)
        self.assertEqual(own["error"]["code"], "bad_request")
        self.assertEqual(gone["error"]["code"], "bad_request")
        self.assertEqual(own["error"]["message"].replace(theirs, "P"), gone["error"]["message"].replace(missing, "P"))
        self.assertIn(self.REFUSED + " 65534", own["error"]["message"])

    def test_sparse_128_tib_region_is_refused_by_max_region_bytes(self):
        a = self.start_daemon("a", BLOCK_LEN)
        c = self._hello(a, "sparse")
        sparse = os.path.join("/dev/shm", f"kvpeer-sparse-{os.getpid()}")
        num_blocks = 1 << 31  # * 64 KiB = 128 TiB
        try:
            with open(sparse, "wb") as f:
                try:
                    f.truncate(num_blocks * BLOCK_LEN)
                except OSError:
                    pass  # the bound is checked before the file is looked at
            with self.assertRaises(KvpeerError) as ctx:
                c.register_region(sparse, num_blocks)
            self.assertEqual(ctx.exception.code, "conflict")
            self.assertIn("max-region-bytes", str(ctx.exception))
        finally:
            os.unlink(sparse)
        # Then a real 256 MiB region is accepted.
        e = self.engine(a, (256 << 20) // BLOCK_LEN, BLOCK_LEN, name="real", region="shm")
        engines = {x["client"]: x["num_blocks"] for x in a.status()["engines"]}
        self.assertEqual(engines["real"], 4096)
        e.close()


class EscapingTest(DaemonTestCase):

    def test_control_characters_are_escaped_in_the_log_and_kvpeerctl(self):
        a = self.start_daemon("a", BLOCK_LEN)
        c = self.client(a)
        c.hello(f"evil{ESC}[31mname", BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED)
        # A peer id and a disconnect reason with ESC, over the wire.
        try:
            with WirePeer.dial(a.listen, f"127.0.0.1:{ESC}[2J1", BLOCK_LEN, DEFAULT_FINGERPRINT,
                               DEFAULT_HASH_SEED) as p:
                p.handshake(timeout=5)
        except Exception:
            pass
        try:
            with WirePeer.dial(a.listen, "127.0.0.1:1", BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED) as p:
                p.handshake(timeout=5)
                p.send({"type": "disconnect", "reason": f"bye{ESC}[2J"})
                p.wait_closed()
        except Exception:
            pass
        out = subprocess.run([str(kvpeerctl_path()), "--socket", a.socket_path, "status"],
                             capture_output=True, timeout=30).stdout.decode()
        self.assertNotIn(ESC, out)
        self.assertIn("evil\\x1b[31mname", out)
        time.sleep(0.5)
        log = a.log_text()
        self.assertNotIn(ESC, log)
        self.assertIn("evil\\x1b[31mname", log)


if __name__ == "__main__":
    unittest.main()
