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

    soak.py [--seconds S] [--nodes N] [--engines E] [--seed X] [--bin-dir DIR]

S defaults to $KVPEER_SOAK_SECONDS or 180 (plus up to ~90 s of set-up and
quiescence, so CI stays near 5 minutes); pass a larger --seconds for a long run.
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
from collections import Counter, defaultdict
from pathlib import Path

from kvpeer_testing.fault_proxy import FaultProxy
from kvpeer_testing.fault_tools import FixedDaemon, free_port, proc_fds
from kvpeer import Client, KvpeerError, ProtocolError, Region
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, block_content, make_keys

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

BLOCK_LEN = 128 * 1024
NUM_BLOCKS = 384
PUB_SLOTS = range(0, 128)  # published blocks
STORE_SLOTS = range(128, 192)  # disaggregated-prefill supply
DEST_SLOTS = range(192, 384)  # load destinations
LOAD_TIMEOUT_S = 10
STORE_UNMATCHED_S = 60  # control API: unmatched supply fails after 60 s
CLIENT_TIMEOUT_S = 30


def log(msg):
    sys.stderr.write(f"[soak {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def rss_anon_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except FileNotFoundError:
        pass
    return 0


class Stats:
    """Counters shared by every thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.c = Counter()
        self.violations = []  # (kind, detail)
        self.reasons = Counter()
        self.api_errors = Counter()

    def add(self, key, n=1):
        with self.lock:
            self.c[key] += n

    def violation(self, kind, detail):
        with self.lock:
            self.c["violation:" + kind] += 1
            if len(self.violations) < 200:
                self.violations.append((kind, detail))
        log(f"VIOLATION {kind}: {detail}")

    def reason(self, text):
        with self.lock:
            # The first words classify it; ids and numbers vary.
            self.reasons[" ".join(text.split()[:4])[:60]] += 1

    def api_error(self, code):
        with self.lock:
            self.api_errors[code] += 1


class Node:
    """A daemon, its proxy (whose address is the node's id) and its state
    as the injector sees it."""

    def __init__(self, index, workdir, extra, log_level):
        self.index = index
        self.proxy = FaultProxy(name=f"node{index}")
        self.port = free_port()
        self.daemon = FixedDaemon(workdir, f"node{index}", self.port,
                                  ["--block-len", str(BLOCK_LEN), "--config-fingerprint", DEFAULT_FINGERPRINT,
                                   "--hash-seed", DEFAULT_HASH_SEED, "--node-id", self.proxy.address,
                                   "--load-timeout-s", str(LOAD_TIMEOUT_S), "--abort-ack-timeout-s", "5",
                                   "--handshake-timeout-s", "5", *extra], log_level=log_level)
        self.proxy.set_target(f"127.0.0.1:{self.port}")
        self.id = self.proxy.address
        self.generation = 0  # bumped on every restart
        self.cond = threading.Condition()
        self.draining = False  # a SIGTERM restart is coming: engines poll until their socket closes
        self.killing = False  # a kill -9 is coming: outstanding jobs will be orphaned
        self.stopped = False  # SIGSTOPped
        self.expected_dead = False
        self.pids = []
        self.fd_base = None
        self.rss_base = None
        self.rss_peak = 0  # RssAnon, kB, highest sample of any of this node's processes
        self.fds_peak = 0

    def sample(self):
        try:
            self.rss_peak = max(self.rss_peak, rss_anon_kb(self.daemon.pid))
            self.fds_peak = max(self.fds_peak, proc_fds(self.daemon.pid))
        except (FileNotFoundError, ProcessLookupError, AttributeError):
            pass  # between a stop and a restart

    def start(self):
        self.daemon.start()
        self.pids.append(self.daemon.pid)

    def restart(self):
        self.daemon = self.daemon.restart_as()
        self.daemon.start()
        self.pids.append(self.daemon.pid)
        with self.cond:
            self.generation += 1
            self.draining = False
            self.killing = False
            self.expected_dead = False
            self.cond.notify_all()


class Worker(threading.Thread):
    """One engine on one node, driving random work and checking every
    result it gets."""

    def __init__(self, soak, node, index, rng):
        super().__init__(name=f"engine-{node.index}-{index}", daemon=True)
        self.soak = soak
        self.node = node
        self.name_ = f"eng{node.index}.{index}"
        self.rng = rng
        self.stats = soak.stats
        self.region = Region.memfd(NUM_BLOCKS, BLOCK_LEN, name=self.name_)
        self.client = None
        self.generation = -1
        self.next_job = 1
        self.next_kv = 1
        self.pending = {}  # job -> dict(kind, kv, keys, slots, t)
        self.done = set()  # job ids with their result
        self.published = {}  # slot -> key
        self.waiting_release = set()  # slots unpublished while pinned
        self.free_pub = []  # publish slots free to refill
        self.free_store = list(STORE_SLOTS)
        self.free_dest = list(DEST_SLOTS)
        self.open_requests = defaultdict(set)  # kv -> jobs not yet answered
        self.finish_after = set()  # kvs to finish once their jobs are answered
        self.inbox = []  # PD supply requests from other workers
        self.inbox_lock = threading.Lock()
        self.key_gen = 0
        self.drained = threading.Event()
        self.late_drain = False  # the restart did not wait for this worker to start draining
        self.pause_s = 0.0  # fault: stop polling this long (a stalled engine)
        self.crash = threading.Event()  # fault: drop the connection abruptly, come back with a new region
        self.quiesce = threading.Event()
        self.quiesced = threading.Event()
        self.error = None

    # -- connection ------------------------------------------------------------

    def attach(self):
        """(Re)connects to the node's current daemon: hello, the same memfd
        region, and everything still published goes back."""
        if self.client is not None:
            self.client.close()
        self.generation = self.node.generation
        self.client = Client(self.node.daemon.socket_path, timeout=CLIENT_TIMEOUT_S)
        self.client.hello(self.name_, BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED)
        self.client.register_region_fd(self.region.fd, NUM_BLOCKS)
        # A new daemon holds no pins: slots that waited for a release are free.
        self.free_pub.extend(sorted(self.waiting_release))
        self.waiting_release.clear()
        if self.published:
            slots = sorted(self.published)
            self.client.publish([self.published[s] for s in slots], slots)
        self.soak.directory_set(self.node.index, self.name_, set(self.published.values()))

    def initial_publish(self):
        self.free_pub = list(PUB_SLOTS)
        self.refill(len(self.free_pub))

    def refill(self, n):
        slots = [self.free_pub.pop() for _ in range(min(n, len(self.free_pub)))]
        if not slots:
            return
        self.key_gen += 1
        keys = make_keys(f"{self.name_}/g{self.key_gen}", len(slots))
        for k, s in zip(keys, slots):
            self.region.write_block(s, block_content(k, BLOCK_LEN))
        self.client.publish(keys, slots)
        for k, s in zip(keys, slots):
            self.published[s] = k
        self.stats.add("published_blocks", len(slots))
        self.soak.directory_set(self.node.index, self.name_, set(self.published.values()))

    # -- results ---------------------------------------------------------------

    def poll(self, wait_ms=0):
        r = self.client.poll(wait_ms=wait_ms)
        for res in r["results"]:
            self.on_result(res)
        for slot in r["released"]:
            if slot in self.waiting_release:
                self.waiting_release.discard(slot)
                self.free_pub.append(slot)
        self.stats.add("failed_requests_reported", len(r["failed_requests"]))
        return r

    def on_result(self, res):
        job = res.get("job_id")
        if job in self.done:
            self.stats.violation("duplicate_result", f"{self.name_} job {job}: {res}")
            return
        info = self.pending.pop(job, None)
        if info is None:
            self.stats.violation("unknown_result", f"{self.name_}: {res}")
            return
        self.done.add(job)
        if res.get("kv_request_id") != info["kv"]:
            self.stats.violation("wrong_kv_in_result", f"{self.name_} job {job}: {res} vs {info['kv']}")
        kind = info["kind"]
        if res.get("success") is True:
            self.stats.add(f"{kind}_ok")
            if kind in ("load", "pd_load"):
                bad = [s for k, s in zip(info["keys"], info["slots"])
                       if self.region.read_block(s) != block_content(k, BLOCK_LEN)]
                self.stats.add("bytes_verified", len(info["slots"]) * BLOCK_LEN)
                if bad:
                    self.stats.add("blocks_wrong", len(bad))
                    self.stats.violation("bytes_wrong", f"{self.name_} job {job} ({kind} {info['kv']} from "
                                                        f"{info.get('peer')}): slots {bad[:8]}")
        elif res.get("success") is False:
            self.stats.add(f"{kind}_failed")
            reason = res.get("reason")
            if not reason:
                self.stats.violation("no_reason", f"{self.name_} job {job}: {res}")
            else:
                self.stats.reason(reason)
        else:
            self.stats.violation("malformed_result", f"{self.name_}: {res}")
        self.release_job_slots(info)
        jobs = self.open_requests.get(info["kv"])
        if jobs is not None:
            jobs.discard(job)
            if not jobs:
                del self.open_requests[info["kv"]]
                if info["kv"] in self.finish_after:
                    self.finish_after.discard(info["kv"])
                    self.client.finish(info["kv"])

    def release_job_slots(self, info):
        if info["kind"] == "store":
            self.free_store.extend(info["slots"])
        else:
            self.free_dest.extend(info["slots"])

    def orphan_all(self, why):
        """The daemon went away without a drain (kill -9): no result can
        come for what was outstanding."""
        n = len(self.pending)
        if n:
            self.stats.add(f"orphaned_{why}", n)
        for info in self.pending.values():
            self.release_job_slots(info)
        self.pending.clear()
        self.open_requests.clear()
        self.finish_after.clear()

    # -- ops -------------------------------------------------------------------

    def new_kv(self, tag):
        kv = f"{self.name_}/{tag}/{self.generation}/{self.next_kv}"
        self.next_kv += 1
        return kv

    def submit_load(self, kind, peer, kv, keys, slots):
        job = self.next_job
        self.next_job += 1
        self.pending[job] = {"kind": kind, "kv": kv, "keys": keys, "slots": slots, "t": time.monotonic(),
                             "peer": peer}
        try:
            if kind == "store":
                self.client.store(job, kv, keys, slots)
            else:
                self.client.load(job, peer, kv, keys, slots)
        except KvpeerError as e:
            del self.pending[job]
            self.release_job_slots({"kind": kind, "slots": slots})
            self.stats.api_error(e.code)
            if not e.message:
                self.stats.violation("error_without_message", repr(e))
            return None
        self.stats.add(f"{kind}_submitted")
        self.open_requests[kv].add(job)
        return job

    def probe(self, peer, kv, keys):
        """lookup+flush until no key answers retry; None if it still does
        after 20 s (a hang: the spec bounds a dial by the handshake timeout
        plus one second)."""
        deadline = time.monotonic() + 20
        pause = 0.002
        while True:
            answers = self.client.lookup(peer, kv, keys, flush=True)
            self.stats.add("lookups")
            if "retry" not in answers:
                return answers
            if time.monotonic() > deadline:
                self.stats.violation("probe_hang", f"{self.name_}: {peer} {kv} still retry after 20 s")
                return None
            time.sleep(pause)
            pause = min(pause * 2, 0.05)

    def op_symmetric(self, finish_race=False):
        peer_node = self.soak.other_node(self.node, self.rng)
        known = self.soak.directory_sample(peer_node.index, self.rng, self.rng.randint(1, 32))
        unknown = make_keys(f"never/{self.rng.random()}", self.rng.randint(0, 3))
        keys = known + unknown
        if not keys or len(self.free_dest) < len(keys):
            return
        self.rng.shuffle(keys)
        kv = self.new_kv("sym")
        answers = self.probe(peer_node.id, kv, keys)
        self.stats.add("requests")
        if answers is None:
            self.client.finish(kv)
            return
        for k, a in zip(keys, answers):
            if a == "hit" and k in unknown:
                self.stats.violation("false_hit", f"{self.name_}: never-published key hit on {peer_node.id}")
        hits = [k for k, a in zip(keys, answers) if a == "hit"]
        self.stats.add("probe_hits", len(hits))
        self.stats.add("probe_misses", len(keys) - len(hits))
        if not hits:
            self.client.finish(kv)
            return
        slots = [self.free_dest.pop(self.rng.randrange(len(self.free_dest))) for _ in hits]
        for s in slots:  # stale bytes must not pass verification
            self.region.write_block(s, b"\0" * BLOCK_LEN)
        job = self.submit_load("load", peer_node.id, kv, hits, slots)
        if job is None:
            self.client.finish(kv)
            return
        if finish_race:
            if self.rng.random() < 0.5:
                time.sleep(self.rng.random() * 0.02)
            self.client.finish(kv)  # the load ends with a failure, or already succeeded
            self.stats.add("finish_races")
        else:
            self.finish_after.add(kv)

    def op_pd(self):
        if len(self.free_dest) < 8:
            return
        producer = self.soak.pick_worker(exclude_node=self.node, rng=self.rng)
        if producer is None:
            return
        n = self.rng.randint(1, 8)
        kv = self.new_kv("pd")
        keys = make_keys(f"pd/{kv}", n)
        with producer.inbox_lock:
            producer.inbox.append((time.monotonic(), kv, keys))
        slots = [self.free_dest.pop(self.rng.randrange(len(self.free_dest))) for _ in range(n)]
        for s in slots:
            self.region.write_block(s, b"\0" * BLOCK_LEN)
        self.stats.add("requests")
        job = self.submit_load("pd_load", producer.node.id, kv, keys, slots)
        if job is not None:
            self.finish_after.add(kv)

    def serve_inbox(self):
        with self.inbox_lock:
            items, self.inbox = self.inbox, []
        for t, kv, keys in items:
            if time.monotonic() - t > 5 or len(self.free_store) < len(keys):
                self.stats.add("pd_supply_skipped")
                continue
            slots = [self.free_store.pop() for _ in keys]
            for k, s in zip(keys, slots):
                self.region.write_block(s, block_content(k, BLOCK_LEN))
            job = self.submit_load("store", None, kv, keys, slots)
            if job is not None:
                self.finish_after.add(kv)

    def op_churn(self):
        if not self.published:
            return
        slots = self.rng.sample(sorted(self.published), min(len(self.published), self.rng.randint(1, 16)))
        keys = [self.published[s] for s in slots]
        r = self.client.unpublish(keys)
        self.stats.add("unpublished_blocks", len(keys))
        if sorted(r["released"] + r["pinned"]) != sorted(slots):
            self.stats.violation("unpublish_mismatch", f"{self.name_}: {slots} -> {r}")
        for s in slots:
            del self.published[s]
        self.free_pub.extend(r["released"])
        self.waiting_release.update(r["pinned"])
        self.stats.add("unpublish_pinned", len(r["pinned"]))
        self.soak.directory_set(self.node.index, self.name_, set(self.published.values()))
        self.refill(len(self.free_pub))

    # -- the loop --------------------------------------------------------------

    def run(self):
        try:
            self.attach()
            self.initial_publish()
            self.soak.ready.wait()
            self.loop()
        except Exception as e:  # reported; the run fails
            self.error = f"{e!r}\n{traceback.format_exc()}"
            self.stats.violation("worker_crashed", f"{self.name_}: {self.error}")
        finally:
            self.quiesced.set()

    def loop(self):
        ops = 0
        while not self.quiesce.is_set() and ops < 1_000_000:
            ops += 1
            try:
                if self.node.draining:
                    self.drain()
                    continue
                if self.generation != self.node.generation:
                    self.orphan_all("restart")
                    self.wait_and_attach()
                    continue
                if self.pause_s:
                    time.sleep(self.pause_s)
                    self.pause_s = 0.0
                if self.crash.is_set():
                    self.crash.clear()
                    self.crash_and_return()
                    continue
                self.poll(0)
                self.serve_inbox()
                x = self.rng.random()
                if x < 0.55:
                    self.op_symmetric()
                elif x < 0.70 and self.soak.pd_allowed():
                    self.op_pd()
                elif x < 0.80:
                    self.op_symmetric(finish_race=True)
                elif x < 0.90:
                    self.op_churn()
                else:
                    self.client.flush()
                time.sleep(self.rng.random() * 0.01)
            except KvpeerError as e:
                # A refusal with its code (peer_unavailable in backoff,
                # shutting_down while draining, ...): counted, never silent.
                self.stats.api_error(e.code)
                if not e.message or e.code == "internal":
                    self.stats.violation("api_error", f"{self.name_}: {e.code}: {e.message}")
            except (ProtocolError, OSError) as e:
                self.on_daemon_gone(e)
        self.finish_up()

    def on_daemon_gone(self, e):
        node = self.node
        if node.draining:
            self.drain()
            return
        if node.killing or node.expected_dead or self.generation != node.generation:
            self.orphan_all("kill9")
            self.wait_and_attach()
            return
        if not node.daemon.running:
            self.stats.violation("daemon_died", f"{node.daemon.name} exited with {node.daemon.proc.poll()} "
                                                f"(seen by {self.name_}: {e!r})")
            self.orphan_all("crash")
            self.wait_and_attach()
            return
        raise e

    def drain(self):
        """SIGTERM is coming: stop new work and poll until the socket closes;
        every outstanding job must get its result on the way (the spec's
        drain guarantee)."""
        self.drained.set()
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            try:
                self.poll(wait_ms=50)
            except (ProtocolError, OSError):
                break
        if self.pending and self.late_drain:
            self.orphan_all("late_drain")
        if self.pending:
            first = [(j, i['kind'], i['kv']) for j, i in list(self.pending.items())[:5]]
            self.stats.violation("lost_in_drain", f"{self.name_}: {len(self.pending)} jobs got no result before "
                                                  f"the daemon closed the socket: {first}")
            self.stats.add("lost", len(self.pending))
            self.orphan_all("drain")
        self.drained.clear()
        self.late_drain = False
        self.wait_and_attach()

    def crash_and_return(self):
        """An engine crash: the connection drops without finish or
        unpublish; what was outstanding is orphaned. The engine comes back
        the way a restarted engine would: a new region (the old one may
        still be read by transfers the daemon lets finish), the same keys
        re-filled and published."""
        self.client.abort()
        self.client = None
        self.orphan_all("engine_crash")
        old = self.region
        self.region = Region.memfd(NUM_BLOCKS, BLOCK_LEN, name=self.name_)
        for s, k in self.published.items():
            self.region.write_block(s, block_content(k, BLOCK_LEN))
        old.close()
        self.stats.add("engine_crashes")
        self.attach()

    def wait_and_attach(self):
        node = self.node
        with node.cond:
            node.cond.wait_for(lambda: node.generation != self.generation and not node.draining
                               and not node.killing, timeout=60)
        if node.generation == self.generation:
            raise RuntimeError(f"{node.daemon.name} was not restarted within 60 s")
        self.pending.clear()
        self.open_requests.clear()
        self.finish_after.clear()
        self.attach()
        self.stats.add("reattached")

    def finish_up(self):
        """Quiescence: no new work; every outstanding job's result, then
        every request finished."""
        deadline = time.monotonic() + LOAD_TIMEOUT_S + STORE_UNMATCHED_S + 20
        while self.pending and time.monotonic() < deadline:
            try:
                self.poll(wait_ms=500)
                self.serve_inbox()  # supply asked for before the end still goes out
            except (ProtocolError, OSError) as e:
                self.on_daemon_gone(e)
        if self.pending:
            self.stats.add("lost", len(self.pending))
            for job, info in list(self.pending.items())[:10]:
                self.stats.violation("lost", f"{self.name_} job {job} {info['kind']} {info['kv']} "
                                             f"submitted {time.monotonic() - info['t']:.0f} s ago, no result")
        for kv in list(self.open_requests) + list(self.finish_after):
            self.client.finish(kv)


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
