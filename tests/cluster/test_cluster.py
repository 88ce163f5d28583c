"""Scenarios on a cluster of namespaced hosts (cluster.py): full-mesh traffic,
real link faults (nft drop, nft reject with tcp reset, interface down,
daemon SIGKILL), the CIDR allowlist and the per-source handshake bound with
real distinct source addresses, and htb shaping.

Each asserts exactly-once results (the simulator raises on a second result,
and a missing one fails the wait), byte-verified loads, and that every
daemon is quiet after the traffic: no loads in flight, no rounds serving or
open, and every published slot released on unpublish (no pin left).

Figures (detection times, shaped rate, lookup p99) are printed as
`FIGURE name = value unit` and appended to $KVPEER_CLUSTER_FIGURES.
"""

import json
import os
import subprocess
import sys
import time
import unittest

import cluster as C
from kvpeer_testing import logs, wait

LIVENESS_S = 10.0  # wire-protocol.md section 4 step 8 (fixed)
MiB = 1 << 20


class ClusterTestCase(unittest.TestCase):
    def make(self, n, block_len=65536, daemon_args=(), extra_hosts=(), start=True):
        reason = C.skip_reason()
        if reason:
            if C.required():
                self.fail(f"cluster tests are required here but cannot run: {reason}")
            self.skipTest(reason)
        cl = C.Cluster(n, block_len=block_len, daemon_args=daemon_args, extra_hosts=extra_hosts)
        self.cl = cl
        self.addCleanup(self._close)
        if start:
            cl.start_daemons(cl.hosts[:n])
        return cl

    def _close(self):
        failed = logs.test_failed(self)
        if failed:
            logs.print_tails(self.id(), [h.daemon for h in self.cl.hosts if h.daemon is not None])
        prefix = self.cl.prefix
        self.cl.close()
        self.assertEqual(C.leftover_namespaces(prefix), [], "namespaces left behind")
        if not failed:
            self.assertEqual(self.cl.stop_problems, [], "daemons did not stop cleanly")

    def assert_quiet(self, publishers=()):
        """No work in flight anywhere; every (agent, prefix, count) in `publishers` unpublishes with no
        slot still pinned."""
        problems = self.cl.quiesce_check(timeout=30)
        self.assertEqual(problems, [], "work left in flight after quiescence")
        for agent, prefix, count in publishers:
            r = agent.call(op="unpublish", prefix=prefix, count=count, wait=15.0)
            self.assertEqual(r["still_pinned"], [], f"{agent.name}: slots never released: {r}")
            self.assertEqual(len(r["released"]) + len(r["pinned"]), count)
            if r["pinned"]:
                sys.stderr.write(f"{agent.name}: {len(r['pinned'])} slots were pinned at unpublish, released "
                                 f"{r['release_wait_s']:.2f} s later\n")

    def peer_entry(self, host, peer):
        for p in host.daemon.status()["peers"]:
            if p["peer_id"] == peer.node_id:
                return p
        return None

    def wait_until(self, pred, timeout, what):
        return wait.wait_until(pred, timeout, what, interval=0.02)


