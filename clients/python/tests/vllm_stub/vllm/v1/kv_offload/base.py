"""Stand-in for vllm/v1/kv_offload/base.py: the types a secondary tier sees
(vllm/v1/kv_offload/base.py:90-136 at 7cfb97e; OffloadPolicy as renamed by
#52615 under KVPEER_VLLM_SHAPE=chunk, see vllm/_stub_shape.py)."""

from dataclasses import dataclass, field
from enum import Enum, auto
from typing import Any, ClassVar, Collection, Dict, NamedTuple, NewType, Optional, Tuple, Type, TypeVar

from vllm._stub_shape import CHUNK

OffloadKey = NewType("OffloadKey", bytes)


def make_offload_key(block_hash: bytes, group_idx: int) -> OffloadKey:
    return OffloadKey(block_hash + group_idx.to_bytes(4, "big", signed=False))


_T = TypeVar("_T")


class Medium(Enum):
    CPU = "CPU"
    STORAGE = "STORAGE"


class Locality(Enum):
    LOCAL = "LOCAL"
    REMOTE = "REMOTE"


@dataclass(frozen=True)
class TierFilter:
    matchers: Tuple[Any, ...] = ()
    ALL: ClassVar["TierFilter"]

    def allows(self, medium: Optional[Medium], locality: Optional[Locality]) -> bool:
        return True


TierFilter.ALL = TierFilter()


@dataclass
class ReqContext:
    req_id: str
    kv_transfer_params: Optional[Dict[str, Any]] = None
    load_tier_filter: TierFilter = TierFilter.ALL
    _state: Dict[type, Any] = field(default_factory=dict, repr=False, init=False)

    def set_state(self, val: Any) -> None:
        self._state[type(val)] = val

    def get_state(self, cls: Type[_T]) -> Optional[_T]:
        return self._state.get(cls)


class LookupResult(Enum):
    MISS = auto()
    HIT = auto()
    HIT_PENDING = auto()
    RETRY = auto()


if CHUNK:
    class OffloadPolicy(Enum):  # after #52615: BLOCK_LEVEL renamed, no alias
        CHUNK_LEVEL = "chunk_level"
        REQUEST_LEVEL = "request_level"

    _DEFAULT_POLICY = OffloadPolicy.CHUNK_LEVEL
else:
    class OffloadPolicy(Enum):  # base.py:116-122 at 7cfb97e
        BLOCK_LEVEL = "block_level"
        REQUEST_LEVEL = "request_level"

    _DEFAULT_POLICY = OffloadPolicy.BLOCK_LEVEL


@dataclass
class RequestOffloadingContext:  # base.py:125-127
    policy: OffloadPolicy = _DEFAULT_POLICY


class ScheduleEndContext(NamedTuple):
    new_req_ids: Collection[str]
    preempted_req_ids: Collection[str]


@dataclass
class OffloadingEvent:
    keys: list
    medium: Medium
    removed: bool
    locality: Optional[Locality] = None


@dataclass(frozen=True)
class OffloadingMetricMetadata:
    documentation: str
    labelnames: Tuple[str, ...] = ()


@dataclass(frozen=True)
class OffloadingCounterMetadata(OffloadingMetricMetadata):
    pass


@dataclass(frozen=True)
class OffloadingGaugeMetadata(OffloadingMetricMetadata):
    pass


class OffloadingSpec:
    """Only a name here: the tier reads `offloading_spec.config` (an
    OffloadingConfig in vLLM), which the tests build as plain objects."""
