"""Drives a secondary tier the way vLLM's tiering manager does, without vLLM.

`Engine` plays vLLM's scheduler side for one engine: a CPU (primary) tier
whose blocks live in a region created exactly as vLLM's
SharedOffloadRegion creates it (/dev/shm/vllm_offload_{engine_id}.mmap,
O_CREAT|O_EXCL, mode 0600, ftruncate, MAP_SHARED; the tier gets a
(num_blocks, row_stride) memoryview), and the calls into the tier in the
order TieringOffloadingManager (vllm/v1/kv_offload/tiering/manager.py at
the commit in docs/vllm.md) makes them:

  * `lookup`: the tier's finished jobs are taken in at most once per step
    (before the first lookup/store/schedule_end of a step), then the
    primary tier is asked, and the secondary tier only on a primary miss;
    a tier HIT reserves a primary slot (promotion) and answers HIT_PENDING;
  * `store`: a GPU->CPU store, then `create_store_job` (pins the slots) and
    `submit_store` on the tier; blocks already in the CPU tier go only to a
    tier that asked for REQUEST_LEVEL;
  * `schedule_end`: finished jobs, `serve_external_requests(parent)`,
    re-arm, one `submit_load` per request with its promotions, then the
    tier's `on_schedule_end`;
  * job results: a promotion completes its writes (success or not), a
    store releases its pins (`complete_read`);
  * `reset_cache` calls `drain_jobs`, then takes all results and requires
    that no job is left; `shutdown` shuts the tier down.

Both shapes of vLLM's interface (vllm_stub/vllm/_stub_shape.py): jobs carry
their slots as `block_ids` (7cfb97e) or `chunk_ids` (#52615), and
`create_tier` passes `backpressure_detector` when vLLM's base class takes it,
as vLLM's factory does after #50045 (factory.py:39-55 at 7cfb97e builds
`cls(offloading_spec=, primary_kv_view=, tier_type=, **rest)`).

Written for these tests from the reference reading; it is not vLLM's code.
"""

from __future__ import annotations

import array
import dataclasses
import importlib
import inspect
import mmap
import os
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Sequence

from vllm.v1.kv_offload.base import (
    LookupResult,
    OffloadPolicy,
    ReqContext,
    RequestOffloadingContext,
    ScheduleEndContext,
)
from vllm.v1.kv_offload.tiering.base import JobResult, ParentManager, SecondaryTierManager, TransferJob

# The stand-in's shape: which field carries a job's slots, and whether
# vLLM's factory passes backpressure_detector.
SLOTS_FIELD = "chunk_ids" if "chunk_ids" in {f.name for f in dataclasses.fields(TransferJob)} else "block_ids"
FACTORY_PASSES_BACKPRESSURE = "backpressure_detector" in inspect.signature(SecondaryTierManager.__init__).parameters


def make_job(job_id: int, keys: Sequence[bytes], slots: Sequence[int], is_promotion: bool,
             ctx: ReqContext) -> TransferJob:
    """A TransferJob as vLLM's manager builds it (int64 slot ids)."""
    return TransferJob(job_id=job_id, keys=list(keys), is_promotion=is_promotion, req_context=ctx,
                       **{SLOTS_FIELD: array.array("q", slots)})


def job_slots(job: TransferJob) -> List[int]:
    return list(getattr(job, SLOTS_FIELD))


def create_tier(tier_config: dict, offloading_spec, view: memoryview) -> SecondaryTierManager:
    """vLLM's SecondaryTierFactory.create_secondary_tier for a tier with
    `module_path`: import it, take `type` from it, and build it with the
    entry's other keys (factory.py:39-100 at 7cfb97e); after #50045 the
    factory also passes backpressure_detector (None unless configured)."""
    cls = getattr(importlib.import_module(tier_config["module_path"]), tier_config["type"])
    assert issubclass(cls, SecondaryTierManager)
    kwargs = {k: v for k, v in tier_config.items() if k not in ("type", "module_path")}
    if FACTORY_PASSES_BACKPRESSURE:
        kwargs["backpressure_detector"] = None
    return cls(offloading_spec=offloading_spec, primary_kv_view=view, tier_type=tier_config["type"], **kwargs)


class VllmRegion:
    """The CPU tier's shared file, created the way vLLM creates it."""

    def __init__(self, engine_id: str, num_blocks: int, row_stride: int, directory: str = "/dev/shm") -> None:
        assert row_stride % mmap.PAGESIZE == 0, "vLLM rounds the row stride up to a page"
        self.path = os.path.join(directory, f"vllm_offload_{engine_id}.mmap")
        self.num_blocks = num_blocks
        self.row_stride = row_stride
        self.fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.ftruncate(self.fd, num_blocks * row_stride)
        self.map = mmap.mmap(self.fd, num_blocks * row_stride, flags=mmap.MAP_SHARED,
                             prot=mmap.PROT_READ | mmap.PROT_WRITE)
        self.view = memoryview(self.map).cast("B", (num_blocks, row_stride))

    def write(self, slot: int, data: bytes) -> None:
        assert len(data) == self.row_stride
        self.map[slot * self.row_stride:(slot + 1) * self.row_stride] = data

    def read(self, slot: int) -> bytes:
        return self.map[slot * self.row_stride:(slot + 1) * self.row_stride]

    def close(self) -> None:
        if self.map is None:
            return
        self.view.release()
        self.map.close()
        self.map = None
        os.close(self.fd)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


