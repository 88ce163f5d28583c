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
        self.asking = False  # a lookup of this request is waiting for its answer

    def answer(self, key: bytes) -> Optional[str]:
        """HIT or MISS if known; else None, and the key is queued to be
        asked (if it was not already)."""
        state = self._state.get(key)
        if state == HIT or state == MISS:
            return state
        if state is None:
            self._state[key] = _QUEUED
        return None

    def _take(self, wanted: str) -> List[bytes]:
        keys = [k for k, s in self._state.items() if s == wanted]
        for k in keys:
            self._state[k] = _ASKED
        return keys

    def take_queued(self) -> List[bytes]:
        """Keys never asked: to send with `flush` at the end of the step."""
        return self._take(_QUEUED)

    def take_retry(self) -> List[bytes]:
        """Keys the daemon answered `retry`: to ask again this step."""
        return self._take(_RETRY)

    def record(self, keys: List[bytes], results: List[str]) -> List[str]:
        """Takes the daemon's answers; returns the resolved ones (for the
        hit/miss metrics)."""
        resolved = []
        for key, result in zip(keys, results):
            if self._state.get(key) != _ASKED:
                continue  # the round was reset by a load since the question
            if result in (HIT, MISS):
                self._state[key] = result
                resolved.append(result)
            else:
                self._state[key] = _RETRY
        return resolved

    def loaded(self) -> None:
        """A load closed the daemon's round: forget everything but misses."""
        self._state = {k: s for k, s in self._state.items() if s == MISS}

    @property
    def pending(self) -> bool:
        """Keys still waiting for an answer (the engine must keep stepping)."""
        return self.asking or any(s in (_QUEUED, _RETRY, _ASKED) for s in self._state.values())
