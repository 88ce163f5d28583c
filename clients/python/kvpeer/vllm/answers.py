"""The daemon's answers, type-checked before the tier acts on them.

Every field the tier reads from a kvpeerd answer goes through one of these
functions. A daemon that sends something else (a newer or broken daemon, or
something that is not kvpeerd on the socket) raises `BadAnswer` naming the
op, the field and what came; the tier treats that like a lost daemon (every
job owed a result fails once, the connection is closed and opened again
later) instead of letting a TypeError escape into vLLM's scheduler.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Mapping, Optional, Sequence

__all__ = ["BadAnswer", "JobOutcome", "PollAnswer", "poll", "lookup_results", "hello_node_id"]

LOOKUP_RESULTS = frozenset(("hit", "miss", "retry"))


class BadAnswer(ValueError):
    """An answer of the daemon that does not have the documented shape."""


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _list(answer: Mapping[str, Any], op: str, name: str) -> List[Any]:
    value = answer.get(name, [])
    if not isinstance(value, list):
        raise BadAnswer(f"{op} answer: '{name}' must be a list, got {_describe(value)}")
    return value


def _int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class JobOutcome:
    job_id: int
    success: bool
    reason: Optional[str]


@dataclass(frozen=True)
class PollAnswer:
    results: List[JobOutcome]
    failed_requests: List[str]
    released: List[int]


def poll(answer: Mapping[str, Any]) -> PollAnswer:
    """`poll`'s results, failed_requests and released (control-api.md)."""
    results = []
    for item in _list(answer, "poll", "results"):
        if not isinstance(item, Mapping):
            raise BadAnswer(f"poll answer: each of 'results' must be an object, got {_describe(item)}")
        job_id = item.get("job_id")
        success = item.get("success")
        reason = item.get("reason")
        if not _int(job_id):
            raise BadAnswer(f"poll answer: a result's 'job_id' must be an integer, got {_describe(job_id)}")
        if not isinstance(success, bool):
            raise BadAnswer(f"poll answer: job {job_id}'s 'success' must be true or false, got {_describe(success)}")
        if reason is not None and not isinstance(reason, str):
            raise BadAnswer(f"poll answer: job {job_id}'s 'reason' must be a string, got {_describe(reason)}")
        results.append(JobOutcome(job_id, success, reason))
    failed = _list(answer, "poll", "failed_requests")
    for item in failed:
        if not isinstance(item, str):
            raise BadAnswer(f"poll answer: each of 'failed_requests' must be a string, got {_describe(item)}")
    released = _list(answer, "poll", "released")
    for item in released:
        if not _int(item) or item < 0:
            raise BadAnswer(f"poll answer: each of 'released' must be a block id (integer >= 0), got "
                            f"{_describe(item)}")
    return PollAnswer(results, list(failed), list(released))


def lookup_results(answer: Mapping[str, Any], asked: Sequence[Any]) -> List[str]:
    """`lookup`'s results: one of hit/miss/retry per key asked."""
    results = _list(answer, "lookup", "results")
    if len(results) != len(asked):
        raise BadAnswer(f"lookup answer: {len(results)} results for {len(asked)} keys")
    for item in results:
        if item not in LOOKUP_RESULTS:
            raise BadAnswer(f"lookup answer: each result must be 'hit', 'miss' or 'retry', got {_describe(item)}")
    return results


def hello_node_id(answer: Mapping[str, Any]) -> str:
    node_id = answer.get("node_id")
    if not isinstance(node_id, str) or not node_id:
        raise BadAnswer(f"hello answer: 'node_id' must be a non-empty string, got {_describe(node_id)}")
    return node_id


def unpublish(answer: Mapping[str, Any]) -> None:
    """`unpublish`'s released and pinned (read only to check their shape:
    the tier no longer waits for slots to be released)."""
    for name in ("released", "pinned"):
        for item in _list(answer, "unpublish", name):
            if not _int(item) or item < 0:
                raise BadAnswer(f"unpublish answer: each of '{name}' must be a block id, got {_describe(item)}")
