#!/usr/bin/env python3
"""kvpeer soak test: thousands of random requests across 3+ real nodes while
faults fire, with an invariant checker.

Topology: N kvpeerd processes on 127.0.0.1, each behind its own FaultProxy;
a node's id is its proxy's address, so every peer connection crosses a proxy
the fault injector controls. Each node has E engines (SimEngine-style, one
worker thread each) that publish key-derived blocks, churn them (unpublish,
refill only slots the daemon released), probe and load from other nodes
(symmetric), pair up for disaggregated prefill (store on one node, load on
another), and finish requests at random, some while their loads are moving.

Faults, one at a time, every few seconds: proxy cut (FIN/RST), short and long
stalls, delay, throttle, a corrupted frame header or magic (either direction),
SIGSTOP/SIGCONT of a daemon, a daemon restarted with SIGTERM (its engines drain
their results, then re-attach to the new process), a daemon killed with -9 and
restarted (its engines' outstanding jobs are orphaned by definition and counted
apart), an engine that stops polling for a few seconds, an engine that crashes
(abrupt close) and comes back with a new region.

Invariants (any violation fails the run, exit status 1):
  * every job (load or store) gets exactly one result (lost = 0, duplicates = 0);
  * every successful load's bytes are verified (wrong = 0);
  * every failed job carries a reason (no_reason = 0); every refused request
    carries an error code;
  * after quiescence: no loads in flight and no rounds served anywhere, every
    published slot released on unpublish (pins leaked = 0);
  * no file-descriptor growth, anonymous RSS bounded, every daemon exits 0 on
    SIGTERM, no daemon dies on its own;
  * no checksum failure (counters.checksum_failures = 0 on every daemon, and
    no "checksum mismatch" in any log, which also covers processes that were
    restarted): the corruption faults hit only headers and magic, which
    close the session, so no block may land with bytes its producer did not
    send.

    PYTHONPATH=tests/pylib:clients/python \
        tests/soak/soak.py [--seconds S] [--nodes N] [--engines E] [--seed X] [--bin-dir DIR]

S defaults to $KVPEER_SOAK_SECONDS or 180 (plus up to ~90 s of set-up and
quiescence, so CI stays near 5 minutes); pass a larger --seconds for a long run.
The shared parts are in soak_common.py, an engine's worker in soak_worker.py.

Prints one summary line starting with "SOAK " and, with --json FILE, the
figures as JSON.
"""

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter

from kvpeer_testing.fault_tools import proc_fds
from kvpeer import KvpeerError
from soak_common import LOAD_TIMEOUT_S, STORE_UNMATCHED_S, Node, Stats, log, rss_anon_kb
from soak_worker import Worker


