"""Which CPU-tier blocks the daemon may serve, and which vLLM store jobs
are still holding them.

Serving without the step loop: vLLM calls `submit_store` on every tier after
each GPU->CPU store, with the job's slots pinned (ref-counted) until the
tier reports the job finished. We publish the job's blocks to the daemon
(sealed) and simply do not report the job finished while any of its blocks
is published: vLLM's own pin is what keeps the CPU tier from reusing a slot
the daemon may be reading, so the daemon can answer peers while the engine
is busy inside a long prefill, without asking the engine anything.

The price is CPU-tier capacity: pinned blocks cannot be evicted. So the
published set is bounded (`budget_blocks`, from publish_budget_bytes); a new
job pushes out the oldest published blocks (least recently stored or
touched). An unpublished block is released at once by the daemon, or later
if a peer's round still pins it (a `released` slot in `poll`). A job is
finished when every block it held is released; only then may vLLM reuse
the slots.

This class is the bookkeeping only (no I/O): the tier sends what it returns
and feeds back what the daemon answers.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence, Set, Tuple

__all__ = ["PublishBook", "Admission"]

Key = bytes


@dataclass
class _Held:
    slot: int
    job_id: int


@dataclass
class Admission:
    """What a new store job asks of the daemon: publish `publish` (key,
    slot) pairs after unpublishing `evict` keys. `finished_now` is True when
    the job holds nothing (all its blocks were already published, or the
    budget is 0), so its result is due at once."""

    publish: List[Tuple[Key, int]] = field(default_factory=list)
    evict: List[Key] = field(default_factory=list)
    finished_now: bool = False


class PublishBook:
    """Published blocks, oldest first, and the store jobs holding them."""

    def __init__(self, budget_blocks: int) -> None:
        if budget_blocks < 0:
            raise ValueError(f"budget_blocks must be >= 0, got {budget_blocks}")
        self.budget_blocks = budget_blocks
        self._published: "OrderedDict[Key, _Held]" = OrderedDict()
        self._releasing: Dict[int, Tuple[Key, int]] = {}  # slot -> (key, job) unpublished, not yet free
        self._held_by_job: Dict[int, Set[Key]] = {}
        self._failed_jobs: Set[int] = set()
        self.evictions = 0

    # -- state -------------------------------------------------------------------

    @property
    def published_count(self) -> int:
        return len(self._published)

    @property
    def releasing_count(self) -> int:
        return len(self._releasing)

    @property
    def holding_jobs(self) -> int:
        return len(self._held_by_job)

    def is_published(self, key: Key) -> bool:
        return key in self._published

    def published_keys(self) -> List[Key]:
        return list(self._published)

    def job_failed(self, job_id: int) -> bool:
        return job_id in self._failed_jobs

    # -- changes -------------------------------------------------------------------

    def admit(self, job_id: int, keys: Sequence[Key], slots: Sequence[int]) -> Admission:
        """Takes a store job: which of its blocks to publish (those not
        already published or being released, within the budget) and which
        old blocks to unpublish to make room."""
        if len(keys) != len(slots):
            raise ValueError(f"store job {job_id}: {len(keys)} keys but {len(slots)} block ids")
        if job_id in self._held_by_job:
            raise ValueError(f"store job {job_id} is already holding blocks")
        releasing_keys = {k for k, _ in self._releasing.values()}
        fresh: List[Tuple[Key, int]] = []
        seen: Set[Key] = set()
        for key, slot in zip(keys, slots):
            if key in self._published or key in releasing_keys or key in seen:
                continue  # already held (by an earlier job's pin) or on its way out
            seen.add(key)
            fresh.append((key, int(slot)))
        fresh = fresh[: self.budget_blocks]
        admission = Admission()
        overflow = len(self._published) + len(fresh) - self.budget_blocks
        if overflow > 0:
            admission.evict = self._evict_oldest(overflow)
        if not fresh:
            admission.finished_now = True
            return admission
        self._held_by_job[job_id] = {k for k, _ in fresh}
        for key, slot in fresh:
            self._published[key] = _Held(slot, job_id)
        admission.publish = fresh
        return admission

    def _evict_oldest(self, count: int) -> List[Key]:
        keys = []
        for _ in range(count):
            key, held = self._published.popitem(last=False)
            self._releasing[held.slot] = (key, held.job_id)
            keys.append(key)
        self.evictions += len(keys)
        return keys

    def unpublish_all(self) -> List[Key]:
        """Moves every published block to releasing (drain, shutdown);
        returns the keys to unpublish."""
        keys = []
        while self._published:
            key, held = self._published.popitem(last=False)
            self._releasing[held.slot] = (key, held.job_id)
            keys.append(key)
        return keys

    def touch(self, keys: Iterable[Key]) -> None:
        """Recently used blocks are the last to be pushed out."""
        for key in keys:
            if key in self._published:
                self._published.move_to_end(key)

    def release(self, slot: int) -> Optional[int]:
        """The daemon no longer reads `slot`; returns the job that is now
        finished, if this was its last held block."""
        entry = self._releasing.pop(slot, None)
        if entry is None:
            return None
        key, job_id = entry
        return self._drop(job_id, key)

    def publish_failed(self, job_id: int, keys: Iterable[Key]) -> Optional[int]:
        """The daemon refused to publish these keys: they were never
        readable by it, so they hold nothing; returns the job if it is now
        finished (its result then says failure)."""
        self._failed_jobs.add(job_id)
        finished = None
        for key in keys:
            held = self._published.get(key)
            if held is not None and held.job_id == job_id:
                del self._published[key]
                finished = self._drop(job_id, key) or finished
        return finished

    def _drop(self, job_id: int, key: Key) -> Optional[int]:
        held = self._held_by_job.get(job_id)
        if held is None:
            return None
        held.discard(key)
        if held:
            return None
        del self._held_by_job[job_id]
        return job_id

    def take_failed(self, job_id: int) -> bool:
        """Whether the finished job `job_id` failed (forgets it)."""
        if job_id in self._failed_jobs:
            self._failed_jobs.discard(job_id)
            return True
        return False

    def forget_all(self) -> List[int]:
        """Drops everything (the daemon session is gone, and with it every
        publication); returns the jobs that were still holding blocks."""
        jobs = list(self._held_by_job)
        self._published.clear()
        self._releasing.clear()
        self._held_by_job.clear()
        return jobs
