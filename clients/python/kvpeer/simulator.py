"""An inference-engine simulator for kvpeerd: the producer and consumer sides
of what a real engine does, with block contents that a consumer can check
byte for byte.

Block contents are a pure function of the key (`block_content`), so the
consumer needs nothing from the producer but the keys to verify every byte
it received: a block landing in the wrong slot, a torn or partial block, or
stale bytes from an earlier run all fail verification.

A `SimEngine` is one engine session: a `Client` that said `hello`, a
`Region` registered with the daemon, a job-id counter and the results
collected from `poll`. It is single-threaded like the engines it imitates.
"""

import hashlib
import time
from dataclasses import dataclass, field

from .client import Client, Region

__all__ = [
    "DEFAULT_FINGERPRINT",
    "DEFAULT_HASH_SEED",
    "FetchReport",
    "SimEngine",
    "SimulatorError",
    "block_content",
    "make_keys",
]

DEFAULT_FINGERPRINT = "kvpeer-sim-model"
DEFAULT_HASH_SEED = "kvpeer-sim-seed"

# Each 4 KiB page of a block starts with its own sha256(key || page index),
# then a key-derived body shared by the block's pages. Every byte is still a
# function of the key and position, but generating 1 GiB costs a few hundred
# milliseconds instead of the tens of seconds that hashing every 32 bytes
# would (Python calls per hash dominate).
_PAGE = 4096


class SimulatorError(Exception):
    """The daemon broke a guarantee the simulator checks (a job result
    delivered twice, a result that never came within the deadline)."""


def make_keys(prefix, count, start=0):
    """`count` distinct keys shaped like vLLM's OffloadKey (a 32-byte block
    hash followed by a 4-byte big-endian group index); `prefix` keeps the
    keys of different tests and engines apart."""
    if isinstance(prefix, str):
        prefix = prefix.encode()
    return [hashlib.sha256(prefix + b"\0" + i.to_bytes(8, "big")).digest() + (0).to_bytes(4, "big")
            for i in range(start, start + count)]


def block_content(key, block_len):
    """The deterministic bytes of the block with `key`."""
    body = hashlib.shake_256(b"kvpeer-sim-body\0" + key).digest(_PAGE - 32)
    pages = (block_len + _PAGE - 1) // _PAGE
    parts = []
    for p in range(pages):
        parts.append(hashlib.sha256(key + p.to_bytes(8, "big")).digest())
        parts.append(body)
    return b"".join(parts)[:block_len]


def _chunks(seq, size):
    for i in range(0, len(seq), size):
        yield seq[i: i + size]


@dataclass
class FetchReport:
    """What a consumer-side fetch achieved; `ok` says whether it did all of
    what was asked."""

    keys: int = 0
    hits: int = 0
    misses: int = 0
    jobs_ok: int = 0
    jobs_failed: int = 0
    bytes_loaded: int = 0
    seconds: float = 0.0
    bad_blocks: list = field(default_factory=list)
    failed_requests: list = field(default_factory=list)
    reasons: list = field(default_factory=list)

    @property
    def ok(self):
        return self.hits == self.keys and self.jobs_failed == 0 and not self.bad_blocks

    @property
    def mb_per_s(self):
        return self.bytes_loaded / 1e6 / self.seconds if self.seconds > 0 else 0.0


