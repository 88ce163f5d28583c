"""One soak engine (soak.py): a worker thread on one node driving random
work (symmetric loads, disaggregated prefill, churn, finishes) and checking
every result it gets against the invariants; it drains, crashes and comes
back when the fault injector says so.
"""

import threading
import time
import traceback
from collections import defaultdict

from kvpeer import Client, KvpeerError, ProtocolError, Region
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, block_content, make_keys
from soak_common import (BLOCK_LEN, CLIENT_TIMEOUT_S, DEST_SLOTS, LOAD_TIMEOUT_S, NUM_BLOCKS, PUB_SLOTS, STORE_SLOTS,
                         STORE_UNMATCHED_S)


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
