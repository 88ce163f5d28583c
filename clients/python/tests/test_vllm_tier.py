"""kvpeer.vllm.KvpeerSecondaryTier against two real kvpeerd daemons, driven
the way vLLM's tiering manager drives a tier (vllm_driver.Engine), with
vLLM's modules replaced by the stand-in in vllm_stub/ (vLLM itself is not
installed here). Each engine's CPU tier is a real /dev/shm file created as
vLLM creates it, registered with its daemon by descriptor; every loaded
block is checked byte for byte.

  SymmetricTest      remote_kv_source: B probes A and loads A's blocks while
                     A's engine is not stepping at all; misses stay misses
  DisaggregatedTest  remote_decoder on A (supply) / remote_prefiller on B
  FailureTest        A's daemon killed mid-load; request finished mid-load;
                     a slot overwritten while published sealed (checksum)
  LifecycleTest      drain_jobs (waits for an in-flight load, releases every
                     pin), shutdown, budget eviction (incl. a block pinned
                     by a peer's round), the unknown-kwargs contract
  ConfigTest         bad settings are refused with clear messages; two
                     models with different fingerprints never share
"""

from __future__ import annotations

import os
import sys
import threading
import time
import unittest
import uuid
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
sys.path.insert(0, str(HERE / "vllm_stub"))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "integration"))
sys.path.insert(0, str(REPO / "clients" / "python"))

from harness import DaemonTestCase  # noqa: E402
from kvpeer.simulator import block_content, make_keys  # noqa: E402
from kvpeer.vllm import KvpeerSecondaryTier  # noqa: E402
from kvpeer.vllm.metrics import Names  # noqa: E402
from vllm.v1.kv_offload.base import LookupResult, OffloadPolicy  # noqa: E402
from vllm_driver import Engine, VllmRegion  # noqa: E402

ROW = 8192  # two pages: vLLM's row stride is a page multiple
BLOCKS = 64


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


class TierTestCase(DaemonTestCase):
    """Two daemons (A, B) and helpers to put a vLLM-like engine on each."""

    def setUp(self):
        super().setUp()
        self.a = self.start_daemon("node-a")
        self.b = self.start_daemon("node-b")
        self.engines_v = []

    def vllm_engine(self, daemon, name, model="test/model-7b", **tier_kwargs):
        engine_id = f"{name}-{uuid.uuid4().hex[:8]}"
        region = VllmRegion(engine_id, BLOCKS, ROW)
        self.addCleanup(region.close)
        s = spec(engine_id, model)
        config = {"type": "KvpeerSecondaryTier", "module_path": "kvpeer.vllm", "socket": daemon.socket_path}
        config.update(tier_kwargs)
        kwargs = {k: v for k, v in config.items() if k not in ("type", "module_path")}

        def factory(view):
            # vLLM's SecondaryTierFactory.create_secondary_tier: import module_path, getattr type.
            import importlib
            cls = getattr(importlib.import_module(config["module_path"]), config["type"])
            return cls(offloading_spec=s, primary_kv_view=view, tier_type=config["type"], **kwargs)

        engine = Engine(region, factory)
        self.engines_v.append(engine)
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

    def publish(self, engine, keys, req="a-req"):
        ctx = engine.new_request(req)
        engine.store(keys, ctx, content)
        engine.run_until(lambda: engine.tier.published_blocks >= len(keys) and not engine.tier._work_in_flight,
                         what="blocks published")
        engine.finish_request(ctx)
        return ctx


def _resolved(hits):
    """lookup_prefix's answer made truthy for run_until (0 hits is an answer)."""
    return None if hits is None else hits + 1