class SimEngine:
    """One simulated engine attached to a node's daemon.

    `region` is "memfd" (registered by passing the descriptor) or "shm"
    (a /dev/shm file registered by path), so both registration paths get
    exercised by whoever uses the simulator.
    """

    def __init__(self, socket_path, num_blocks, block_len, name="sim-engine",
                 fingerprint=DEFAULT_FINGERPRINT, hash_seed=DEFAULT_HASH_SEED,
                 region="memfd", timeout=30.0, region_dir=None):
        self.name = name
        self.block_len = block_len
        self.client = Client(socket_path, timeout=timeout)
        self.region = None
        try:
            self.hello = self.client.hello(name, block_len, fingerprint, hash_seed)
            if region == "memfd":
                self.region = Region.memfd(num_blocks, block_len, name=name)
                self.client.register_region_fd(self.region.fd, num_blocks)
            else:
                # Region.shm_file's own default directory unless one is asked for
                # (tests/cluster/agent.py replaces that default).
                where = {} if region_dir is None else {"directory": region_dir}
                self.region = Region.shm_file(num_blocks, block_len, **where)
                self.client.register_region(self.region.path, num_blocks)
        except BaseException:
            self.close()
            raise
        self._next_job = 1
        # Everything poll delivered, kept so callers can wait on specific
        # jobs while other results keep arriving.
        self.results = {}
        self.failed_requests = []
        self.released = []

    @property
    def node_id(self):
        return self.hello["node_id"]

    def close(self):
        """Ends the engine session and frees the region."""
        self.client.close()
        if self.region is not None:
            self.region.close()
            self.region = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def new_job_id(self):
        job = self._next_job
        self._next_job += 1
        return job

    # -- producer side -------------------------------------------------------

    def fill(self, keys, block_ids):
        """Writes each key's deterministic content into its slot."""
        for key, slot in zip(keys, block_ids):
            self.region.write_block(slot, block_content(key, self.block_len))

    def fill_and_publish(self, keys, block_ids, batch=4096, seal=False):
        """Fills the slots, then publishes them (in batches, so one request
        line stays far below the 16 MiB limit)."""
        self.fill(keys, block_ids)
        published = 0
        for ks, bs in zip(_chunks(keys, batch), _chunks(list(block_ids), batch)):
            published += self.client.publish(ks, bs, seal=seal)
        return published

    def supply(self, kv_request_id, keys, block_ids, fill=True, seal=False):
        """Disaggregated prefill: fills and offers slots for a remote decoder's
        fetch of `kv_request_id`. Returns the store job id."""
        if fill:
            self.fill(keys, block_ids)
        job = self.new_job_id()
        self.client.store(job, kv_request_id, keys, block_ids, seal=seal)
        return job

    # -- results -------------------------------------------------------------

    def poll_once(self, wait_ms=0):
        """One poll; records its results. A job result delivered twice is a
        broken exactly-once guarantee and raises at once."""
        r = self.client.poll(wait_ms=wait_ms)
        for res in r["results"]:
            job = res["job_id"]
            if job in self.results:
                raise SimulatorError(f"{self.name}: job {job} got a second result {res!r} "
                                     f"(first: {self.results[job]!r})")
            self.results[job] = res
        self.failed_requests.extend(r["failed_requests"])
        self.released.extend(r["released"])
        return r

    def wait_jobs(self, job_ids, timeout=60.0):
        """Polls until every job in `job_ids` has its result; returns them."""
        deadline = time.monotonic() + timeout
        missing = [j for j in job_ids if j not in self.results]
        while missing:
            left = deadline - time.monotonic()
            if left <= 0:
                raise SimulatorError(f"{self.name}: no result within {timeout:.0f} s for jobs {missing[:20]}")
            self.poll_once(wait_ms=int(min(left, 1.0) * 1000))
            missing = [j for j in missing if j not in self.results]
        return {j: self.results[j] for j in job_ids}

    def wait_released(self, block_ids, timeout=30.0):
        """Polls until every slot in `block_ids` was named in a `released`
        event (a pinned slot may be reused only then)."""
        deadline = time.monotonic() + timeout
        want = set(block_ids)
        while not want <= set(self.released):
            left = deadline - time.monotonic()
            if left <= 0:
                raise SimulatorError(f"{self.name}: slots {sorted(want - set(self.released))[:20]} "
                                     f"not released within {timeout:.0f} s")
            self.poll_once(wait_ms=int(min(left, 1.0) * 1000))

    # -- consumer side -------------------------------------------------------

    def probe(self, peer, kv_request_id, keys, timeout=15.0):
        """Looks keys up on `peer` until none answers "retry" (the answer is
        known): one lookup with wait_ms resolves a probe; it is asked again
        only if the peer's session ended meanwhile. Returns the final
        per-key answers; raises SimulatorError past `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            left_ms = max(1, int((deadline - time.monotonic()) * 1000))
            answers = self.client.lookup(peer, kv_request_id, keys, wait_ms=min(left_ms, 60000))
            if "retry" not in answers:
                return answers
            if time.monotonic() >= deadline:
                raise SimulatorError(f"{self.name}: lookup on {peer} still answers retry after {timeout:.0f} s")
            time.sleep(0.01)  # the session ended: do not redial in a tight loop

    def load(self, peer, kv_request_id, keys, block_ids):
        """Submits one load; returns its job id."""
        job = self.new_job_id()
        self.client.load(job, peer, kv_request_id, keys, block_ids)
        return job

    def fetch(self, peer, kv_request_id, keys, block_ids, batch=64, pd=False,
              verify=True, timeout=60.0):
        """Fetches `keys` from `peer` into `block_ids` the way a scheduler
        would: per batch, probe then load the hits (symmetric), or load at
        once (`pd`, one kv_request_id per batch: `<id>/<n>`), all batches in
        flight together; then waits for every result and checks the bytes of
        every block that was reported loaded."""
        report = FetchReport(keys=len(keys))
        jobs = {}  # job id -> (keys, slots)
        start = time.monotonic()
        for n, (ks, bs) in enumerate(zip(_chunks(keys, batch), _chunks(list(block_ids), batch))):
            if pd:
                jobs[self.load(peer, f"{kv_request_id}/{n}", ks, bs)] = (ks, bs)
                report.hits += len(ks)
                continue
            answers = self.probe(peer, kv_request_id, ks)
            hit = [i for i, a in enumerate(answers) if a == "hit"]
            report.hits += len(hit)
            report.misses += len(ks) - len(hit)
            if hit:
                hk, hb = [ks[i] for i in hit], [bs[i] for i in hit]
                jobs[self.load(peer, kv_request_id, hk, hb)] = (hk, hb)
        results = self.wait_jobs(list(jobs), timeout=timeout)
        report.seconds = time.monotonic() - start
        for job, res in results.items():
            ks, bs = jobs[job]
            if res["success"]:
                report.jobs_ok += 1
                report.bytes_loaded += len(ks) * self.block_len
                if verify:
                    report.bad_blocks.extend(self.verify(ks, bs))
            else:
                report.jobs_failed += 1
                report.reasons.append(res.get("reason"))
        report.failed_requests = list(self.failed_requests)
        return report

    def verify(self, keys, block_ids):
        """Returns the slots whose bytes are not their key's content."""
        return [slot for key, slot in zip(keys, block_ids)
                if self.region.read_block(slot) != block_content(key, self.block_len)]
