"""Attacks by local engines and socket users on their node, against real daemons (issue 25,
"Security, round 3"; docs/security.md, "Who may publish and operate"). The attacker is an engine
process run as another uid (nobody, or a test uid with chosen groups) speaking the control API:

  poison     nobody publishes (and stores) garbage under keys before the legitimate engine does;
             the earliest holder of a key serves it, so before the fix a remote consumer loaded the
             garbage. Now publish and store of a uid that is not a publisher are refused
             (bad_request naming publisher-uid / publisher-gid) and the consumer loads the
             legitimate bytes; listing the uid, or a supplementary group of it, grants it.
  squatter   on a node whose model settings are left to the first hello, nobody says hello with
             block_len 1 first; before the fix the real engine then got `incompatible`. Now the
             squatter's hello is refused (incompatible, naming why) and the real engine's works;
             once the settings are fixed, a non-publisher (load-only) engine's hello works.
  operator   nobody sends `disconnect` (and `connect`) for the peer another engine loads from;
             before the fix the victim's load failed "disconnected by operator". Now refused
             (bad_request naming operator-uid / operator-gid); `status` and `metrics` stay open.
  region     engine A's region passed by descriptor (the recommended path): engine B, another
             uid, cannot open it (nor the daemon's descriptors) through /proc; A's own uid can.
             This is the kernel's rule, so it held before the fix too: what changed for this half
             of finding 5 is the packaged group model and the docs (no group-writable regions).
  sigbus     `kill -BUS` sent to the daemon: before the fix the first one killed a daemon that
             had not hashed a block yet, and one after a hashed block took the guard away for
             good. Now signals sent by a process are ignored (daemon/node/guarded_read.h).

Root only (it runs processes as other uids); skipped otherwise.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
import unittest

from kvpeer_testing.harness import DaemonTestCase, dump, kvpeerctl_path
from kvpeer import KvpeerError
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, block_content, make_keys

BLOCK_LEN = 64 * 1024
NOBODY = 65534
GROUP_UID = 47511  # a uid without a passwd entry, given PUBLISHER_GID as a supplementary group
GROUP_GID = 47512
PUBLISHER_GID = 47599

# An engine as another user: runs the requests of argv[2] (a JSON list) on one connection and
# prints each answer as a JSON line; a request with "fd": true gets a memfd region of `num_blocks`
# blocks of argv[3] bytes, filled with 0xEE (garbage), passed with SCM_RIGHTS. Then it holds the
# connection (and so what it published) until its stdin closes.
CHILD = r"""
import json, os, socket, sys
path, requests, block_len = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
s = socket.socket(socket.AF_UNIX)
s.settimeout(20)
s.connect(path)
f = s.makefile("rb")
regions = []
for r in requests:
    line = (json.dumps(r) + "\n").encode()
    if r.get("fd"):
        fd = os.memfd_create("garbage")
        os.ftruncate(fd, r["num_blocks"] * block_len)
        os.pwrite(fd, b"\xee" * (r["num_blocks"] * block_len), 0)
        socket.send_fds(s, [line], [fd])
        regions.append(fd)  # kept open, as an engine that uses its region does
    else:
        s.sendall(line)
    print(f.readline().decode().strip(), flush=True)