class SymmetricTest(TierTestCase):
    def test_prefix_shared_while_source_engine_does_not_step(self):
        """A stores 8 blocks and then never steps again (a long prefill):
        B's scheduler probes A through the daemons, gets HIT for A's 8
        blocks and MISS for the 9th, and loads the 8 byte for byte."""
        a = self.vllm_engine(self.a, "a")
        b = self.vllm_engine(self.b, "b")
        keys = make_keys("sym", 9)
        ctx = a.new_request("a-1")
        a.store(keys[:8], ctx, content)
        a_steps = a.steps
        # A's tier sent publish on its own socket; A's engine is now "busy".
        ctx_b = b.new_request("b-1", self.source_params(self.a, "sym-1"))
        hits = self.fetch(b, keys, ctx_b)
        self.assertEqual(hits, 8)
        self.assert_blocks(b, keys[:8])
        self.assertIs(b.cpu.lookup(keys[8]), LookupResult.MISS)
        self.assertEqual(a.steps, a_steps, "A's engine must not have stepped")
        self.assertEqual(b.parent.calls, [], "the tier serves nothing through the engine")
        self.assertEqual(b.tier.counters.total(Names.LOOKUPS, "hit"), 8)
        self.assertEqual(b.tier.counters.total(Names.LOADS, "success"), 1)
        self.assertEqual(b.tier.counters.total(Names.LOAD_BYTES), 8 * ROW)
        # A's 8 slots stay pinned while published: the CPU tier cannot reuse them.
        self.assertEqual([a.cpu.pins(k) for k in keys[:8]], [1] * 8)
        b.finish_request(ctx_b)
        stats = b.tier.get_stats()
        self.assertEqual(stats.data["data"][Names.LOOKUPS][("hit",)], 8)
        self.assertFalse(b.tier.has_pending_work() and not b.run_until(lambda: not b.tier.has_pending_work()))

    def test_no_params_and_missing_fields_miss(self):
        """Like vLLM's P2P tier: no role, or a role missing host/port/id, is
        no source: lookups MISS and nothing is asked of any daemon."""
        b = self.vllm_engine(self.b, "b")
        key = make_keys("none", 1)[0]
        host, port = host_port(self.a)
        for params in (None, {}, {"remote_kv_source": {"remote_host": host, "remote_port": port}},
                       {"remote_kv_source": {"kv_request_id": "x", "remote_host": host}}):
            ctx = b.new_request(f"r-{params}", params)
            self.assertIs(b.tier.lookup(key, ctx), LookupResult.MISS, params)
            b.finish_request(ctx)


    def test_both_directions_at_once(self):
        """A loads B's blocks while B loads A's, over the same pair of
        daemons, in the same steps."""
        a = self.vllm_engine(self.a, "a")
        b = self.vllm_engine(self.b, "b")
        ka, kb = make_keys("from-a", 5), make_keys("from-b", 5)
        self.publish(a, ka)
        self.publish(b, kb)
        # One session between the nodes first: when both daemons dial each
        # other at the same moment, kvpeerd may close as the duplicate a
        # session it had already called ready, failing the probes sent on it
        # (docs/vllm.md, "Known limits"; the cost is a recompute).
        with self.a.client() as c:
            c.connect(self.b.listen)
        ctx_a = a.new_request("a-x", self.source_params(self.b, "bi-a"))
        ctx_b = b.new_request("b-x", self.source_params(self.a, "bi-b"))
        deadline = time.monotonic() + 20
        done = {}
        while len(done) < 2 and time.monotonic() < deadline:
            for name, engine, keys, ctx in (("a", a, kb, ctx_a), ("b", b, ka, ctx_b)):
                if name not in done:
                    hits = engine.lookup_prefix(keys, ctx)
                    if hits is not None:
                        done[name] = hits
                engine.schedule_end()
            time.sleep(0.002)
        self.assertEqual(done, {"a": 5, "b": 5})
        self.assert_blocks(a, kb)
        self.assert_blocks(b, ka)

    def test_job_edge_cases(self):
        """vLLM's P2P manager tests, the parts that apply: a load with no
        keys succeeds at once; a load for a request without a source fails;
        a store for a plain request is published (not parked)."""
        import array as _array
        from vllm.v1.kv_offload.tiering.base import TransferJob
        b = self.vllm_engine(self.b, "b")
        ctx = b.new_request("e-1", self.source_params(self.a, "edge-1"))
        plain = b.new_request("e-2")
        b.tier.submit_load(TransferJob(100, [], _array.array("q"), True, ctx))
        b.tier.submit_load(TransferJob(101, [b"k" * 36], _array.array("q", [0]), True, plain))
        results = {r.job_id: r.success for r in b.tier.get_finished_jobs()}
        self.assertEqual(results, {100: True, 101: False})