class MeshTest(ClusterTestCase):
    N = 8
    KEYS = 32

    def test_full_mesh_symmetric(self):
        cl = self.make(self.N)
        agents = [cl.agent(h, 2 * self.KEYS) for h in cl.hosts]
        for h, a in zip(cl.hosts, agents):
            a.send(op="publish", prefix=f"pub-{h.node_id}", count=self.KEYS)
        for a in agents:
            self.assertEqual(a.recv()["published"], self.KEYS)
        total = 0
        t0 = time.monotonic()
        for r in range(1, self.N):  # round r: host i loads from host i+r, all hosts at once
            for i, a in enumerate(agents):
                peer = cl.hosts[(i + r) % self.N]
                a.send(op="fetch", peer=peer.node_id, prefix=f"pub-{peer.node_id}", count=self.KEYS,
                       slot0=self.KEYS, batch=16)
            for i, a in enumerate(agents):
                rep = a.recv()
                self.assertTrue(rep["ok"], rep)
                self.assertEqual((rep["hits"], rep["jobs_failed"], rep["bad_blocks"]), (self.KEYS, 0, 0), rep)
                self.assertEqual(rep["bytes"], self.KEYS * cl.block_len)
                total += rep["bytes"]
        C.record_figure("mesh8_symmetric_pairs_loaded", self.N * (self.N - 1))
        C.record_figure("mesh8_symmetric_seconds", round(time.monotonic() - t0, 2), "s")
        for h in cl.hosts:  # everyone connected to everyone
            ready = [p for p in h.daemon.status()["peers"] if p["state"] == "ready"]
            self.assertEqual(len(ready), self.N - 1, h.name)
        self.assert_quiet([(a, f"pub-{h.node_id}", self.KEYS) for h, a in zip(cl.hosts, agents)])

    def test_full_mesh_disaggregated(self):
        cl = self.make(self.N)
        agents = [cl.agent(h, 2 * self.KEYS) for h in cl.hosts]
        # No session is opened first: in round N/2 every pair loads from each other at once, so the
        # first contacts there are crossed dials, and their loads must go over the surviving
        # connection (CrossedDialTest).
        t0 = time.monotonic()
        for r in range(1, self.N):  # round r: host i+r decodes from prefill host i
            for i, a in enumerate(agents):
                a.send(op="supply", kv=f"pd-r{r}-from-{i}", prefix=f"pd-{r}-{i}", count=self.KEYS, batch=16)
            stores = [a.recv()["jobs"] for a in agents]
            for i in range(self.N):
                consumer = agents[(i + r) % self.N]
                consumer.send(op="fetch", peer=cl.hosts[i].node_id, prefix=f"pd-{r}-{i}", count=self.KEYS,
                              slot0=self.KEYS, pd=True, kv=f"pd-r{r}-from-{i}", batch=16)
            for i in range(self.N):
                rep = agents[(i + r) % self.N].recv()
                self.assertTrue(rep["ok"], rep)
                self.assertEqual((rep["jobs_ok"], rep["jobs_failed"], rep["bad_blocks"]), (2, 0, 0), rep)
            for a, jobs in zip(agents, stores):
                done = a.call(op="wait", jobs=jobs, timeout=30)["jobs"]
                self.assertTrue(all(j["result"] and j["result"]["success"] for j in done), done)
        C.record_figure("mesh8_disaggregated_seconds", round(time.monotonic() - t0, 2), "s")
        self.assert_quiet()


class CrossedDialTest(ClusterTestCase):
    """Two hosts with no session yet each load (disaggregated, no probe first) from the other at the
    same moment: both dial, and the wire spec's duplicate rule closes one of the two connections
    with disconnect{reason:"duplicate"}. Found by the 8-host disaggregated mesh: a load queued on
    the losing connection used to fail ("duplicate") and the producer's store for it stayed parked
    until the 60 s parked-supply timeout. Now the losing session hands back what the peer never
    served and the daemon asks again over the surviving connection (docs/wire-protocol.md, section
    9, "(f) Work on a superseded connection"). Asserted: no load fails, exactly one result per load
    and per store, every store delivered, right bytes, nothing pinned or in flight after; the
    figure crossed_dial_duplicates counts the duplicate closes the tries really caused."""

    TRIES = 16
    KEYS = 16

    def test_crossed_first_dial(self):
        cl = self.make(2)
        a, b = cl.hosts
        ea, eb = cl.agent(a, 2 * self.KEYS * self.TRIES, name="A"), cl.agent(b, 2 * self.KEYS * self.TRIES, name="B")
        failed = 0
        reasons = {}
        stores = {ea: [], eb: []}
        for t in range(self.TRIES):
            base = 2 * self.KEYS * t  # every try its own slots: parked stores keep theirs pinned
            for e, mine in ((ea, "A"), (eb, "B")):
                stores[e] += e.call(op="supply", kv=f"x{t}-from-{mine}", prefix=f"x{t}-{mine}", count=self.KEYS,
                                    batch=8, slot0=base + self.KEYS)["jobs"]
            # Both loads at once, no session between the two yet.
            ea.send(op="fetch", peer=b.node_id, prefix=f"x{t}-B", count=self.KEYS, pd=True, kv=f"x{t}-from-B",
                    batch=8, slot0=base, timeout=30)
            eb.send(op="fetch", peer=a.node_id, prefix=f"x{t}-A", count=self.KEYS, pd=True, kv=f"x{t}-from-A",
                    batch=8, slot0=base, timeout=30)
            for e in (ea, eb):
                rep = e.recv()
                self.assertTrue(rep["ok"], rep)  # every load had its one result
                self.assertEqual(rep["bad_blocks"], 0, rep)
                failed += rep["jobs_failed"]
                for r in rep["reasons"]:
                    reasons[r] = reasons.get(r, 0) + 1
            # A fresh first contact for the next try.
            with C.Client(a.daemon.socket_path) as ctl:
                try:
                    ctl.disconnect(b.node_id)
                except C.KvpeerError:
                    pass
            self.wait_until(lambda: all(p["state"] != "ready" for p in a.daemon.status()["peers"]) and
                            all(p["state"] != "ready" for p in b.daemon.status()["peers"]), 10, "session closed")
        duplicates = sum(self.closes_as_duplicate(h) for h in (a, b))
        C.record_figure("crossed_dial_loads_failed", failed, f"of {2 * 2 * self.TRIES}")
        C.record_figure("crossed_dial_duplicates", duplicates, f"in {self.TRIES} tries")
        sys.stderr.write(f"crossed first dials: {duplicates} duplicate closes, {failed} of "
                         f"{4 * self.TRIES} loads failed: {reasons}\n")
        self.assertEqual(failed, 0, reasons)
        # Every store job has its one result, and each was fetched: none waited out the parked timeout.
        for e in (ea, eb):
            done = e.call(op="wait", jobs=stores[e], timeout=30)["jobs"]
            lost = [j for j in done if j["result"] is None]
            self.assertEqual(lost, [], f"{e.name}: store jobs without a result")
            parked = [j for j in done if not j["result"]["success"]]
            self.assertEqual(parked, [], f"{e.name}: stores that failed")
        self.assert_quiet()

    @staticmethod
    def closes_as_duplicate(host):
        """Peer connections this host's daemon closed, or saw closed, as duplicates (its log)."""
        with open(host.daemon.log_path, errors="replace") as log:
            return sum(1 for line in log if line.rstrip().endswith(": duplicate"))


