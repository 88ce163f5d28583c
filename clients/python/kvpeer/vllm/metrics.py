"""The tier's metrics, through vLLM's hooks for secondary tiers:
`build_metric_definitions` (names, kinds, help, labels, declared before the
tier exists) and `get_stats` (observations since the last call, as vLLM's
OffloadingConnectorStats). The daemon has its own, richer metrics
(`kvpeerctl metrics`); these are what the engine sees of its tier.

Failure reasons from the daemon are prose; they are folded into a few fixed
labels so a flood of distinct messages cannot blow up label cardinality.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Dict, Optional, Tuple

__all__ = ["Names", "Counters", "definitions", "reason_label"]


class Names:
    """Metric names (vLLM's `vllm:` prefix, as its built-in tiers use)."""

    LOOKUPS = "vllm:kv_offload_kvpeer_lookups"  # label result: hit | miss
    LOADS = "vllm:kv_offload_kvpeer_loads"  # label result: success | failure
    LOAD_BYTES = "vllm:kv_offload_kvpeer_load_bytes"
    LOAD_FAILURES = "vllm:kv_offload_kvpeer_load_failures"  # label reason
    STORES = "vllm:kv_offload_kvpeer_stores"  # label result (remote_decoder supply)
    PUBLISHED_BLOCKS = "vllm:kv_offload_kvpeer_published_blocks"
    PUBLISH_EVICTIONS = "vllm:kv_offload_kvpeer_publish_evictions"
    PUBLISH_WITHDRAWALS = "vllm:kv_offload_kvpeer_publish_withdrawals"  # published slots vLLM reused


REASONS = ("checksum", "timeout", "request_finished", "peer_lost", "refused", "shutdown", "other")


def reason_label(reason: Optional[str]) -> str:
    """One of REASONS for a daemon failure message."""
    text = (reason or "").lower()
    if "checksum" in text:
        return "checksum"
    if "timed out" in text or "timeout" in text:
        return "timeout"
    if "request finished" in text:
        return "request_finished"
    if "shutting down" in text:
        return "shutdown"
    if "refused" in text:
        return "refused"
    if "peer" in text or "session" in text or "closed" in text or "disconnect" in text:
        return "peer_lost"
    return "other"


def definitions() -> Dict[str, Any]:
    """The metadata vLLM's `build_metric_definitions` returns, built from
    vLLM's own metadata classes; empty when vLLM is not importable."""
    try:
        from vllm.v1.kv_offload.base import (  # type: ignore[import-not-found]
            OffloadingCounterMetadata,
            OffloadingGaugeMetadata,
        )
    except ImportError:
        return {}
    return {
        Names.LOOKUPS: OffloadingCounterMetadata(
            documentation="Blocks probed on a remote kvpeerd, by answer.", labelnames=("result",)),
        Names.LOADS: OffloadingCounterMetadata(
            documentation="Load jobs from a remote node through kvpeerd, by result.", labelnames=("result",)),
        Names.LOAD_BYTES: OffloadingCounterMetadata(
            documentation="Bytes loaded from remote nodes into the CPU tier through kvpeerd."),
        Names.LOAD_FAILURES: OffloadingCounterMetadata(
            documentation="Failed kvpeerd load jobs, by reason.", labelnames=("reason",)),
        Names.STORES: OffloadingCounterMetadata(
            documentation="Disaggregated-prefill supply jobs (remote_decoder), by result.",
            labelnames=("result",)),
        Names.PUBLISHED_BLOCKS: OffloadingGaugeMetadata(
            documentation="CPU-tier blocks published (sealed) to kvpeerd now."),
        Names.PUBLISH_EVICTIONS: OffloadingCounterMetadata(
            documentation="Blocks unpublished to stay within publish_budget_bytes."),
        Names.PUBLISH_WITHDRAWALS: OffloadingCounterMetadata(
            documentation="Published blocks withdrawn because vLLM stored or loaded other blocks into their slots."),
    }


class Counters:
    """Observations since the last `take`."""

    def __init__(self) -> None:
        self._counts: Dict[Tuple[str, Tuple[str, ...]], float] = defaultdict(float)
        self._gauges: Dict[str, float] = {}
        # Totals since start, never reset: for tests and logs.
        self.totals: Dict[Tuple[str, Tuple[str, ...]], float] = defaultdict(float)

    def add(self, name: str, value: float = 1, *labels: str) -> None:
        self._counts[(name, labels)] += value
        self.totals[(name, labels)] += value

    def gauge(self, name: str, value: float) -> None:
        self._gauges[name] = value

    def total(self, name: str, *labels: str) -> float:
        return self.totals.get((name, labels), 0)

    def take(self) -> Optional[Any]:
        """vLLM's OffloadingConnectorStats with what was observed (None if
        vLLM's metrics module is not importable or nothing happened)."""
        if not self._counts and not self._gauges:
            return None
        try:
            from vllm.distributed.kv_transfer.kv_connector.v1.offloading.metrics import (  # type: ignore
                OffloadingConnectorStats,
            )
        except ImportError:
            return None
        stats = OffloadingConnectorStats()
        for (name, labels), value in self._counts.items():
            stats.increase_counter(name, value, labels)
        for name, value in self._gauges.items():
            stats.set_gauge(name, value)
        self._counts.clear()
        self._gauges.clear()
        return stats