class DisaggregatedTest(TierTestCase):
    def test_prefill_stores_for_decoder_which_loads_without_probe(self):
        """A (prefiller, remote_decoder) stores the request's blocks as
        supply and finishes the request; B (decoder, remote_prefiller) gets
        HIT at once for every key and loads them all; A's store job then
        completes and its pins are released."""
        a = self.vllm_engine(self.a, "a")
        b = self.vllm_engine(self.b, "b")
        keys = make_keys("pd", 6)
        ctx_a = a.new_request("p-1", {"remote_decoder": {"kv_request_id": "pd-1"}})
        a.store(keys[:2], ctx_a, content)  # a prefix the CPU tier already had ...
        ctx_a2 = a.new_request("p-2", {"remote_decoder": {"kv_request_id": "pd-2"}})
        self.assertEqual(a._request_level["p-2"], True, "the prefiller asks for REQUEST_LEVEL")
        a.store(keys, ctx_a2, content)  # ... goes to the decoder too (REQUEST_LEVEL)
        a.finish_request(ctx_a2)
        a.step()
        ctx_b = b.new_request("d-2", self.source_params(self.a, "pd-2", role="remote_prefiller"))
        self.assertIs(b.tier.lookup(keys[0], ctx_b), LookupResult.HIT, "no probe for a decoder")
        hits = self.fetch(b, keys, ctx_b)
        self.assertEqual(hits, 6)
        self.assert_blocks(b, keys)
        b.finish_request(ctx_b)
        a.run_until(lambda: all(a.cpu.pins(k) == 0 for k in keys[2:]), what="A's supply released")
        self.assertTrue(all(r.success for r in a.results.values()), a.results)

    def test_decoder_without_id_fails_store(self):
        """A remote_decoder block without kv_request_id marks the request
        remote-decode but its stores fail (vLLM: never store locally)."""
        a = self.vllm_engine(self.a, "a")
        keys = make_keys("pd-noid", 2)
        ctx = a.new_request("p", {"remote_decoder": {}})
        a.store(keys, ctx, content)
        a.run_until(lambda: a.results, what="the store result")
        self.assertEqual([r.success for r in a.results.values()], [False])
        self.assertEqual([a.cpu.pins(k) for k in keys], [0, 0])


class FailureTest(TierTestCase):
    def _probe_all(self, a, b, keys, kv):
        self.publish(a, keys)
        ctx = b.new_request(kv, self.source_params(self.a, kv))
        # Resolve the probe but stop before the load goes out.
        b.run_until(lambda: all(b.tier._probes[kv].answer(k) == "hit" for k in keys), what="probe answered")
        return ctx

    def _load_now(self, b, keys, ctx):
        self.assertIsNone(b.lookup_prefix(keys, ctx))  # HIT_PENDING: promotions queued
        b.schedule_end()  # submit_load

    def test_source_killed_mid_load(self):
        """A's daemon dies while B's load is in flight: B's job fails and the
        request's later lookups MISS (it recomputes)."""
        a = self.vllm_engine(self.a, "a")
        b = self.vllm_engine(self.b, "b")
        keys = make_keys("kill", 8)
        ctx = self._probe_all(a, b, keys, "kill-1")
        self.a.pause()  # the load cannot be served ...
        self._load_now(b, keys, ctx)
        time.sleep(0.2)
        self.a.kill()  # ... and then the source is gone
        b.run_until(lambda: b.results, what="the load's result")
        [result] = b.results.values()
        self.assertFalse(result.success)
        self.assertEqual(b.lookup_prefix(keys, ctx), 0, "a failed request's lookups miss")
        self.assertTrue(all(b.cpu.lookup(k) is LookupResult.MISS for k in keys))
        self.assertEqual(b.tier.counters.total(Names.LOAD_FAILURES, "peer_lost"), 1)
        b.finish_request(ctx)
        self.assertNotIn("kill-1", b.tier._failed, "finishing the request forgets its failure (as vLLM does)")

    def test_request_finished_mid_load(self):
        """vLLM finishes the request while its load is in flight: the load
        ends as a failure (no write lands later), nothing is left pending."""
        a = self.vllm_engine(self.a, "a")
        b = self.vllm_engine(self.b, "b")
        keys = make_keys("fin", 8)
        ctx = self._probe_all(a, b, keys, "fin-1")
        self.a.pause()
        self._load_now(b, keys, ctx)
        b.finish_request(ctx)
        b.run_until(lambda: b.results, what="the load's result")
        self.a.resume()
        [result] = b.results.values()
        self.assertFalse(result.success)
        self.assertEqual(b.tier.counters.total(Names.LOAD_FAILURES, "request_finished"), 1)
        b.run_until(lambda: not b.tier.has_pending_work(), what="B idle")

    def test_slot_reused_while_sealed_fails_with_checksum(self):
        """A block published sealed whose slot the CPU tier then overwrites
        (a reuse that should never happen under the pin) fails B's load
        with `checksum`: B never takes the wrong bytes as a hit."""
        a = self.vllm_engine(self.a, "a")
        b = self.vllm_engine(self.b, "b")
        keys = make_keys("seal", 4)
        ctx = self._probe_all(a, b, keys, "seal-1")
        a.region.write(a.cpu.slot(keys[2]), content(b"some other block"))
        self._load_now(b, keys, ctx)
        b.run_until(lambda: b.results, what="the load's result")
        [result] = b.results.values()
        self.assertFalse(result.success)
        self.assertEqual(b.tier.counters.total(Names.LOAD_FAILURES, "checksum"), 1)
        self.assertTrue(all(b.cpu.lookup(k) is LookupResult.MISS for k in keys), "no block of it is a hit")


