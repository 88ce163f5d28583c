"""kvpeer.vllm.KvpeerSecondaryTier's lifecycle and configuration against two
real kvpeerd daemons, driven as vLLM's tiering manager drives a tier
(tier_case.TierTestCase; vLLM replaced by the stand-in in vllm_stub/, one
ctest per shape, KVPEER_VLLM_SHAPE).

  LifecycleTest      drain_jobs, shutdown, the publish budget, own daemon
                     lost and back, the unknown-kwargs contract, metrics
  ConfigTest         bad settings are refused with clear messages; two
                     models with different fingerprints never share; the
                     hash seed at construction or at the first request
"""

from __future__ import annotations

import os
import sys
import threading
import time
import unittest
import uuid

from kvpeer.simulator import make_keys
from kvpeer.vllm import KvpeerSecondaryTier
from kvpeer.vllm.metrics import Names
from vllm._stub_shape import CHUNK, SHAPE
from vllm.v1.kv_offload.base import OffloadPolicy
from vllm_driver import VllmRegion
from tier_case import BLOCKS, ROW, TierTestCase, content, spec


class LifecycleTest(TierTestCase):
    def test_drain_jobs_waits_and_withdraws(self):
        """reset_cache: B's drain waits for its in-flight load (not aborted:
        it completes with the right bytes); A's drain unpublishes, so no
        job is left and B's next probe misses."""
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
        a.process_finished()
        self.assertEqual(a.jobs, {}, "every job has a result")
        self.wait_until(lambda: not self.a.status()["engines"], what="A's engine session closed")
        ctx = b.new_request("s-1", self.source_params(self.a, "shut-1"))
        self.assertEqual(self.fetch(b, keys, ctx), 0)

    def test_budget_bounds_what_is_published(self):
        """publish_budget_bytes of 4 rows: a new job pushes out the oldest
        published blocks, even ones a peer's round has hit (the store jobs
        finish regardless: nothing waits for the daemon's `released`);
        unpublished blocks miss, recent ones load."""
        a = self.vllm_engine(self.a, "a", publish_budget_bytes=4 * ROW)
        b = self.vllm_engine(self.b, "b")
        self.assertEqual(a.tier.budget_blocks, 4)
        k1, k2, k3 = make_keys("j1", 4), make_keys("j2", 2), make_keys("j3", 2)
        self.publish(a, k1, "a-1")
        ctx_b = b.new_request("b-1", self.source_params(self.a, "bud-1"))
        b.run_until(lambda: all(b.tier._probes["bud-1"].answer(k) == "hit" for k in k1[:2]), what="probe")
        self.publish(a, k2, "a-2")  # evicts k1[0], k1[1] (pinned by B's round)
        self.publish(a, k3, "a-3")  # evicts k1[2], k1[3]
        self.assertEqual(a.tier.published_blocks, 4)
        self.assertEqual(self.a.status()["engines"][0]["published"], 4)
        self.assertEqual(a.jobs, {}, "every store job finished")
        self.assertEqual(a.tier.counters.total(Names.PUBLISH_EVICTIONS), 4)
        b.finish_request(ctx_b)
        ctx_b2 = b.new_request("b-2", self.source_params(self.a, "bud-2"))
        self.assertEqual(self.fetch(b, k1[:1], ctx_b2), 0, "an unpublished block misses")
        ctx_b3 = b.new_request("b-3", self.source_params(self.a, "bud-3"))
        self.assertEqual(self.fetch(b, k3, ctx_b3), 2)
        self.assert_blocks(b, k3)

    def test_own_daemon_lost_then_back(self):
        """A's own daemon dies: the tier notices at its next call, lookups
        miss meanwhile; once a daemon is back on the socket the tier opens a
        new session (hello and region again) and publishes again."""
        session_module = sys.modules["kvpeer.vllm.session"]
        self.addCleanup(setattr, session_module, "_RECONNECT_INTERVAL_S", session_module._RECONNECT_INTERVAL_S)
        session_module._RECONNECT_INTERVAL_S = 0.2
        a = self.vllm_engine(self.a, "a")
        keys = make_keys("lost", 4)
        self.publish(a, keys)
        self.a.kill()
        a.run_until(lambda: a.tier.broken is not None, what="A's tier noticed the loss")
        self.assertEqual(a.tier.published_blocks, 0)
        self.start_daemon("node-a")  # the same socket path
        more = make_keys("back", 2)
        ctx = a.new_request("a-2")
        a.run_until(lambda: a.tier.ready, what="reconnected")
        a.store(more, ctx, content)
        a.run_until(lambda: a.tier.published_blocks == 2 and not a.jobs, what="published again")
        self.assertEqual(self.daemons[-1].status()["engines"][0]["published"], 2)

    def test_unknown_kwargs_accepted(self):
        a = self.vllm_engine(self.a, "a", some_future_argument=1)
        self.assertIsNone(a.tier.broken)
        policy = OffloadPolicy.CHUNK_LEVEL if CHUNK else OffloadPolicy.BLOCK_LEVEL
        self.assertEqual(a.tier.on_new_request(a.new_request("z")).policy, policy)

    def test_backpressure_detector_forwarded_where_vllm_takes_it(self):
        """After #50045 vLLM's factory passes backpressure_detector and the
        base class keeps it (bp_detector); at 7cfb97e there is none to take:
        it is ignored with a warning."""
        region = VllmRegion(f"bp-{uuid.uuid4().hex[:8]}", 4, ROW)
        self.addCleanup(region.close)
        s = spec(region.path.split("vllm_offload_")[1][:-5])
        detector = object()
        with self.assertLogs("kvpeer.vllm", "WARNING") if not CHUNK else _no_logs():
            tier = KvpeerSecondaryTier(s, region.view, "KvpeerSecondaryTier", socket=self.a.socket_path,
                                       backpressure_detector=detector)
        self.addCleanup(tier.shutdown)
        if CHUNK:
            self.assertIs(tier.bp_detector, detector)
        else:
            self.assertFalse(hasattr(tier, "bp_detector"))

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