sys.stdin.read()
"""


def hello_request(block_len=BLOCK_LEN, name="attacker"):
    return {"op": "hello", "client": name, "block_len": block_len, "config_fingerprint": DEFAULT_FINGERPRINT,
            "hash_seed": DEFAULT_HASH_SEED}


@unittest.skipUnless(os.geteuid() == 0, "needs root to run engines as other uids")
class LocalAttackTest(DaemonTestCase):

    def setUp(self):
        super().setUp()
        os.chmod(self.workdir, 0o755)  # other users reach the socket file (opened 0666 below)

    def open_socket(self, daemon):
        os.chmod(daemon.socket_path, 0o666)

    def run_as(self, daemon, requests, uid=NOBODY, gid=NOBODY, extra_groups=()):
        """Starts an engine process as `uid` that sends `requests`; returns (process, answers).
        The process holds its connection until stop() (or cleanup)."""
        python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable
        p = self.spawn([python, "-c", CHILD, daemon.socket_path, json.dumps(requests), str(BLOCK_LEN)],
                       user=uid, group=gid, extra_groups=list(extra_groups), stdin=subprocess.PIPE,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd="/")
        answers = []
        for _ in requests:
            line = p.stdout.readline()
            if not line:
                self.fail(f"engine as uid {uid} ended early: {p.stderr.read().decode()}")
            answers.append(json.loads(line))
        return p, answers

    @staticmethod
    def stop(p):
        p.stdin.close()
        p.wait(timeout=10)
        p.stdout.close()
        p.stderr.close()

    def poison_requests(self, keys, kv="poison-pd"):
        hexkeys = [k.hex() for k in keys]
        return [hello_request(), {"op": "register_region", "fd": True, "num_blocks": 8},
                {"op": "publish", "keys": hexkeys, "block_ids": list(range(len(keys))), "seal": True},
                {"op": "store", "job_id": 1, "kv_request_id": kv, "keys": hexkeys,
                 "block_ids": list(range(len(keys)))}]

    def load_and_verify(self, consumer, producer, kv, keys):
        self.assertEqual(consumer.probe(producer.listen, kv, keys), ["hit"] * len(keys))
        job = consumer.load(producer.listen, kv, keys, range(len(keys)))
        result = consumer.wait_jobs([job], timeout=20)[job]
        self.assertTrue(result["success"], dump(result))
        consumer.client.finish(kv)
        return [consumer.region.read_block(i) == block_content(k, BLOCK_LEN) for i, k in enumerate(keys)]

    # ---- finding 3: poisoning ------------------------------------------------------------------

    def test_an_unprivileged_engine_cannot_poison_what_a_remote_consumer_loads(self):
        # Publishing made a privilege (unset, control-api.md lets every socket user publish).
        a = self.start_daemon("a", BLOCK_LEN, extra=["--publisher-uid", "0", "--operator-uid", "0"])
        b = self.start_daemon("b", BLOCK_LEN)
        self.open_socket(a)
        keys = make_keys("poison", 4)
        attacker, answers = self.run_as(a, self.poison_requests(keys))
        hello, region, publish, store = answers
        self.assertTrue(hello["ok"] and region["ok"], dump(answers))
        # The legitimate engine (root) publishes the same keys afterwards.
        producer = self.engine(a, 8, BLOCK_LEN, name="legit")
        producer.fill_and_publish(keys, range(4), seal=True)
        consumer = self.engine(b, 8, BLOCK_LEN, name="consumer")
        self.assertEqual(self.load_and_verify(consumer, a, "poison-1", keys), [True] * 4,
                         "the consumer loaded bytes the legitimate engine did not publish")
        for answer in (publish, store):
            self.assertFalse(answer["ok"], dump(answer))
            self.assertEqual(answer["error"]["code"], "bad_request")
            self.assertIn(f"uid {NOBODY}", answer["error"]["message"])
            self.assertIn("publisher-uid and publisher-gid", answer["error"]["message"])
        status = a.status()
        self.assertEqual(status["counters"]["control_requests_refused_policy"], 2)
        self.assertEqual(status["access"]["publishers"], {"anyone": False, "uids": [0], "gids": []})
        out = subprocess.run([str(kvpeerctl_path()), "--socket", a.socket_path, "status"], capture_output=True,
                             timeout=10, check=True).stdout.decode()
        self.assertIn("publish  uids 0", out)
        self.assertIn("operate  uids 0", out)
        self.stop(attacker)

    def test_publisher_uid_and_a_supplementary_publisher_gid_grant_publishing(self):
        a = self.start_daemon("a", BLOCK_LEN, extra=["--publisher-uid", str(NOBODY),
                                                     "--publisher-gid", str(PUBLISHER_GID)])
        self.open_socket(a)
        by_uid, answers = self.run_as(a, self.poison_requests(make_keys("granted-uid", 2)))
        self.assertTrue(all(answer["ok"] for answer in answers), dump(answers))
        # Granted through a supplementary group (SO_PEERGROUPS), not the primary one.
        by_group, answers = self.run_as(a, self.poison_requests(make_keys("granted-gid", 2), "pd-2"), uid=GROUP_UID,
                                        gid=GROUP_GID, extra_groups=[PUBLISHER_GID])
        self.assertTrue(all(answer["ok"] for answer in answers), dump(answers))
        # Without that group: refused.
        other, answers = self.run_as(a, self.poison_requests(make_keys("no-group", 2), "pd-3"), uid=GROUP_UID,
                                     gid=GROUP_GID)
        self.assertEqual(answers[2]["error"]["code"], "bad_request", dump(answers))
        self.assertEqual(a.status()["access"]["publishers"],
                         {"anyone": False, "uids": [0, NOBODY], "gids": [PUBLISHER_GID]})
        for p in (by_uid, by_group, other):
            self.stop(p)

    # ---- finding 5: the first hello, operator ops ----------------------------------------------

    def test_a_squatters_first_hello_cannot_fix_the_model_settings(self):
        # The model settings are left to the first hello.
        a = self.start_daemon("a", extra=["--publisher-uid", "0", "--operator-uid", "0"])
        self.open_socket(a)
        squatter, (hello,) = self.run_as(a, [hello_request(block_len=1, name="squatter")])
        self.assertFalse(hello["ok"], dump(hello))
        self.assertEqual(hello["error"]["code"], "incompatible")
        message = hello["error"]["message"]
        for needle in ("not fixed yet", "publisher-uid and publisher-gid",
                       "block-len, config-fingerprint and hash-seed"):
            self.assertIn(needle, message)
        # The real engine (a publisher: root) fixes them, and its settings are the node's.
        real = self.engine(a, 8, BLOCK_LEN, name="real")
        # A load-only engine that is not a publisher joins settings that are fixed.
        joiner, answers = self.run_as(a, [hello_request(name="load-only"),
                                          {"op": "register_region", "fd": True, "num_blocks": 8}])
        self.assertTrue(all(answer["ok"] for answer in answers), dump(answers))
        # ... but still not with different ones.
        late, (again,) = self.run_as(a, [hello_request(block_len=1, name="late-squatter")])
        self.assertEqual(again["error"]["code"], "incompatible", dump(again))
        self.assertIn("block_len 1 differs", again["error"]["message"])
        real.close()
        for p in (squatter, joiner, late):
            self.stop(p)

    def test_a_socket_user_cannot_disconnect_the_peer_another_engine_loads_from(self):
        a = self.start_daemon("a", BLOCK_LEN, extra=["--operator-uid", "0"])
        b = self.start_daemon("b", BLOCK_LEN)
        self.open_socket(a)
        producer = self.engine(b, 8, BLOCK_LEN, name="producer")
        keys = make_keys("victim", 4)
        producer.fill_and_publish(keys, range(4))
        victim = self.engine(a, 8, BLOCK_LEN, name="victim")
        self.assertEqual(victim.probe(b.listen, "victim-1", keys), ["hit"] * 4)
        attacker, answers = self.run_as(a, [{"op": "disconnect", "peer": b.listen},
                                            {"op": "connect", "peer": "127.0.0.1:9"},
                                            {"op": "status"}, {"op": "metrics"}])
        disconnect, connect, status, metrics = answers
        for answer, op in ((disconnect, "disconnect"), (connect, "connect")):
            self.assertFalse(answer["ok"], dump(answer))
            self.assertEqual(answer["error"]["code"], "bad_request")
            self.assertIn(f"op '{op}' is refused: uid {NOBODY}", answer["error"]["message"])
            self.assertIn("operator-uid and operator-gid", answer["error"]["message"])
        self.assertTrue(status["ok"] and metrics["ok"], dump([status["ok"], metrics["ok"]]))
        # The victim's session and load are untouched.
        job = victim.load(b.listen, "victim-1", keys, range(4))
        result = victim.wait_jobs([job], timeout=20)[job]
        self.assertTrue(result["success"], dump(result))
        self.assertNotIn("disconnected by operator", a.log_text())
        self.stop(attacker)
        # An operator group (supplementary) may.
        a2 = self.start_daemon("a2", BLOCK_LEN, extra=["--operator-gid", str(PUBLISHER_GID)])
        self.open_socket(a2)
        with a2.client() as c:
            c.connect(b.listen)
        op, (answer,) = self.run_as(a2, [{"op": "disconnect", "peer": b.listen}], uid=GROUP_UID, gid=GROUP_GID,
                                    extra_groups=[PUBLISHER_GID])
        self.assertTrue(answer["ok"], dump(answer))
        self.stop(op)

    def test_a_region_passed_by_descriptor_gives_other_engines_no_path_to_it(self):
        """Finding 5's region half: with by-path regions group read-write, engine B read engine A's
        region and overwrote its block 0. A region passed by descriptor (the recommended path,
        deployment.md "Groups") has no path: B, another uid, can open neither A's descriptors nor
        the daemon's (/proc/PID/fd needs ptrace rights over the process)."""
        a = self.start_daemon("a", BLOCK_LEN)
        self.open_socket(a)
        engine_a, answers = self.run_as(a, [hello_request(name="a"),
                                            {"op": "register_region", "fd": True, "num_blocks": 8}])
        self.assertTrue(all(answer["ok"] for answer in answers), dump(answers))
        probe = ("import os, sys, json\n"
                 "opened = []\n"
                 "for pid in sys.argv[1:]:\n"
                 "    d = f'/proc/{pid}/fd'\n"
                 "    try:\n"
                 "        names = os.listdir(d)\n"
                 "    except OSError:\n"
                 "        names = [str(n) for n in range(64)]\n"
                 "    for n in names:\n"
                 "        try:\n"
                 "            os.close(os.open(f'{d}/{n}', os.O_RDWR))\n"
                 "            opened.append(f'{d}/{n}')\n"
                 "        except OSError:\n"
                 "            pass\n"
                 "print(json.dumps(opened))\n")
        python = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable

        def opened_by(uid, gid):
            r = subprocess.run([python, "-c", probe, str(engine_a.pid), str(a.pid)], user=uid, group=gid,
                               capture_output=True, timeout=30, cwd="/")
            self.assertEqual(r.returncode, 0, r.stderr.decode())
            return json.loads(r.stdout)

        self.assertEqual(opened_by(GROUP_UID, GROUP_GID), [],
                         "another uid opened a descriptor of the engine or the daemon")
        # The probe does find the region when it may: as engine A's own uid.
        self.assertTrue(any(f"/proc/{engine_a.pid}/fd/" in path for path in opened_by(NOBODY, NOBODY)))
        self.stop(engine_a)

    # ---- finding 6: SIGBUS sent by a process ----------------------------------------------------

    def test_sigbus_sent_with_kill_neither_kills_the_daemon_nor_removes_the_guard(self):
        a = self.start_daemon("a", BLOCK_LEN)
        b = self.start_daemon("b", BLOCK_LEN)
        os.kill(a.pid, signal.SIGBUS)  # before any block was hashed
        time.sleep(0.3)
        self.assertTrue(a.running, "kvpeerd died of a SIGBUS sent with kill()\n" + a.log_tail(20))
        producer = self.engine(a, 16, BLOCK_LEN, name="producer", region="shm")
        keys = make_keys("sigbus", 4)
        producer.fill_and_publish(keys, range(4), seal=True)  # hashed: the guard is in use
        for _ in range(3):
            os.kill(a.pid, signal.SIGBUS)
        time.sleep(0.3)
        self.assertTrue(a.running, "kvpeerd died of a SIGBUS sent with kill()\n" + a.log_tail(20))
        consumer = self.engine(b, 16, BLOCK_LEN, name="consumer")
        self.assertEqual(self.load_and_verify(consumer, a, "sigbus-1", keys), [True] * 4)
        # The guard is still there: a region flipped to 0 bytes while it is hashed (sealed
        # publishes and served blocks) costs the reads, not the daemon.
        more = make_keys("sigbus-more", 8)
        producer.fill(more, range(4, 12))
        stop = threading.Event()

        def flip():
            while not stop.is_set():
                os.ftruncate(producer.region.fd, 0)
                os.ftruncate(producer.region.fd, 16 * BLOCK_LEN)

        flipper = threading.Thread(target=flip)
        flipper.start()
        try:
            deadline = time.monotonic() + 3
            while time.monotonic() < deadline:
                try:
                    producer.client.publish(more, list(range(4, 12)), seal=True)
                except KvpeerError:
                    pass  # any answer will do; the daemon must live
        finally:
            stop.set()
            flipper.join()
        self.assertTrue(a.running, "kvpeerd died hashing a flipped region after kill -BUS\n" + a.log_tail(20))
        self.assertIn("node_id", a.status())


if __name__ == "__main__":
    unittest.main()
