"""Which shape of vLLM's secondary-tier interface the imported vLLM has.

The interface is marked unstable by vLLM and has changed in ways a tier
must follow (docs/vllm.md, "vLLM versions"):

  * at vllm-project/vllm 7cfb97e (the commit the tier was written against):
    `TransferJob.block_ids`, `OffloadPolicy.BLOCK_LEVEL`, and
    `SecondaryTierManager.__init__(offloading_spec, primary_kv_view,
    tier_type)` (vllm/v1/kv_offload/tiering/base.py:59-67, 135-153;
    vllm/v1/kv_offload/base.py:116-127);
  * after #52615 ("rename block -> chunk"): `TransferJob.chunk_ids` and
    `OffloadPolicy.CHUNK_LEVEL`, with no aliases;
  * after #50045 (back-pressure): the base `__init__` takes
    `backpressure_detector=None` and the factory always passes it (issue
    #58087: a tier whose __init__ does not accept it fails to build).

The choice is made from what the imported classes have (their fields, enum
members and the base __init__'s parameters), never from a version string,
so a vLLM with only one of the two changes works too. Anything else is
refused with an error naming what is missing.
"""

from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass
from typing import Any

__all__ = ["Shape", "detect", "IncompatibleVllm"]


class IncompatibleVllm(ImportError):
    """The imported vLLM lacks an attribute the tier needs."""


@dataclass(frozen=True)
class Shape:
    """What differs between the supported vLLM interface versions."""

    slots_field: str  # TransferJob's primary-slot ids: "block_ids" or "chunk_ids"
    incremental_policy: Any  # OffloadPolicy.BLOCK_LEVEL or OffloadPolicy.CHUNK_LEVEL
    request_policy: Any  # OffloadPolicy.REQUEST_LEVEL
    backpressure: bool  # SecondaryTierManager.__init__ takes backpressure_detector

    @property
    def name(self) -> str:
        parts = ["chunk_ids" if self.slots_field == "chunk_ids" else "block_ids"]
        if self.backpressure:
            parts.append("backpressure_detector")
        return "+".join(parts)


def _field_names(cls: Any) -> set:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    names = set(getattr(cls, "__annotations__", {}) or {})
    try:
        names |= set(inspect.signature(cls).parameters)
    except (TypeError, ValueError):
        pass
    return names


def detect(transfer_job: Any, offload_policy: Any, secondary_tier_manager: Any) -> Shape:
    """The shape of the given vLLM classes; IncompatibleVllm naming the
    missing attribute otherwise."""
    fields = _field_names(transfer_job)
    if "chunk_ids" in fields and "block_ids" in fields:
        raise IncompatibleVllm("vLLM's TransferJob has both 'block_ids' and 'chunk_ids'; the kvpeer tier knows "
                               "either one (docs/vllm.md, 'vLLM versions')")
    if "chunk_ids" in fields:
        slots_field = "chunk_ids"
    elif "block_ids" in fields:
        slots_field = "block_ids"
    else:
        raise IncompatibleVllm("vLLM's TransferJob has neither 'block_ids' (vLLM 7cfb97e) nor 'chunk_ids' "
                               f"(vLLM #52615); its fields are {sorted(fields)}")
    for name in ("job_id", "keys", "is_promotion", "req_context"):
        if name not in fields:
            raise IncompatibleVllm(f"vLLM's TransferJob has no field '{name}'")

    members = getattr(offload_policy, "__members__", {})
    if "REQUEST_LEVEL" not in members:
        raise IncompatibleVllm(f"vLLM's OffloadPolicy has no member 'REQUEST_LEVEL'; it has {sorted(members)}")
    if "CHUNK_LEVEL" in members:
        incremental = members["CHUNK_LEVEL"]
    elif "BLOCK_LEVEL" in members:
        incremental = members["BLOCK_LEVEL"]
    else:
        raise IncompatibleVllm("vLLM's OffloadPolicy has neither 'BLOCK_LEVEL' (vLLM 7cfb97e) nor 'CHUNK_LEVEL' "
                               f"(vLLM #52615); it has {sorted(members)}")

    try:
        params = inspect.signature(secondary_tier_manager.__init__).parameters
    except (TypeError, ValueError) as e:
        raise IncompatibleVllm(f"vLLM's SecondaryTierManager.__init__ has no readable signature: {e}") from e
    for name in ("offloading_spec", "primary_kv_view", "tier_type"):
        if name not in params:
            raise IncompatibleVllm(f"vLLM's SecondaryTierManager.__init__ has no parameter '{name}'; it has "
                                   f"{[p for p in params if p != 'self']}")
    return Shape(slots_field=slots_field, incremental_policy=incremental, request_policy=members["REQUEST_LEVEL"],
                 backpressure="backpressure_detector" in params)