class FaultTest(ClusterTestCase):
    """A consumer A loads a large object from B over a link slowed with htb (so
    the load is mid-transfer when the fault hits); C is an unaffected peer."""

    BLOCK = MiB
    BLOCKS = 48  # 48 MiB at 64 Mbit/s: about 6 s

    def setup_three(self):
        cl = self.make(3, block_len=self.BLOCK)
        a, b, c = cl.hosts
        ea = cl.agent(a, 2 * self.BLOCKS, name="A")
        eb = cl.agent(b, self.BLOCKS, name="B")
        ec = cl.agent(c, 8, name="C")
        eb.call(op="publish", prefix="big", count=self.BLOCKS)
        ec.call(op="publish", prefix="small", count=8)
        b.shape(64)
        return cl, (a, b, c), (ea, eb, ec)

    def start_mid_transfer(self, cl, a, b, ea):
        start = ea.call(op="load_start", peer=b.node_id, prefix="big", count=self.BLOCKS)
        # Mid-transfer: some MiB already arrived, most still to come.
        self.wait_until(lambda: (self.peer_entry(a, b) or {}).get("bytes_received", 0) > 4 * MiB, 10,
                        "first 4 MiB of the load")
        return start

    def check_detect(self, name, fault, heal, bound_s):
        cl, (a, b, c), (ea, eb, ec) = self.setup_three()
        start = self.start_mid_transfer(cl, a, b, ea)
        t_fault = time.monotonic()
        fault(a, b)
        # Other pairs unaffected: A loads from C meanwhile.
        rep = ea.call(op="fetch", peer=c.node_id, prefix="small", count=8, slot0=self.BLOCKS)
        self.assertEqual((rep["hits"], rep["jobs_failed"], rep["bad_blocks"]), (8, 0, 0), rep)
        done = ea.call(op="wait", jobs=[start["job"]], timeout=LIVENESS_S + 30)["jobs"][0]
        self.assertIsNotNone(done["result"], "the load got no result")
        self.assertFalse(done["result"]["success"], "the load cannot have succeeded across the fault")
        detect = done["arrived"] - t_fault
        C.record_figure(f"detect_{name}_s", round(detect, 3), "s")
        sys.stderr.write(f"{name}: failure after {detect:.3f} s: {done['result'].get('reason')}\n")
        self.assertLess(detect, bound_s, f"{name}: the load's failure came after {detect:.2f} s")
        ea.call(op="finish", kv=start["kv"])
        heal(a, b)
        b.unshape()
        # After the heal new loads succeed (the probe redials on demand).
        rep = ea.call(op="fetch", peer=b.node_id, prefix="big", count=8, slot0=self.BLOCKS, timeout=60)
        self.assertEqual((rep["hits"], rep["jobs_failed"], rep["bad_blocks"]), (8, 0, 0), rep)
        self.assert_quiet([(eb, "big", self.BLOCKS), (ec, "small", 8)])
        return detect

    def test_silent_partition(self):
        def cut(a, b):
            a.block(b)
            b.block(a)

        def heal(a, b):
            a.unblock()
            b.unblock()
        # The liveness timeout (10 s without a byte) plus the tick and poll slack.
        self.check_detect("silent_partition", cut, heal, LIVENESS_S + 1.5)

    def test_reset(self):
        """The producer's host answers the consumer's segments (its ACKs) with TCP resets: the
        consumer, which sends ACKs all along, learns at once."""
        self.check_detect("reset", lambda a, b: b.block(a, how="reset"), lambda a, b: b.unblock(), 1.0)

    def test_reset_both_ways(self):
        """Both hosts answer the other's segments with resets. The consumer's own ACKs never reach
        the producer's stack (its host rejects the data first), so the consumer learns when it next
        sends something: its ping, after 2 s without sending."""
        def cut(a, b):
            a.block(b, how="reset")
            b.block(a, how="reset")

        def heal(a, b):
            a.unblock()
            b.unblock()
        self.check_detect("reset_both_ways", cut, heal, 2.5)

    def test_interface_down_up(self):
        self.check_detect("interface_down", lambda a, b: b.link(False), lambda a, b: b.link(True),
                          LIVENESS_S + 1.5)

    def test_daemon_kill_and_restart(self):
        cl, (a, b, c), (ea, eb, ec) = self.setup_three()
        start = self.start_mid_transfer(cl, a, b, ea)
        t_fault = time.monotonic()
        b.daemon.kill()
        done = ea.call(op="wait", jobs=[start["job"]], timeout=LIVENESS_S + 30)["jobs"][0]
        self.assertIsNotNone(done["result"])
        self.assertFalse(done["result"]["success"])
        detect = done["arrived"] - t_fault
        C.record_figure("detect_daemon_kill_s", round(detect, 3), "s")
        self.assertLess(detect, 1.0)
        ea.call(op="finish", kv=start["kv"])
        eb.close()
        b.unshape()
        # Restarted: a new daemon run (new epoch) serves new loads.
        cl.start_daemon(b)
        eb2 = cl.agent(b, self.BLOCKS, name="B2")
        eb2.call(op="publish", prefix="big", count=self.BLOCKS)
        rep = ea.call(op="fetch", peer=b.node_id, prefix="big", count=8, slot0=self.BLOCKS, timeout=60)
        self.assertEqual((rep["hits"], rep["jobs_failed"], rep["bad_blocks"]), (8, 0, 0), rep)
        # Peers see the new epoch: B killed while cut off from A, so A still holds the old
        # session as ready; B's new run dials A and A closes the old session as a restart.
        self.wait_until(lambda: (self.peer_entry(a, b) or {}).get("state") == "ready", 10, "A-B ready")
        a.block(b)
        b.block(a)
        eb2.close()
        b.daemon.kill()
        cl.start_daemon(b)
        a.unblock()
        b.unblock()
        self.assertEqual((self.peer_entry(a, b) or {}).get("state"), "ready", "A still sees the old session")
        t_dial = time.monotonic()
        with C.Client(b.daemon.socket_path) as ctl:
            ctl.connect(a.node_id)
        self.wait_until(lambda: f"peer {b.node_id}: restarted (new epoch)" in a.daemon.log_text(), 5,
                        "A logging B's new epoch")
        C.record_figure("restart_seen_by_peer_s", round(time.monotonic() - t_dial, 3), "s")
        eb3 = cl.agent(b, self.BLOCKS, name="B3")
        eb3.call(op="publish", prefix="big", count=8)
        rep = ea.call(op="fetch", peer=b.node_id, prefix="big", count=8, slot0=self.BLOCKS, timeout=60)
        self.assertEqual((rep["hits"], rep["jobs_failed"], rep["bad_blocks"]), (8, 0, 0), rep)
        self.assert_quiet([(eb3, "big", 8), (ec, "small", 8)])


