"""What the vLLM tier's tests (test_vllm_tier*.py) share: the engines' sizes,
the offloading spec and block contents, and TierTestCase (two real kvpeerd
daemons, engines driven as vLLM's tiering manager drives a tier through
vllm_driver.Engine, every call into the tier recorded).
"""

from __future__ import annotations

import os
import uuid
from types import SimpleNamespace

from kvpeer_testing.harness import DaemonTestCase
from kvpeer.simulator import block_content
from vllm.v1.kv_offload.base import LookupResult
from vllm_driver import Engine, VllmRegion, create_tier

ROW = 8192  # two pages: vLLM's row stride is a page multiple
BLOCKS = 64

# The tier methods vLLM calls (SecondaryTierManager at 7cfb97e, TB:155-334).
TIER_METHODS = ("lookup", "submit_store", "submit_load", "get_finished_jobs", "has_pending_work", "take_events",
                "touch", "on_new_request", "on_request_finished", "serve_external_requests", "on_schedule_end",
                "drain_jobs", "shutdown", "get_stats")


def spec(engine_id: str, model: str = "test/model-7b"):
    """An OffloadingSpec as the tier reads it (spec.config is vLLM's OffloadingConfig)."""
    config = SimpleNamespace(
        engine_id=engine_id,
        model=SimpleNamespace(name=model, dtype="bfloat16"),
        cache=SimpleNamespace(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=SimpleNamespace(tp_size=1, pp_size=1, pcp_size=1, dcp_size=1, rank=0,
                                 data_parallel_index=0, is_parallelism_agnostic=False),
        groups=(SimpleNamespace(tokens_per_block=16, layer_names=("layers.0", "layers.1")),),
        replicated_layout=False, canonical_layout=False, extra_config={})
    return SimpleNamespace(config=config, extra_config={})


def content(key: bytes) -> bytes:
    return block_content(key, ROW)


def host_port(daemon):
    host, port = daemon.listen.rsplit(":", 1)
    return host, int(port)


def without_pythonhashseed(test):
    """The seed rule depends on PYTHONHASHSEED: tests run with it unset
    (restored afterwards)."""
    saved = os.environ.pop("PYTHONHASHSEED", None)
    test.addCleanup(lambda: os.environ.__setitem__("PYTHONHASHSEED", saved) if saved is not None
                    else os.environ.pop("PYTHONHASHSEED", None))
    from vllm.v1.core import kv_cache_utils
    test.addCleanup(setattr, kv_cache_utils, "_NONE_HASH_SEED", kv_cache_utils._NONE_HASH_SEED)


class CallRecorder:
    """Counts every call vLLM could make into a tier (instance attributes
    shadow the methods), to show a node serves peers with its tier idle."""

    def __init__(self, tier):
        self.calls = []
        for name in TIER_METHODS:
            method = getattr(tier, name)
            setattr(tier, name, self._wrap(name, method))

    def _wrap(self, name, method):
        def call(*args, **kwargs):
            self.calls.append(name)
            return method(*args, **kwargs)
        return call


class TierTestCase(DaemonTestCase):
    """Two daemons (A, B) and helpers to put a vLLM-like engine on each."""

    def setUp(self):
        super().setUp()
        without_pythonhashseed(self)
        self.a = self.start_daemon("node-a")
        self.b = self.start_daemon("node-b")

    def vllm_engine(self, daemon, name, model="test/model-7b", blocks=BLOCKS, **tier_kwargs):
        engine_id = f"{name}-{uuid.uuid4().hex[:8]}"
        region = VllmRegion(engine_id, blocks, ROW)
        self.addCleanup(region.close)
        s = spec(engine_id, model)
        config = {"type": "KvpeerSecondaryTier", "module_path": "kvpeer.vllm", "socket": daemon.socket_path}
        config.update(tier_kwargs)
        engine = Engine(region, lambda view: create_tier(config, s, view))
        self.addCleanup(self._shutdown_engine, engine)
        return engine

    @staticmethod
    def _shutdown_engine(engine):
        if engine.tier.broken != "shut down":
            engine.shutdown()

    def source_params(self, daemon, kv, role="remote_kv_source"):
        host, port = host_port(daemon)
        return {role: {"kv_request_id": kv, "remote_host": host, "remote_port": port}}

    def fetch(self, engine, keys, ctx, timeout=20.0):
        """The scheduler's lookups, step after step, until the prefix
        lookup resolves and every promotion has landed; returns the hit count."""
        hits = engine.run_until(lambda: _resolved(engine.lookup_prefix(keys, ctx)), timeout,
                                "prefix lookup resolved")
        return hits - 1

    def assert_blocks(self, engine, keys):
        for key in keys:
            self.assertIs(engine.cpu.lookup(key), LookupResult.HIT)
            self.assertEqual(engine.region.read(engine.cpu.slot(key)), content(key),
                             f"block {key.hex()[:12]} differs")

    def idle(self, engine, what="engine idle"):
        """Steps (as vLLM does while has_pending_work) until nothing is owed."""
        engine.run_until(lambda: not engine.tier.has_pending_work(), what=what)
        engine.process_finished()

    def publish(self, engine, keys, req="a-req"):
        ctx = engine.new_request(req)
        engine.store(keys, ctx, content)
        engine.finish_request(ctx)
        engine.run_until(lambda: engine.tier.published_blocks >= len(keys) and not engine.jobs,
                         what="blocks published and their store jobs finished")
        self.idle(engine)
        return ctx


def _resolved(hits):
    """lookup_prefix's answer made truthy for run_until (0 hits is an answer)."""
    return None if hits is None else hits + 1