@dataclass
class _Block:
    slot: int
    ready: bool = False  # written (store complete or promotion complete)
    pins: int = 0  # prepare_read pins (a secondary tier reads the slot)


class CpuTier:
    """A minimal LRU primary tier: key -> slot, with vLLM's pin rules (a
    pinned or not-yet-written block is never evicted). When full, the oldest
    evictable block goes and its slot takes the new block, as vLLM's
    LRUCachePolicy.evict does (vllm/v1/kv_offload/cpu/policies/lru.py:56-78
    at 7cfb97e: only ref_cnt 0 blocks, oldest first)."""

    def __init__(self, region: VllmRegion) -> None:
        self.region = region
        self.blocks: "OrderedDict[bytes, _Block]" = OrderedDict()
        self.free = list(range(region.num_blocks))
        self.evicted: List[bytes] = []

    def lookup(self, key: bytes) -> LookupResult:
        block = self.blocks.get(key)
        if block is None:
            return LookupResult.MISS
        return LookupResult.HIT if block.ready else LookupResult.HIT_PENDING

    def allocate(self, key: bytes) -> Optional[int]:
        if key in self.blocks:
            return None
        if not self.free:
            victim = next((k for k, b in self.blocks.items() if b.ready and b.pins == 0), None)
            if victim is None:
                return None
            self.free.append(self.blocks.pop(victim).slot)
            self.evicted.append(victim)
        slot = self.free.pop(0)
        self.blocks[key] = _Block(slot)
        return slot

    def complete_write(self, keys: Sequence[bytes], success: bool) -> None:
        for key in keys:
            block = self.blocks[key]
            if success:
                block.ready = True
            else:
                self.free.append(self.blocks.pop(key).slot)

    def prepare_read(self, keys: Sequence[bytes]) -> List[int]:
        slots = []
        for key in keys:
            block = self.blocks[key]
            assert block.ready, "only ready blocks are read"
            block.pins += 1
            slots.append(block.slot)
        return slots

    def complete_read(self, keys: Sequence[bytes]) -> None:
        for key in keys:
            block = self.blocks[key]
            assert block.pins > 0, "complete_read without prepare_read"
            block.pins -= 1

    def pins(self, key: bytes) -> int:
        block = self.blocks.get(key)
        return 0 if block is None else block.pins

    def slot(self, key: bytes) -> int:
        return self.blocks[key].slot


@dataclass
class _Job:
    job: TransferJob
    submitted: float = field(default_factory=time.monotonic)


class _Parent(ParentManager):
    """What serve_external_requests gets; kvpeer's tier never calls it,
    so every call is recorded for the tests to check."""

    def __init__(self, engine: "Engine") -> None:
        self.engine = engine
        self.calls: List[str] = []

    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext:
        self.calls.append("on_new_request")
        return RequestOffloadingContext()

    def lookup(self, key: bytes, req_context: ReqContext) -> LookupResult:
        self.calls.append("lookup")
        return self.engine.cpu.lookup(key)

    def create_store_job(self, keys, req_context: ReqContext) -> TransferJob:
        self.calls.append("create_store_job")
        return self.engine.create_store_job(list(keys), req_context)

    def on_request_finished(self, req_context: ReqContext) -> None:
        self.calls.append("on_request_finished")


