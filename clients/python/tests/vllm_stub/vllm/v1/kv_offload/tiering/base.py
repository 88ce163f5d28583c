"""Stand-in for vllm/v1/kv_offload/tiering/base.py: the job types and the
abstract classes, with vLLM's defaults for the optional methods (TB:59-81,
104-118, 120-334 at 7cfb97e). Under KVPEER_VLLM_SHAPE=chunk (vllm/_stub_shape.py):
TransferJob.chunk_ids instead of block_ids (#52615) and __init__'s
backpressure_detector (#50045)."""

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar, Collection, Dict, Iterable, Optional

from vllm._stub_shape import CHUNK
from vllm.v1.kv_offload.base import (
    Locality,
    LookupResult,
    Medium,
    OffloadingEvent,
    OffloadingMetricMetadata,
    OffloadKey,
    ReqContext,
    RequestOffloadingContext,
    ScheduleEndContext,
)

JobId = int


if CHUNK:
    @dataclass
    class TransferJob:  # after #52615
        job_id: JobId
        keys: Collection[OffloadKey]
        chunk_ids: Any  # numpy int64 array in vLLM
        is_promotion: bool
        req_context: ReqContext
else:
    @dataclass
    class TransferJob:  # TB:59-67
        job_id: JobId
        keys: Collection[OffloadKey]
        block_ids: Any  # numpy int64 array in vLLM
        is_promotion: bool
        req_context: ReqContext


@dataclass
class JobResult:
    job_id: JobId
    success: bool
    successful_keys: Optional[Collection[OffloadKey]] = None
    transfer_time: Optional[float] = None


class ParentManager(ABC):
    @abstractmethod
    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext: ...

    @abstractmethod
    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult: ...

    @abstractmethod
    def create_store_job(self, keys: Collection[OffloadKey], req_context: ReqContext) -> TransferJob: ...

    @abstractmethod
    def on_request_finished(self, req_context: ReqContext) -> None: ...


class SecondaryTierManager(ABC):
    medium: ClassVar[Optional[Medium]] = None

    if CHUNK:
        def __init__(self, offloading_spec: Any, primary_kv_view: memoryview, tier_type: str,
                     backpressure_detector: Any = None) -> None:  # after #50045
            self._offloading_spec = offloading_spec
            self._primary_kv_view = primary_kv_view
            self.tier_type = tier_type
            self.locality: Optional[Locality] = None
            self._bp_detector = backpressure_detector

        @property
        def bp_detector(self) -> Any:
            return self._bp_detector
    else:
        def __init__(self, offloading_spec: Any, primary_kv_view: memoryview, tier_type: str) -> None:  # TB:135-153
            self._offloading_spec = offloading_spec
            self._primary_kv_view = primary_kv_view
            self.tier_type = tier_type
            self.locality: Optional[Locality] = None

    @abstractmethod
    def lookup(self, key: OffloadKey, req_context: ReqContext) -> LookupResult: ...

    @abstractmethod
    def submit_store(self, job_metadata: TransferJob) -> None: ...

    @abstractmethod
    def submit_load(self, job_metadata: TransferJob) -> None: ...

    @abstractmethod
    def get_finished_jobs(self) -> Iterable[JobResult]: ...

    def has_pending_work(self) -> bool:
        return False

    def take_events(self) -> Iterable[OffloadingEvent]:
        return ()

    def touch(self, keys: Collection[OffloadKey], req_context: ReqContext):
        return

    @abstractmethod
    def on_new_request(self, req_context: ReqContext) -> RequestOffloadingContext: ...

    def on_request_finished(self, req_context: ReqContext) -> None:
        return

    def serve_external_requests(self, parent: ParentManager) -> None:
        return

    def on_schedule_end(self, context: ScheduleEndContext) -> None:
        return

    @abstractmethod
    def drain_jobs(self) -> None: ...

    def shutdown(self) -> None:
        return

    @classmethod
    def build_metric_definitions(cls, extra_config: Dict[str, Any]) -> Dict[str, OffloadingMetricMetadata]:
        return {}

    def get_stats(self) -> Any:
        return None