class _no_logs:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class ConfigTest(TierTestCase):
    def test_hash_seed_said_at_construction_when_determined(self):
        """sha256 (vLLM's default) without PYTHONHASHSEED: the seed is
        vLLM's fixed default, so hello goes out from the constructor: the
        daemon has the engine session before any call."""
        a = self.vllm_engine(self.a, "a")
        self.wait_until(lambda: self.a.status()["engines"], what="A's engine session before any request")
        self.assertEqual(self.a.status()["engines"][0]["num_blocks"], BLOCKS, "region registered too")
        a.step()
        self.assertTrue(a.tier.ready)

    def test_xxhash_random_seed_deferred_and_never_shared(self):
        """xxhash without PYTHONHASHSEED: vLLM's seed is random per process,
        known only after init_none_hash (after the tier is built), so hello
        waits for the first request; two such engines never share."""
        from vllm.utils.hashing import xxhash
        from vllm.v1.core import kv_cache_utils
        a = self.vllm_engine(self.a, "a", hash_algo="xxhash")
        b = self.vllm_engine(self.b, "b", hash_algo="xxhash")
        time.sleep(0.2)
        self.assertEqual(self.a.status()["engines"], [], "no hello before the seed is known")
        kv_cache_utils.init_none_hash(xxhash)  # A's process: a random seed
        a.new_request("first")  # the first request: the seed is read now, hello once its digest is derived
        a.run_until(lambda: a.tier.ready, what="A's hello after the first request")
        self.wait_until(lambda: self.a.status()["engines"], what="A's engine session")
        keys = make_keys("seed", 2)
        self.publish(a, keys)
        kv_cache_utils.init_none_hash(xxhash)  # B's process: another one
        ctx = b.new_request("s-1", self.source_params(self.a, "seed-1"))
        self.assertEqual(self.fetch(b, keys, ctx), 0, "different seeds: refused, so every key misses")
        b.finish_request(ctx)

    def test_same_pythonhashseed_shares(self):
        """PYTHONHASHSEED set on both nodes (xxhash): the same seed, said at
        construction; blocks are shared byte for byte."""
        from vllm.utils.hashing import xxhash
        from vllm.v1.core import kv_cache_utils
        os.environ["PYTHONHASHSEED"] = "4242"
        c = self.vllm_engine(self.a, "c", hash_algo="xxhash")
        d = self.vllm_engine(self.b, "d", hash_algo="xxhash")
        self.wait_until(lambda: self.a.status()["engines"], what="hello at construction")
        kv_cache_utils.init_none_hash(xxhash)
        keys = make_keys("seed-same", 2)
        self.publish(c, keys)
        ctx = d.new_request("s-2", self.source_params(self.a, "seed-2"))
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
        with self.assertRaisesRegex(ValueError, "hash_algo.*'md5'"):
            KvpeerSecondaryTier(s, region.view, "KvpeerSecondaryTier", socket=self.a.socket_path, hash_algo="md5")
        with self.assertRaisesRegex(ValueError, "answer_timeout_s"):
            KvpeerSecondaryTier(s, region.view, "KvpeerSecondaryTier", socket=self.a.socket_path,
                                answer_timeout_s=0)
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


def setUpModule():
    print(f"vLLM stand-in shape: {SHAPE}", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
