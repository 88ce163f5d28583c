"""Symmetric probes (`remote_kv_source`): what the source node answered for
each key of one request, so vLLM's per-key `lookup` calls are answered from
memory and never wait.

vLLM asks key by key and expects HIT, MISS or RETRY at once (RETRY: ask me
again next step). The daemon answers a key `retry` the first time a round
asks it (the probe then goes to the peer, at `flush`) and `hit`/`miss`
once the peer has answered, when asked again. So a key moves:

    unknown --lookup()--> queued --on_schedule_end: lookup+flush--> asked
    asked --answer "retry"--> retry --next step: lookup again--> asked
    asked --answer "hit"/"miss"--> hit / miss

and a `load` closes the daemon's round: keys answered `hit` then must be
asked again before another load may name them (misses stay misses).

The queued and retry keys are kept in lists besides the per-key state, so a
step's work is proportional to what changed, not to the keys known (vLLM
asks every key of a waiting request again each step).
"""

from __future__ import annotations

from typing import Dict, List, Optional

__all__ = ["Probe", "HIT", "MISS"]

HIT = "hit"
MISS = "miss"
_QUEUED = "queued"
_ASKED = "asked"
_RETRY = "retry"


class Probe:
    """One request's probe of its source."""

    def __init__(self, kv_request_id: str, peer: str) -> None:
        self.kv_request_id = kv_request_id
        self.peer = peer
        self._state: Dict[bytes, str] = {}
        self._queued: List[bytes] = []
        self._retry: List[bytes] = []
        self.asking = False  # a lookup of this request is waiting for its answer

    def answer(self, key: bytes) -> Optional[str]:
        """HIT or MISS if known; else None, and the key is queued to be
        asked (if it was not already)."""
        state = self._state.get(key)
        if state is HIT or state is MISS:
            return state
        if state is None:
            self._state[key] = _QUEUED
            self._queued.append(key)
        return None

    def _take(self, keys: List[bytes], wanted: str) -> List[bytes]:
        state = self._state
        taken = [k for k in keys if state.get(k) is wanted]
        for k in taken:
            state[k] = _ASKED
        return taken

    @property
    def has_queued(self) -> bool:
        return bool(self._queued)

    @property
    def has_retry(self) -> bool:
        return bool(self._retry)

    def take_queued(self) -> List[bytes]:
        """Keys never asked: to send with `flush` at the end of the step."""
        keys, self._queued = self._queued, []
        return self._take(keys, _QUEUED)

    def take_retry(self) -> List[bytes]:
        """Keys the daemon answered `retry`: to ask again this step."""
        keys, self._retry = self._retry, []
        return self._take(keys, _RETRY)

    def record(self, keys: List[bytes], results: List[str]) -> List[str]:
        """Takes the daemon's answers; returns the resolved ones (for the
        hit/miss metrics)."""
        resolved = []
        state = self._state
        for key, result in zip(keys, results):
            if state.get(key) is not _ASKED:
                continue  # the round was reset by a load since the question
            if result == HIT:
                state[key] = HIT
                resolved.append(HIT)
            elif result == MISS:
                state[key] = MISS
                resolved.append(MISS)
            else:
                state[key] = _RETRY
                self._retry.append(key)
        return resolved

    def loaded(self) -> None:
        """A load closed the daemon's round: forget everything but misses."""
        self._state = {k: s for k, s in self._state.items() if s is MISS}
        self._queued = []
        self._retry = []

    @property
    def pending(self) -> bool:
        """Keys still waiting for an answer (the engine must keep stepping)."""
        return self.asking or bool(self._queued) or bool(self._retry)