class Soak:

    def __init__(self, args):
        self.args = args
        self.rng = random.Random(args.seed)
        self.stats = Stats()
        self.workdir = tempfile.mkdtemp(prefix="kvpeer-soak-")
        self.nodes = []
        self.workers = []
        self.directory = {}  # node index -> {engine: set(keys)}
        self.dir_lock = threading.Lock()
        self.ready = threading.Event()
        self.stop_faults = threading.Event()
        self.faults = Counter()
        self.t_end = None
        self.node_lock = threading.Lock()  # restarts and liveness checks, one at a time

    # -- shared state for workers ----------------------------------------------

    def directory_set(self, node, engine, keys):
        with self.dir_lock:
            self.directory.setdefault(node, {})[engine] = list(keys)

    def directory_sample(self, node, rng, n):
        with self.dir_lock:
            pool = [k for keys in self.directory.get(node, {}).values() for k in keys]
        return rng.sample(pool, min(n, len(pool))) if pool else []

    def other_node(self, node, rng):
        return rng.choice([n for n in self.nodes if n is not node])

    def pick_worker(self, exclude_node, rng):
        choices = [w for w in self.workers if w.node is not exclude_node and not w.node.draining
                   and not w.node.killing]
        return rng.choice(choices) if choices else None

    def pd_allowed(self):
        # Unmatched supply lingers 60 s; none may be created that late.
        return time.monotonic() < self.t_end - STORE_UNMATCHED_S - 5

    # -- fault injection ---------------------------------------------------------

    FAULTS = ["cut", "cut_rst", "stall", "delay", "throttle", "corrupt_header", "corrupt_magic_up", "sigstop",
              "restart_term", "restart_kill9", "stall_long", "engine_pause", "engine_crash"]

    def inject(self):
        rng = random.Random(self.args.seed + 1)
        order = []
        while not self.stop_faults.is_set() and time.monotonic() < self.t_end - 15:
            if self.stop_faults.wait(rng.uniform(2, 5)):
                break
            if not order:
                order = list(self.FAULTS)
                rng.shuffle(order)
                if "stall_long" in order and rng.random() < 0.5:
                    order.remove("stall_long")  # every other cycle: it costs 12 s
            kind = order.pop()
            node = rng.choice(self.nodes)
            try:
                if kind.startswith("restart"):
                    with self.node_lock:
                        self.fire(kind, node, rng)
                else:
                    self.fire(kind, node, rng)
                self.faults[kind] += 1
            except Exception as e:
                self.stats.violation("fault_injection_failed", f"{kind} on {node.daemon.name}: {e!r}\n"
                                                               f"{traceback.format_exc()}")
            self.check_alive()

    def fire(self, kind, node, rng):
        p = node.proxy
        log(f"fault {kind} on node{node.index}")
        if kind in ("cut", "cut_rst"):
            p.cut(rst=kind == "cut_rst")
        elif kind == "stall":
            p.stall()
            time.sleep(rng.uniform(0.5, 3))
            p.pass_through()
        elif kind == "stall_long":
            p.stall()
            time.sleep(12)  # past the 10 s liveness timeout
            p.pass_through()
        elif kind == "delay":
            p.delay(rng.choice([20, 50, 100]))
            time.sleep(rng.uniform(2, 5))
            p.pass_through()
        elif kind == "throttle":
            p.throttle(rng.choice([1, 4]) * 1024 * 1024)
            time.sleep(rng.uniform(2, 5))
            p.pass_through()
        elif kind == "corrupt_header":
            c = p.corrupt("down", where="header", nth=rng.randint(0, 5))
            c.fired.wait(5)
            p.disarm()
        elif kind == "corrupt_magic_up":
            c = p.corrupt("up", where="magic", nth=rng.randint(0, 5))
            c.fired.wait(5)
            p.disarm()
        elif kind == "sigstop":
            node.daemon.pause()
            node.stopped = True
            time.sleep(rng.uniform(0.5, 3))
            node.daemon.resume()
            node.stopped = False
        elif kind == "restart_term":
            workers = [w for w in self.workers if w.node is node]
            with node.cond:
                node.draining = True
            deadline = time.monotonic() + 30
            for w in workers:
                w.drained.wait(max(0.0, deadline - time.monotonic()))
            for w in workers:
                if not w.drained.is_set():
                    w.late_drain = True
                    self.stats.add("late_drains")
            code = node.daemon.stop()
            if code != 0:
                self.stats.violation("bad_exit", f"{node.daemon.name} exited {code} after SIGTERM")
            node.restart()
        elif kind == "engine_pause":
            w = rng.choice([w for w in self.workers if w.node is node])
            w.pause_s = rng.uniform(1, 4)
        elif kind == "engine_crash":
            w = rng.choice([w for w in self.workers if w.node is node])
            w.crash.set()
        elif kind == "restart_kill9":
            with node.cond:
                node.killing = True
                node.expected_dead = True
            node.daemon.kill()
            node.restart()

    def check_alive(self):
        with self.node_lock:
            self._check_alive()

    def _check_alive(self):
        for n in self.nodes:
            d = n.daemon
            if d.proc.poll() is not None and not n.expected_dead and not n.draining:
                self.stats.violation("daemon_died", f"{d.name} exited with {d.proc.returncode}\n{d.log_tail(30)}")
                n.expected_dead = True
                n.restart()

    # -- quiescence checks ---------------------------------------------------------

    def disconnect_all(self, node):
        st = node.daemon.status()
        with node.daemon.client() as c:
            for p in st["peers"]:
                if p["state"] in ("ready", "handshaking", "connecting"):
                    try:
                        c.disconnect(p["peer_id"])
                    except KvpeerError:
                        pass

    def measure(self, node):
        """Open fds and anonymous RSS with every peer session closed (so the
        count does not depend on which sessions happen to be open)."""
        self.disconnect_all(node)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            st = node.daemon.status()
            if all(p["state"] not in ("ready", "handshaking", "connecting") for p in st["peers"]):
                break
            time.sleep(0.1)
        time.sleep(0.3)
        return proc_fds(node.daemon.pid), rss_anon_kb(node.daemon.pid)

    def quiescence_checks(self):
        results = {}
        # Everything settles: no loads in flight, no rounds served.
        deadline = time.monotonic() + 20
        busy = None
        while time.monotonic() < deadline:
            busy = []
            for n in self.nodes:
                st = n.daemon.status()
                for e in st["engines"]:
                    if e["loads_in_flight"]:
                        busy.append((n.daemon.name, "engine", e["client"], e["loads_in_flight"]))
                for p in st["peers"]:
                    if p["loads_in_flight"] or p["rounds_serving"]:
                        busy.append((n.daemon.name, "peer", p["peer_id"], p["loads_in_flight"], p["rounds_serving"]))
            if not busy:
                break
            time.sleep(0.2)
        if busy:
            self.stats.violation("not_quiescent", json.dumps(busy)[:2000])
        results["busy_after_quiescence"] = len(busy or [])
        # Checksums (wire spec section 7): nothing here flips payload bytes.
        results["checksum_failures"] = {}
        for n in self.nodes:
            count = n.daemon.status()["counters"].get("checksum_failures", 0)  # absent until the first one
            results["checksum_failures"][n.daemon.name] = count
            if count:
                self.stats.violation("checksum_failures", f"{n.daemon.name}: counters.checksum_failures = {count}")
        # Pins: withdraw everything; every slot must be released.
        leaked = 0
        for w in self.workers:
            keys_by_slot = dict(w.published)
            if not keys_by_slot:
                continue
            slots = sorted(keys_by_slot)
            r = w.client.unpublish([keys_by_slot[s] for s in slots])
            if sorted(r["released"] + r["pinned"]) != slots:
                self.stats.violation("unpublish_mismatch", f"{w.name_}: {r}")
            waiting = set(r["pinned"]) | w.waiting_release
            deadline = time.monotonic() + 15
            while waiting and time.monotonic() < deadline:
                got = w.client.poll(wait_ms=500)
                waiting -= set(got["released"])
                for res in got["results"]:
                    w.on_result(res)
            if waiting:
                leaked += len(waiting)
                self.stats.violation("pins_leaked", f"{w.name_}: slots {sorted(waiting)[:20]} never released")
            w.published.clear()
        results["pins_leaked"] = leaked
        # fds and memory against the baseline.
        fd_growth, rss = {}, {}
        for n in self.nodes:
            fds, anon = self.measure(n)
            fd_growth[n.daemon.name] = fds - n.fd_base
            rss[n.daemon.name] = (n.rss_base, anon)
            if fds - n.fd_base > 2:
                self.stats.violation("fd_growth", f"{n.daemon.name}: {n.fd_base} -> {fds} open descriptors "
                                                  f"(ls -l /proc/{n.daemon.pid}/fd)")
            if anon > 2 * n.rss_base + 64 * 1024:
                self.stats.violation("rss_growth", f"{n.daemon.name}: RssAnon {n.rss_base} -> {anon} kB")
        results["fd_growth"] = fd_growth
        results["rss_anon_kb"] = rss
        return results

    # -- the run -----------------------------------------------------------------

    def run(self):
        a = self.args
        started = time.monotonic()
        log(f"workdir {self.workdir}; {a.nodes} nodes x {a.engines} engines, {a.seconds} s of traffic, seed {a.seed}")
        for i in range(a.nodes):
            n = Node(i, self.workdir, [], a.log_level)
            n.start()
            self.nodes.append(n)
        for n in self.nodes:
            for e in range(a.engines):
                self.workers.append(Worker(self, n, e, random.Random(self.rng.random())))
        for w in self.workers:
            w.start()
        # Baselines: engines attached and published, no peer sessions.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(
                len(n.daemon.status()["engines"]) < a.engines for n in self.nodes):
            time.sleep(0.1)
        for n in self.nodes:
            n.fd_base, n.rss_base = self.measure(n)
        log("baseline fds " + ", ".join(f"node{n.index}={n.fd_base}" for n in self.nodes))
        self.t_end = time.monotonic() + a.seconds
        self.ready.set()
        injector = threading.Thread(target=self.inject, name="faults", daemon=True)
        if not a.no_faults:
            injector.start()
        next_report = time.monotonic() + 30
        while time.monotonic() < self.t_end:
            time.sleep(1)
            self.check_alive()
            for n in self.nodes:
                n.sample()
            if time.monotonic() >= next_report:
                next_report += 30
                c = self.stats.c
                log(f"{int(self.t_end - time.monotonic())} s left: requests {c['requests']}, loads ok "
                    f"{c['load_ok'] + c['pd_load_ok']}, failed {c['load_failed'] + c['pd_load_failed']}, "
                    f"faults {sum(self.faults.values())}, violations "
                    f"{sum(v for k, v in c.items() if k.startswith('violation:'))}")
            if any(w.error for w in self.workers):
                break
        self.stop_faults.set()
        if injector.is_alive():
            injector.join(40)
        for n in self.nodes:
            n.proxy.pass_through()
            n.proxy.disarm()
            if n.stopped:
                n.daemon.resume()
        log("quiescence: waiting for every outstanding result")
        for w in self.workers:
            w.quiesce.set()
        for w in self.workers:
            w.quiesced.wait(LOAD_TIMEOUT_S + STORE_UNMATCHED_S + 60)
        q = self.quiescence_checks()
        # Shut down: every daemon must exit 0 on SIGTERM.
        for w in self.workers:
            if w.client is not None:
                w.client.close()
        for n in self.nodes:
            code = n.daemon.stop()
            if code != 0:
                self.stats.violation("bad_exit", f"{n.daemon.name} exited {code} after SIGTERM")
            n.proxy.close()
        for w in self.workers:
            w.region.close()
        bad_logs = self.scan_logs()
        return self.summary(q, bad_logs, time.monotonic() - started)

    def scan_logs(self):
        """Crash and sanitizer markers in the daemons' logs."""
        found = []
        for n in self.nodes:
            text = n.daemon.log_text()
            for marker in ("AddressSanitizer", "UndefinedBehaviorSanitizer", "runtime error:", "LeakSanitizer",
                           "terminate called", "Assertion", " critical ", "checksum mismatch"):
                if marker in text:
                    found.append((n.daemon.name, marker))
                    self.stats.violation("log_marker", f"{n.daemon.name}: {marker}")
        return found

    def summary(self, q, bad_logs, elapsed):
        c = self.stats.c
        violations = {k[len("violation:"):]: v for k, v in c.items() if k.startswith("violation:")}
        figures = {
            "seconds": round(elapsed, 1),
            "nodes": self.args.nodes,
            "engines": self.args.nodes * self.args.engines,
            "requests": c["requests"],
            "lookups": c["lookups"],
            "loads_submitted": c["load_submitted"] + c["pd_load_submitted"],
            "loads_ok": c["load_ok"] + c["pd_load_ok"],
            "loads_failed": c["load_failed"] + c["pd_load_failed"],
            "stores_submitted": c["store_submitted"],
            "stores_ok": c["store_ok"],
            "stores_failed": c["store_failed"],
            "finish_races": c["finish_races"],
            "bytes_verified": c["bytes_verified"],
            "api_errors": dict(self.stats.api_errors),
            "faults": dict(self.faults),
            "faults_fired": sum(self.faults.values()),
            "restarts": sum(len(n.pids) - 1 for n in self.nodes),
            "reattached": c["reattached"],
            "orphaned_kill9": c["orphaned_kill9"],
            "orphaned_engine_crash": c["orphaned_engine_crash"],
            "engine_crashes": c["engine_crashes"],
            "lost": c["lost"],
            "duplicates": violations.get("duplicate_result", 0),
            "wrong": c["blocks_wrong"],
            "no_reason": violations.get("no_reason", 0),
            "pins_leaked": q["pins_leaked"],
            "checksum_failures": q["checksum_failures"],
            "busy_after_quiescence": q["busy_after_quiescence"],
            "fd_growth": q["fd_growth"],
            "rss_anon_kb": q["rss_anon_kb"],
            "rss_anon_peak_kb": {n.daemon.name: n.rss_peak for n in self.nodes},
            "fds_peak": {n.daemon.name: n.fds_peak for n in self.nodes},
            "failure_reasons": dict(self.stats.reasons.most_common(15)),
            "violations": violations,
        }
        ok = not violations
        line = (f"SOAK {'PASS' if ok else 'FAIL'} requests={figures['requests']} loads={figures['loads_submitted']} "
                f"ok={figures['loads_ok']} failed={figures['loads_failed']} stores={figures['stores_submitted']} "
                f"faults={figures['faults_fired']} restarts={figures['restarts']} lost={figures['lost']} "
                f"duplicates={figures['duplicates']} wrong={figures['wrong']} no_reason={figures['no_reason']} "
                f"pins_leaked={figures['pins_leaked']} orphaned_kill9={figures['orphaned_kill9']} "
                f"checksum_failures={sum(figures['checksum_failures'].values())} "
                f"fd_growth={max(figures['fd_growth'].values()) if figures['fd_growth'] else 0} "
                f"rss_anon_kb={'/'.join(f'{b}->{e}' for b, e in figures['rss_anon_kb'].values())} "
                f"rss_anon_peak_kb={max(figures['rss_anon_peak_kb'].values())} "
                f"fds_peak={max(figures['fds_peak'].values())} "
                f"verified_MB={figures['bytes_verified'] // 1000000} seconds={figures['seconds']}")
        print(json.dumps(figures, indent=1, sort_keys=True))
        if self.stats.violations:
            print("violations (first 20):")
            for kind, detail in self.stats.violations[:20]:
                print(f"  {kind}: {detail[:1500]}")
        print(line, flush=True)
        if self.args.json:
            with open(self.args.json, "w") as f:
                json.dump(figures, f, indent=1, sort_keys=True)
        if not ok:
            for n in self.nodes:
                print(n.daemon.log_tail(60))
        return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("KVPEER_SOAK_SECONDS", "180")),
                    help="traffic time (default $KVPEER_SOAK_SECONDS or 180); set-up and quiescence add ~30 s")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--engines", type=int, default=2, help="engines per node")
    ap.add_argument("--seed", type=int, default=int(os.environ.get("KVPEER_SOAK_SEED", "20261202")))
    ap.add_argument("--bin-dir", help="build tree with daemon/kvpeerd (default $KVPEER_BIN_DIR or <repo>/build)")
    ap.add_argument("--log-level", default="info")
    ap.add_argument("--no-faults", action="store_true")
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--keep", action="store_true", help="keep the work dir (logs)")
    a = ap.parse_args()
    if a.nodes < 3:
        ap.error("--nodes is at least 3")
    if a.bin_dir:
        os.environ["KVPEER_BIN_DIR"] = a.bin_dir
    soak = Soak(a)
    ok = False
    try:
        ok = soak.run()
    finally:
        for n in soak.nodes:
            if n.daemon.proc is not None and n.daemon.proc.poll() is None:
                n.daemon.resume()
                n.daemon.proc.kill()
                n.daemon.proc.wait()
            n.proxy.close()
        if a.keep or not ok:
            log(f"kept {soak.workdir}")
        else:
            shutil.rmtree(soak.workdir, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
