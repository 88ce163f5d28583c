"""Which CPU-tier blocks the daemon may serve: the tier's record of what it
has published, slot by slot, within the publish budget.

Serving without the step loop, and without pinning (docs/vllm.md section
3): vLLM calls `submit_store` on every tier after each GPU->CPU store, with
the job's slots pinned until the tier reports the job finished. The tier
publishes the job's blocks to the daemon *sealed* (the daemon takes each
block's XXH3-64 before it answers) and reports the job finished once that
answer is in, so vLLM unpins at once and may evict and reuse the slots.
From then on a published slot may get other bytes at any moment; the seal
makes that harmless (the daemon and consumers with the xxh3 feature check
the bytes they send or receive against it), and this book lets the tier
withdraw a stale entry as soon as it learns of the reuse:

  * a later store naming a slot published under another key: the old
    key(s) of that slot are unpublished before the new one is published;
  * a load into a published slot: its keys are unpublished before the load.

The budget (`budget_blocks`, from publish_budget_bytes) bounds what is
published; the oldest published blocks (least recently stored or touched)
are unpublished first.

This class is the bookkeeping only (no I/O): the tier sends what it returns.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Sequence, Set, Tuple

__all__ = ["PublishBook", "Admission"]

Key = bytes


@dataclass
class Admission:
    """What a store job asks of the daemon, in this order: unpublish
    `stale` (keys whose slot this job's blocks now occupy) and `evict`
    (oldest keys, to stay within the budget), then publish `publish`
    ((key, slot) pairs). An empty `publish` means the job is done at once."""

    publish: List[Tuple[Key, int]] = field(default_factory=list)
    stale: List[Key] = field(default_factory=list)
    evict: List[Key] = field(default_factory=list)

    @property
    def unpublish(self) -> List[Key]:
        return self.stale + self.evict


class PublishBook:
    """Published blocks, oldest first, with the keys at each slot."""

    def __init__(self, budget_blocks: int) -> None:
        if isinstance(budget_blocks, bool) or not isinstance(budget_blocks, int) or budget_blocks < 0:
            raise ValueError(f"budget_blocks must be an integer >= 0, got {budget_blocks!r}")
        self.budget_blocks = budget_blocks
        self._published: "OrderedDict[Key, int]" = OrderedDict()  # key -> slot, oldest first
        self._by_slot: Dict[int, Set[Key]] = {}

    # -- state -------------------------------------------------------------------

    @property
    def published_count(self) -> int:
        return len(self._published)

    def is_published(self, key: Key) -> bool:
        return key in self._published

    def slot_of(self, key: Key) -> int:
        return self._published[key]

    def published_keys(self) -> List[Key]:
        return list(self._published)

    # -- changes -------------------------------------------------------------------

    def _remove(self, key: Key) -> None:
        slot = self._published.pop(key)
        keys = self._by_slot.get(slot)
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self._by_slot[slot]

    def _add(self, key: Key, slot: int) -> None:
        self._published[key] = slot
        self._by_slot.setdefault(slot, set()).add(key)

    def admit(self, keys: Sequence[Key], slots: Sequence[int]) -> Admission:
        """A store job's blocks (vLLM has just written `keys` at `slots`):
        which keys to withdraw first and which pairs to publish."""
        if len(keys) != len(slots):
            raise ValueError(f"store job: {len(keys)} keys but {len(slots)} slot ids")
        admission = Admission()
        seen: Set[Key] = set()
        fresh: List[Tuple[Key, int]] = []
        for key, slot in zip(keys, slots):
            slot = int(slot)
            if key in seen:
                continue
            seen.add(key)
            # Whatever else this book holds at the slot is gone from it now.
            for other in list(self._by_slot.get(slot, ())):
                if other != key:
                    self._remove(other)
                    admission.stale.append(other)
            held = self._published.get(key)
            if held == slot:
                self._published.move_to_end(key)  # the same block at the same slot: only fresher
                continue
            if held is not None:
                self._remove(key)  # published elsewhere: publishing moves it (control-api.md publish)
            fresh.append((key, slot))
        fresh = fresh[: self.budget_blocks]
        overflow = len(self._published) + len(fresh) - self.budget_blocks
        while overflow > 0 and self._published:
            oldest = next(iter(self._published))
            self._remove(oldest)
            admission.evict.append(oldest)
            overflow -= 1
        for key, slot in fresh:
            self._add(key, slot)
        admission.publish = fresh
        return admission

    def withdraw_others(self, keys: Sequence[Key], slots: Sequence[int]) -> List[Key]:
        """`keys` are now at `slots` (a store that is not published, e.g. a
        remote decoder's supply): other keys published at those slots are
        stale, withdrawn from the book; the same key at its slot stays."""
        stale: List[Key] = []
        for key, slot in zip(keys, slots):
            for other in list(self._by_slot.get(int(slot), ())):
                if other != key:
                    self._remove(other)
                    stale.append(other)
        return stale

    def withdraw_slots(self, slots: Iterable[int]) -> List[Key]:
        """Slots about to get other bytes (a load's destinations): the keys
        published at them, now withdrawn from the book."""
        keys: List[Key] = []
        for slot in slots:
            for key in list(self._by_slot.get(int(slot), ())):
                self._remove(key)
                keys.append(key)
        return keys

    def refused(self, pairs: Iterable[Tuple[Key, int]]) -> None:
        """The daemon refused to publish these pairs: they are not
        published (unless a later store moved them meanwhile)."""
        for key, slot in pairs:
            if self._published.get(key) == slot:
                self._remove(key)

    def unpublish_all(self) -> List[Key]:
        """Every published key, now withdrawn from the book (drain, shutdown)."""
        keys = list(self._published)
        self._published.clear()
        self._by_slot.clear()
        return keys

    def touch(self, keys: Iterable[Key]) -> None:
        """Recently used blocks are the last to be pushed out."""
        published = self._published
        for key in keys:
            if key in published:
                published.move_to_end(key)

    def forget_all(self) -> None:
        """The daemon session is gone, and with it every publication."""
        self._published.clear()
        self._by_slot.clear()