class LifecycleTest(TierTestCase):
    def test_drain_jobs_waits_and_releases_every_pin(self):
        """reset_cache: B's drain waits for its in-flight load (not aborted:
        it completes with the right bytes); A's drain unpublishes and its
        store jobs complete, so no pin is left and B's next probe misses."""
        a = self.vllm_engine(self.a, "a")
        b = self.vllm_engine(self.b, "b")
        keys = make_keys("drain", 8)
        self.publish(a, keys)
        ctx = b.new_request("d-1", self.source_params(self.a, "drain-1"))
        b.run_until(lambda: all(b.tier._probes["drain-1"].answer(k) == "hit" for k in keys), what="probe")
        self.a.pause()
        self.assertIsNone(b.lookup_prefix(keys, ctx))
        b.schedule_end()
        timer = threading.Timer(0.5, self.a.resume)
        timer.start()
        self.addCleanup(timer.cancel)
        started = time.monotonic()
        b.reset_cache()
        self.assertGreater(time.monotonic() - started, 0.3, "drain_jobs waited for the load")
        self.assertTrue(all(r.success for r in b.results.values()), b.results)
        self.assert_blocks(b, keys)
        b.finish_request(ctx)

        a.reset_cache()
        self.assertEqual(a.tier.published_blocks, 0)
        self.assertEqual([a.cpu.pins(k) for k in keys], [0] * 8)
        ctx2 = b.new_request("d-2", self.source_params(self.a, "drain-2"))
        self.assertEqual(self.fetch(b, make_keys("drain-other", 1) + keys[:1], ctx2), 0)

    def test_shutdown_withdraws_and_ends_the_session(self):
        a = self.vllm_engine(self.a, "a")
        b = self.vllm_engine(self.b, "b")
        keys = make_keys("shut", 4)
        self.publish(a, keys)
        self.assertEqual(len(self.a.status()["engines"]), 1)
        started = time.monotonic()
        a.shutdown()
        self.assertLess(time.monotonic() - started, 5.0)
        # vLLM's manager stops polling after shutdown; every job still has its result waiting.
        a.process_finished()
        self.assertEqual(a.jobs, {}, "every job has a result")
        self.assertEqual([a.cpu.pins(k) for k in keys], [0] * 4)
        self.wait_until(lambda: not self.a.status()["engines"], what="A's engine session closed")
        ctx = b.new_request("s-1", self.source_params(self.a, "shut-1"))
        self.assertEqual(self.fetch(b, keys, ctx), 0)

    def test_budget_evicts_oldest_and_completes_store_jobs(self):
        """publish_budget_bytes of 4 rows: a new job pushes out the oldest
        published blocks; a job completes (vLLM unpins) only when all its
        blocks are released, including one still pinned by B's round."""
        a = self.vllm_engine(self.a, "a", publish_budget_bytes=4 * ROW)
        b = self.vllm_engine(self.b, "b")
        self.assertEqual(a.tier.budget_blocks, 4)
        k1, k2, k3 = make_keys("j1", 4), make_keys("j2", 2), make_keys("j3", 2)
        ctx = a.new_request("a-1")
        a.store(k1, ctx, content)
        a.run_until(lambda: a.tier.published_blocks == 4, what="job 1 published")
        # B's round pins k1[0] and k1[1] on A's node (a probe hit pins).
        ctx_b = b.new_request("b-1", self.source_params(self.a, "bud-1"))
        b.run_until(lambda: all(b.tier._probes["bud-1"].answer(k) == "hit" for k in k1[:2]), what="probe")
        a.store(k2, ctx, content)  # evicts k1[0], k1[1] (pinned by B's round)
        a.run_until(lambda: a.tier.published_blocks == 4 and not a.tier._work_in_flight, what="job 2 published")
        a.store(k3, ctx, content)  # evicts k1[2], k1[3] (free at once)
        a.run_until(lambda: not a.tier._work_in_flight, what="job 3 published")
        for _ in range(5):
            a.step()
        self.assertEqual([a.cpu.pins(k) for k in k1], [1] * 4, "job 1 still holds: B's round pins two blocks")
        b.finish_request(ctx_b)  # ends B's round on A: the pins drop
        a.run_until(lambda: all(a.cpu.pins(k) == 0 for k in k1), what="job 1 completed")
        self.assertEqual([a.cpu.pins(k) for k in k2 + k3], [1] * 4)
        self.assertEqual(a.tier.counters.total(Names.PUBLISH_EVICTIONS), 4)
        ctx_b2 = b.new_request("b-2", self.source_params(self.a, "bud-2"))
        self.assertEqual(self.fetch(b, k1[:1], ctx_b2), 0, "an unpublished block misses")
        ctx_b3 = b.new_request("b-3", self.source_params(self.a, "bud-3"))
        self.assertEqual(self.fetch(b, k3, ctx_b3), 2)
        self.assert_blocks(b, k3)

    def test_own_daemon_lost_then_back(self):
        """A's own daemon dies: every job A's tier held gets a (failed)
        result, so vLLM unpins; lookups miss meanwhile; once a daemon is back
        on the socket the tier opens a new session and publishes again."""
        tier_module = sys.modules["kvpeer.vllm.tier"]
        self.addCleanup(setattr, tier_module, "_RECONNECT_INTERVAL_S", tier_module._RECONNECT_INTERVAL_S)
        tier_module._RECONNECT_INTERVAL_S = 0.2
        a = self.vllm_engine(self.a, "a")
        keys = make_keys("lost", 4)
        self.publish(a, keys)
        self.a.kill()
        a.run_until(lambda: all(a.cpu.pins(k) == 0 for k in keys), what="A's held jobs failed and unpinned")
        self.assertIsNotNone(a.tier.broken)
        self.assertFalse(any(r.success for r in a.results.values()))
        self.start_daemon("node-a")  # the same socket path
        more = make_keys("back", 2)
        ctx = a.new_request("a-2")
        a.run_until(lambda: a.tier.broken is None and a.tier.node_id is not None, what="reconnected")
        a.store(more, ctx, content)
        a.run_until(lambda: a.tier.published_blocks == 2 and not a.tier._work_in_flight, what="published again")
        self.assertEqual(self.daemons[-1].status()["engines"][0]["published"], 2)

    def test_unknown_kwargs_accepted(self):
        a = self.vllm_engine(self.a, "a", some_future_argument=1, backpressure_detector=None)
        self.assertIsNone(a.tier.broken)
        self.assertEqual(a.tier.on_new_request(a.new_request("z")).policy, OffloadPolicy.BLOCK_LEVEL)

    def test_metric_definitions_cover_what_get_stats_reports(self):
        """vLLM declares a tier's metrics before building it; every name
        get_stats reports must be declared, with its labels."""
        defs = KvpeerSecondaryTier.build_metric_definitions({"type": "KvpeerSecondaryTier"})
        self.assertEqual(set(defs), {v for k, v in vars(Names).items() if not k.startswith("_")})
        self.assertEqual(defs[Names.LOAD_FAILURES].labelnames, ("reason",))
        a = self.vllm_engine(self.a, "a")
        self.publish(a, make_keys("m", 2))
        stats = a.tier.get_stats()
        self.assertLessEqual(set(stats.data["data"]), set(defs))
        self.assertEqual(stats.data["data"][Names.PUBLISHED_BLOCKS][()], 2)