class AdmissionTest(ClusterTestCase):
    def probe(self, host, target, n, watch=1.0, hold=0.0):
        p = subprocess.Popen(["ip", "netns", "exec", host.ns, sys.executable,
                              os.path.join(os.path.dirname(os.path.abspath(__file__)), "tcp_probe.py"),
                              target.addr, str(C.PORT), str(n), "--watch", str(watch), "--hold", str(hold)],
                             stdout=subprocess.PIPE, text=True)
        line = p.stdout.readline()
        p.stdout.close()
        return p, json.loads(line)["conns"]

    def test_allowlist_and_per_source_handshake_bound(self):
        cl = self.make(3, daemon_args=(), extra_hosts=[(f"{C.NET}.1.66", "attacker")], start=False)
        server, friend, crowd, attacker = cl.hosts
        cl.start_daemon(server, extra=["--allow-cidr", f"{C.NET}.0.0/24", "--max-handshaking-per-source", "2"])
        cl.start_daemons([friend, crowd])
        es = cl.agent(server, 16, name="S")
        es.call(op="publish", prefix="pub", count=16)
        # The attacker (outside 10.213.0.0/24) is refused at accept: closed before it sends a byte.
        p, conns = self.probe(attacker, server, 3, watch=2.0)
        p.wait()
        for conn in conns:
            self.assertTrue(conn["connected"], conn)
            self.assertIn(conn.get("closed"), ("eof", "reset"), f"attacker connection not closed: {conn}")
            self.assertLess(conn["closed_after_s"], 0.5)
        counters = server.daemon.status()["counters"]
        self.assertEqual(counters["peer_connections_refused_allow_cidr"], 3)
        # A crowd from one allowed address: 2 stalled handshakes are allowed, the next ones closed at once.
        p, conns = self.probe(crowd, server, 5, watch=1.0, hold=4.0)
        try:
            open_ = [c for c in conns if "closed" not in c]
            closed = [c for c in conns if "closed" in c]
            self.assertEqual(len(open_), 2, conns)
            self.assertEqual(len(closed), 3, conns)
            self.assertEqual(server.daemon.status()["counters"]["limit_max_handshaking_per_source"], 3)
            # Another source is not held back by that crowd: it connects and loads meanwhile.
            ef = cl.agent(friend, 16, name="F")
            rep = ef.call(op="fetch", peer=server.node_id, prefix="pub", count=16)
            self.assertEqual((rep["hits"], rep["jobs_failed"], rep["bad_blocks"]), (16, 0, 0), rep)
        finally:
            p.wait()
        self.assert_quiet([(es, "pub", 16)])