class Engine:
    """vLLM's scheduler side around one secondary tier."""

    def __init__(self, region: VllmRegion, tier_factory: Callable[[memoryview], SecondaryTierManager]) -> None:
        self.region = region
        self.cpu = CpuTier(region)
        self.tier = tier_factory(region.view)
        self.parent = _Parent(self)
        self.jobs: Dict[int, _Job] = {}
        self.results: Dict[int, JobResult] = {}
        self._next_job = 0
        self._processed_this_step = False
        self._pending_promotions: Dict[str, tuple] = {}
        self._request_level: Dict[str, bool] = {}
        self.steps = 0

    # -- requests ----------------------------------------------------------------------

    def new_request(self, req_id: str, params: Optional[dict] = None) -> ReqContext:
        ctx = ReqContext(req_id=req_id, kv_transfer_params=params)
        policy = self.tier.on_new_request(ctx).policy
        self._request_level[req_id] = policy == OffloadPolicy.REQUEST_LEVEL
        return ctx

    def finish_request(self, ctx: ReqContext) -> None:
        self.tier.on_request_finished(ctx)
        self._request_level.pop(ctx.req_id, None)

    # -- jobs ---------------------------------------------------------------------------

    def _job_id(self) -> int:
        job_id = self._next_job
        self._next_job += 1
        return job_id

    def _maybe_process(self) -> None:
        if self._processed_this_step:
            return
        self._processed_this_step = True
        self.process_finished()

    def process_finished(self) -> None:
        for result in self.tier.get_finished_jobs():
            entry = self.jobs.pop(result.job_id, None)
            assert entry is not None, f"the tier reported job {result.job_id}, which is unknown or done"
            self.results[result.job_id] = result
            job = entry.job
            if job.is_promotion:
                if result.success:
                    self.cpu.complete_write(list(job.keys), True)
                else:
                    ok = set(result.successful_keys or ())
                    if ok:
                        self.cpu.complete_write([k for k in job.keys if k in ok], True)
                    self.cpu.complete_write([k for k in job.keys if k not in ok], False)
            else:
                self.cpu.complete_read(list(job.keys))

    def create_store_job(self, keys: List[bytes], ctx: ReqContext) -> TransferJob:
        slots = self.cpu.prepare_read(keys)
        job = make_job(self._job_id(), keys, slots, False, ctx)
        self.jobs[job.job_id] = _Job(job)
        return job

    # -- the scheduler's calls -------------------------------------------------------------

    def lookup(self, key: bytes, ctx: ReqContext) -> LookupResult:
        self._maybe_process()
        primary = self.cpu.lookup(key)
        if primary is not LookupResult.MISS:
            return primary
        result = self.tier.lookup(key, ctx)
        if result is LookupResult.HIT:
            slot = self.cpu.allocate(key)
            if slot is None:
                return LookupResult.MISS
            keys, slots, rctx = self._pending_promotions.setdefault(ctx.req_id, ([], [], ctx))
            keys.append(key)
            slots.append(slot)
            return LookupResult.HIT_PENDING
        return LookupResult.RETRY if result is LookupResult.RETRY else LookupResult.MISS

    def lookup_prefix(self, keys: Sequence[bytes], ctx: ReqContext) -> Optional[int]:
        """The connector's maximal-prefix lookup: hits counted up to the
        first miss; None when a lookup was deferred (RETRY or HIT_PENDING)."""
        hits = 0
        deferred = False
        for key in keys:
            result = self.lookup(key, ctx)
            if result is LookupResult.HIT:
                hits += 1
            elif result is LookupResult.HIT_PENDING:
                hits += 1
                deferred = True
            elif result is LookupResult.RETRY:
                deferred = True
            else:
                break
        return None if deferred else hits

    def store(self, keys: Sequence[bytes], ctx: ReqContext, content: Callable[[bytes], bytes]) -> List[int]:
        """A GPU->CPU store of `keys` (bytes from `content`), then the
        cascade to the tier, as prepare_store + complete_store do."""
        self._maybe_process()
        new = [k for k in keys if self.cpu.lookup(k) is LookupResult.MISS]
        existing = [k for k in keys if k not in new and self.cpu.lookup(k) is LookupResult.HIT]
        if existing and self._request_level.get(ctx.req_id):
            self.tier.submit_store(self.create_store_job(existing, ctx))
        stored = []
        for key in new:
            slot = self.cpu.allocate(key)
            assert slot is not None, "the CPU tier is full (all pinned)"
            self.region.write(slot, content(key))
            stored.append(key)
        self.cpu.complete_write(stored, True)
        if stored:
            self.tier.submit_store(self.create_store_job(stored, ctx))
        return [self.cpu.slot(k) for k in keys]

    def schedule_end(self, new_req_ids: Sequence[str] = ()) -> None:
        self._maybe_process()
        self.tier.serve_external_requests(self.parent)
        self._processed_this_step = False
        for req_id, (keys, slots, ctx) in self._pending_promotions.items():
            job = make_job(self._job_id(), keys, slots, True, ctx)
            self.jobs[job.job_id] = _Job(job)
            self.tier.submit_load(job)
        self._pending_promotions.clear()
        self.tier.on_schedule_end(ScheduleEndContext(new_req_ids=list(new_req_ids), preempted_req_ids=[]))
        self.steps += 1

    def step(self) -> None:
        """An engine step with nothing scheduled (vLLM keeps stepping while
        has_pending_work())."""
        self._maybe_process()
        self.schedule_end()

    def run_until(self, predicate: Callable[[], object], timeout: float = 20.0, what: str = "condition",
                  step_s: float = 0.002) -> object:
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not reached within {timeout:.0f} s ({self.steps} steps)")
            self.step()
            time.sleep(step_s)

    def reset_cache(self) -> None:
        self.tier.drain_jobs()
        self.process_finished()
        assert not self.jobs, f"jobs left after drain_jobs: {sorted(self.jobs)}"
        self._pending_promotions.clear()
        self._processed_this_step = False

    def shutdown(self) -> None:
        self.tier.shutdown()