class ConfigTest(TierTestCase):
    def test_hash_seed_read_lazily_and_must_match(self):
        """The seed is read at the first request, after vLLM's
        init_none_hash (not when the tier is built); engines whose seeds
        differ (xxhash's random per-process seed) never share, engines with
        the same PYTHONHASHSEED do."""
        from vllm.v1.core import kv_cache_utils
        self.addCleanup(setattr, kv_cache_utils, "_NONE_HASH_SEED", kv_cache_utils._NONE_HASH_SEED)
        saved = os.environ.pop("PYTHONHASHSEED", None)
        self.addCleanup(lambda: os.environ.__setitem__("PYTHONHASHSEED", saved) if saved is not None
                        else os.environ.pop("PYTHONHASHSEED", None))
        a = self.vllm_engine(self.a, "a")  # built before the seed is known
        b = self.vllm_engine(self.b, "b")
        kv_cache_utils.init_none_hash_seed(cryptographic=False)  # a random seed for A
        keys = make_keys("seed", 2)
        self.publish(a, keys)
        kv_cache_utils.init_none_hash_seed(cryptographic=False)  # another for B
        ctx = b.new_request("s-1", self.source_params(self.a, "seed-1"))
        self.assertEqual(self.fetch(b, keys, ctx), 0, "different seeds: refused, so every key misses")
        b.finish_request(ctx)

        c = self.vllm_engine(self.start_daemon("node-c"), "c")
        d = self.vllm_engine(self.start_daemon("node-d"), "d")
        os.environ["PYTHONHASHSEED"] = "4242"
        kv_cache_utils.init_none_hash_seed(cryptographic=False)
        self.publish(c, keys)
        ctx = d.new_request("s-2", self.source_params(self.daemons[-2], "seed-2"))
        self.assertEqual(self.fetch(d, keys, ctx), 2, "the same PYTHONHASHSEED: shared")
        self.assert_blocks(d, keys)

    def test_bad_settings_are_refused_clearly(self):
        region = VllmRegion(f"cfg-{uuid.uuid4().hex[:8]}", 4, ROW)
        self.addCleanup(region.close)
        s = spec(region.path.split("vllm_offload_")[1][:-5])
        with self.assertRaisesRegex(ConnectionError, "cannot be reached"):
            KvpeerSecondaryTier(s, region.view, "KvpeerSecondaryTier", socket="/nonexistent/kvpeerd.sock")
        with self.assertRaisesRegex(ValueError, "publish_budget_bytes"):
            KvpeerSecondaryTier(s, region.view, "KvpeerSecondaryTier", socket=self.a.socket_path,
                                publish_budget_bytes=-1)
        other = VllmRegion(f"cfg-other-{uuid.uuid4().hex[:8]}", 4, ROW)
        self.addCleanup(other.close)
        with self.assertRaisesRegex(ValueError, "not a mapping of"):
            KvpeerSecondaryTier(s, region.view, "KvpeerSecondaryTier", socket=self.a.socket_path,
                                region_path=other.path)

    def test_different_models_never_share(self):
        """Two engines whose fingerprints differ: the daemons refuse each
        other, so B's lookups end in MISS, never in a load."""
        a = self.vllm_engine(self.a, "a", model="test/model-7b")
        b = self.vllm_engine(self.b, "b", model="test/other-model")
        self.assertNotEqual(a.tier._config_fingerprint, b.tier._config_fingerprint)
        keys = make_keys("fp", 2)
        self.publish(a, keys)
        ctx = b.new_request("f-1", self.source_params(self.a, "fp-1"))
        self.assertEqual(self.fetch(b, keys, ctx), 0)
        self.assertEqual(b.results, {})


if __name__ == "__main__":
    unittest.main()