class ShapedTest(ClusterTestCase):
    MBIT = 200
    BLOCKS = 256  # x 1 MiB = 256 MiB

    def test_shaped_link(self):
        cl = self.make(2, block_len=MiB)
        a, b = cl.hosts
        eb = cl.agent(b, self.BLOCKS, name="B")
        ea = cl.agent(a, self.BLOCKS, name="A")
        looker = cl.agent(a, 4, name="A-lookups")
        eb.call(op="publish", prefix="big", count=self.BLOCKS)
        with C.Client(a.daemon.socket_path) as ctl:
            ctl.connect(b.node_id)
        b.shape(self.MBIT)
        start = ea.call(op="load_start", peer=b.node_id, prefix="big", count=self.BLOCKS)
        expect_s = self.BLOCKS * MiB * 8 / (self.MBIT * 1e6)
        looker.send(op="lookups", peer=b.node_id, seconds=expect_s * 0.8)
        done = ea.call(op="wait", jobs=[start["job"]], timeout=expect_s * 3)["jobs"][0]
        lk = looker.recv()
        self.assertTrue(done["result"] and done["result"]["success"], done)
        self.assertEqual(done["bad_blocks"], 0)
        seconds = done["arrived"] - done["submitted"]
        mbit = self.BLOCKS * MiB * 8 / seconds / 1e6
        C.record_figure("shaped_200mbit_load_256MiB_s", round(seconds, 2), "s")
        C.record_figure("shaped_200mbit_goodput", round(mbit, 1), "Mbit/s")
        C.record_figure("shaped_lookup_p50_ms", round(lk["p50"] * 1000, 2), "ms")
        C.record_figure("shaped_lookup_p99_ms", round(lk["p99"] * 1000, 2), "ms")
        C.record_figure("shaped_lookups_answered", lk["n"])
        self.assertEqual(lk["errors"], 0, lk)
        self.assertGreater(lk["n"], 10, lk)
        self.assertLess(abs(mbit - self.MBIT) / self.MBIT, 0.10, f"{mbit:.1f} Mbit/s on a {self.MBIT} Mbit/s link")
        self.assert_quiet([(eb, "big", self.BLOCKS)])


if __name__ == "__main__":
    unittest.main()
