"""kvpeer.vllm.KvpeerSecondaryTier against two real kvpeerd daemons, driven
the way vLLM's tiering manager drives a tier (vllm_driver.Engine), with
vLLM's modules replaced by the stand-in in vllm_stub/ (vLLM itself is not
installed here). Each engine's CPU tier is a real /dev/shm file created as
vLLM creates it, registered with its daemon by descriptor; every loaded
block is checked byte for byte.

The stand-in has two shapes (KVPEER_VLLM_SHAPE=7cfb97e or chunk,
vllm_stub/vllm/_stub_shape.py); ctest runs this module under each.

  SymmetricTest      remote_kv_source: B probes A and loads A's blocks while
                     A's tier takes no call at all (and reports no pending
                     work); misses stay misses
  DisaggregatedTest  remote_decoder on A (supply) / remote_prefiller on B;
                     a prefill node whose tier never had a request
  FailureTest        A's daemon killed mid-load; request finished mid-load;
                     a slot overwritten while published sealed (checksum);
                     a published slot reused by vLLM for another block
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
from pathlib import Path
from types import SimpleNamespace

from kvpeer_testing.harness import DaemonTestCase
from kvpeer.simulator import block_content, make_keys
from kvpeer.vllm import KvpeerSecondaryTier
from kvpeer.vllm.metrics import Names
from vllm._stub_shape import CHUNK, SHAPE
from vllm.v1.kv_offload.base import LookupResult, OffloadPolicy
from vllm_driver import Engine, VllmRegion, create_tier, make_job

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]

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


class SymmetricTest(TierTestCase):
    def test_prefix_shared_while_source_tier_takes_no_call(self):
        """A stores 8 blocks; its store jobs finish as soon as the daemon has
        sealed them (vLLM unpins at once) and A reports no pending work with
        the blocks published. From then on A's tier takes no call at all:
        B's scheduler probes A through the daemons, gets HIT for A's 8
        blocks and MISS for a 9th, and loads the 8 byte for byte."""
        a = self.vllm_engine(self.a, "a")
        b = self.vllm_engine(self.b, "b")
        keys = make_keys("sym", 9)
        self.publish(a, keys[:8])
        self.assertEqual(a.tier.published_blocks, 8)
        self.assertEqual([a.cpu.pins(k) for k in keys[:8]], [0] * 8, "vLLM holds no pin for published blocks")
        self.assertTrue(all(r.success and r.transfer_time is not None for r in a.results.values()), a.results)
        self.assertFalse(a.tier.has_pending_work(), "published blocks are no pending work")
        self.assertEqual(self.a.status()["engines"][0]["published"], 8)
        recorder = CallRecorder(a.tier)  # from here on, any call into A's tier is recorded

        ctx_b = b.new_request("b-1", self.source_params(self.a, "sym-1"))
        hits = self.fetch(b, keys, ctx_b)
        self.assertEqual(hits, 8)
        self.assert_blocks(b, keys[:8])
        self.assertIs(b.cpu.lookup(keys[8]), LookupResult.MISS)
        self.assertEqual(recorder.calls, [], "A's tier took no call while its node served B")
        self.assertEqual(b.parent.calls, [], "the tier serves nothing through the engine")
        self.assertEqual(b.tier.counters.total(Names.LOOKUPS, "hit"), 8)
        self.assertEqual(b.tier.counters.total(Names.LOADS, "success"), 1)
        self.assertEqual(b.tier.counters.total(Names.LOAD_BYTES), 8 * ROW)
        [load] = [r for job_id, r in b.results.items() if r.success]
        self.assertIsInstance(load.transfer_time, float)
        self.assertGreater(load.transfer_time, 0.0)
        b.finish_request(ctx_b)
        stats = b.tier.get_stats()
        self.assertEqual(stats.data["data"][Names.LOOKUPS][("hit",)], 8)
        self.idle(b, "B idle")

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
        # session it had already called ready (docs/vllm.md, "Known limits").
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
        every result carries transfer_time (seconds)."""
        b = self.vllm_engine(self.b, "b")
        ctx = b.new_request("e-1", self.source_params(self.a, "edge-1"))
        plain = b.new_request("e-2")
        b.tier.submit_load(make_job(100, [], [], True, ctx))
        b.tier.submit_load(make_job(101, [b"k" * 36], [0], True, plain))
        results = {r.job_id: r for r in b.tier.get_finished_jobs()}
        self.assertEqual({j: r.success for j, r in results.items()}, {100: True, 101: False})
        self.assertTrue(all(isinstance(r.transfer_time, float) for r in results.values()))


class DisaggregatedTest(TierTestCase):
    def test_prefill_stores_for_decoder_which_loads_without_probe(self):
        """A (prefiller, remote_decoder) stores the request's blocks as
        supply and finishes the request; B (decoder, remote_prefiller) gets
        HIT at once for every key and loads them all; A's store job then
        completes and its pins are released."""
        a = self.vllm_engine(self.a, "a", shutdown_timeout_s=0.5)  # pd-1's supply is never fetched
        b = self.vllm_engine(self.b, "b")
        keys = make_keys("pd", 6)
        ctx_a = a.new_request("p-1", {"remote_decoder": {"kv_request_id": "pd-1"}})
        a.store(keys[:2], ctx_a, content)  # a prefix the CPU tier already had ...
        ctx_a2 = a.new_request("p-2", {"remote_decoder": {"kv_request_id": "pd-2"}})
        self.assertEqual(a._request_level["p-2"], True, "the prefiller asks for REQUEST_LEVEL")
        a.store(keys, ctx_a2, content)  # ... goes to the decoder too (REQUEST_LEVEL)
        a.finish_request(ctx_a2)
        a.step()
        self.assertTrue(a.tier.has_pending_work(), "supply keeps its job open until the decoder's fetch")
        ctx_b = b.new_request("d-2", self.source_params(self.a, "pd-2", role="remote_prefiller"))
        self.assertIs(b.tier.lookup(keys[0], ctx_b), LookupResult.HIT, "no probe for a decoder")
        hits = self.fetch(b, keys, ctx_b)
        self.assertEqual(hits, 6)
        self.assert_blocks(b, keys)
        b.finish_request(ctx_b)
        a.finish_request(ctx_a)
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

    def test_cold_prefiller_configured_at_construction(self):
        """A's node has no model settings of its own and A's tier was built
        but never had a request (no call since its constructor): the tier's
        hello at construction configured the node, so B's probe of A misses
        cleanly and B's disaggregated load reaches A and parks there, then
        succeeds once A's request stores the supply; no session fails."""
        a = self.vllm_engine(self.a, "a")
        b = self.vllm_engine(self.b, "b")
        recorder = CallRecorder(a.tier)
        self.wait_until(lambda: self.a.status()["engines"], what="A's engine session before any request")
        # A probe of the cold node: every key misses, the request is not failed.
        keys = make_keys("cold", 4)
        ctx_p = b.new_request("b-probe", self.source_params(self.a, "cold-probe"))
        self.assertEqual(self.fetch(b, keys, ctx_p), 0)
        self.assertNotIn("cold-probe", b.tier._failed)
        b.finish_request(ctx_p)
        # The decoder's load goes out before A has seen its request.
        ctx_b = b.new_request("d-1", self.source_params(self.a, "cold-pd", role="remote_prefiller"))
        self.assertIsNone(b.lookup_prefix(keys, ctx_b))  # HIT_PENDING: the load is submitted at schedule_end
        b.schedule_end()
        for _ in range(20):  # the load parks on A: no result yet
            b.step()
            time.sleep(0.01)
        self.assertEqual(b.results, {}, "the load parks on the cold prefiller")
        self.assertEqual(recorder.calls, [], "A's tier still had no call")
        peers = {p["peer_id"]: p["state"] for p in self.b.status()["peers"]}
        self.assertEqual(peers.get(self.a.node_id), "ready", peers)
        # Now A's request arrives and stores its blocks for the decoder.
        ctx_a = a.new_request("p-1", {"remote_decoder": {"kv_request_id": "cold-pd"}})
        a.store(keys, ctx_a, content)
        a.finish_request(ctx_a)
        b.run_until(lambda: b.results, what="the parked load's result")
        self.assertTrue(all(r.success for r in b.results.values()), b.results)
        self.assert_blocks(b, keys)
        b.finish_request(ctx_b)
        a.run_until(lambda: not a.jobs, what="A's supply finished")
        self.assertTrue(all(r.success for r in a.results.values()), a.results)


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
        ends as a failure (no write lands later), nothing is left pending,
        and the failure reported after the finish is not remembered."""
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
        self.idle(b, "B idle")
        self.assertEqual(dict(b.tier._failed), {}, "an id failed after its request finished is not kept")

    def test_slot_overwritten_while_sealed_fails_with_checksum(self):
        """A block published sealed whose slot's bytes then change without
        the tier being told fails B's load with `checksum`: B never takes
        the wrong bytes as a hit."""
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

    def test_published_slot_reused_by_vllm_never_serves_wrong_bytes(self):
        """vLLM's order: A's CPU tier (8 slots) is full of published blocks
        that B's round has hit; A stores two new blocks, so its LRU evicts
        the two oldest and writes the new blocks into their slots, then
        submits the store to the tier. B's load of the old keys then fails
        (checksum, or the keys are gone: never the new bytes), and the
        stale entries are withdrawn: the old keys miss afterwards while the
        new blocks are served byte for byte."""
        a = self.vllm_engine(self.a, "a", blocks=8)  # the budget is the whole CPU tier by default
        b = self.vllm_engine(self.b, "b")
        old = make_keys("reuse-old", 8)
        ctx = self._probe_all(a, b, old, "reuse-1")
        new = make_keys("reuse-new", 2)
        ctx_a = a.new_request("a-2")
        slots = a.store(new, ctx_a, content)  # evicts old[0], old[1] (LRU) and reuses their slots
        self.assertEqual(a.cpu.evicted, old[:2])
        self.assertEqual(sorted(slots), sorted([0, 1]))
        a.finish_request(ctx_a)
        a.run_until(lambda: not a.jobs, what="A's store job finished")
        self.idle(a)
        self.assertEqual(a.tier.counters.total(Names.PUBLISH_WITHDRAWALS), 2)
        self._load_now(b, old, ctx)
        b.run_until(lambda: b.results, what="the load's result")
        [result] = b.results.values()
        self.assertFalse(result.success, "the old keys' load must not succeed with the new bytes")
        failures = {label: b.tier.counters.total(Names.LOAD_FAILURES, label)
                    for label in ("checksum", "refused", "other", "peer_lost", "timeout")}
        self.assertEqual(sum(failures.values()), 1, failures)
        self.assertEqual(failures["timeout"], 0, failures)
        for key in old:
            self.assertIs(b.cpu.lookup(key), LookupResult.MISS, "no block of the failed load is a hit")
        b.finish_request(ctx)
        ctx2 = b.new_request("b-2", self.source_params(self.a, "reuse-2"))
        self.assertEqual(self.fetch(b, old[:1], ctx2), 0, "the stale entry is withdrawn")
        ctx3 = b.new_request("b-3", self.source_params(self.a, "reuse-3"))
        self.assertEqual(self.fetch(b, new, ctx3), 2)
        self.assert_blocks(b, new)

    def test_load_into_a_published_slot_withdraws_it_first(self):
        """vLLM's order: A's CPU tier (8 slots) is full of published blocks,
        one of which B's round has hit; A's request then gets a hit from B,
        so A's LRU evicts that block and the promotion loads into its slot.
        The tier unpublishes the slot's key before the `load`; as B's round
        still pins it, kvpeerd refuses the load (`conflict`): the job fails
        cleanly, the request recomputes (later lookups miss), and B never
        gets the slot's new bytes under the old key."""
        a = self.vllm_engine(self.a, "a", blocks=8)
        b = self.vllm_engine(self.b, "b")
        old = make_keys("pin-old", 8)
        ctx_b = self._probe_all(a, b, old, "pin-1")  # B's round on A pins every old key
        theirs = make_keys("pin-b", 1)
        self.publish(b, theirs, "b-pub")
        with self.a.client() as c:  # one session between the nodes first (docs/vllm.md, "Known limits")
            c.connect(self.b.listen)
        ctx_a = a.new_request("a-2", self.source_params(self.b, "pin-2"))
        a.run_until(lambda: a.tier._probes["pin-2"].answer(theirs[0]) == "hit", what="A's probe of B answered")
        self.assertIs(a.lookup(theirs[0], ctx_a), LookupResult.HIT_PENDING)
        self.assertEqual(a.cpu.evicted, old[:1], "the promotion took the oldest block's slot")
        a.schedule_end()  # submit_load into that slot
        a.run_until(lambda: any(not r.success for r in a.results.values()), what="A's load result")
        self.assertEqual(a.tier.counters.total(Names.PUBLISH_WITHDRAWALS), 1)
        self.assertEqual(a.tier.counters.total(Names.LOAD_FAILURES, "refused"), 1,
                         "kvpeerd refused a load into a slot a peer's round pins")
        self.assertIs(a.lookup(theirs[0], ctx_a), LookupResult.MISS, "the request recomputes")
        before = set(b.results)
        self._load_now(b, old, ctx_b)
        b.run_until(lambda: set(b.results) - before, what="B's load result")
        [load] = [b.results[j] for j in set(b.results) - before]
        self.assertTrue(load.success, "nothing was written into the slot B's round pinned")
        self.assert_blocks(b, old)


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


class FakeDaemon:
    """A Unix-socket server that speaks the control API's framing from a
    script, for the daemon misbehaviours a real kvpeerd never shows:
    `script(connection_index, request)` returns the answer's fields (ok
    true is added), a (delay_s, fields) pair, or None to never answer that
    request (nor any after it on the connection)."""

    def __init__(self, path, script):
        import socket as socket_module
        self.path = path
        self.script = script
        self.requests = []  # (connection index, request)
        self.connections = 0
        self._server = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_STREAM)
        self._server.bind(path)
        self._server.listen(8)
        self._socks = []
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self._stopped:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            index = self.connections
            self.connections += 1
            self._socks.append(conn)
            threading.Thread(target=self._serve, args=(index, conn), daemon=True).start()

    def _serve(self, index, conn):
        import json
        buffer = b""
        silent = False
        while not self._stopped:
            try:
                chunk = conn.recv(1 << 16)  # descriptors that come along are discarded by the kernel
            except OSError:
                return
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                request = json.loads(line)
                self.requests.append((index, request))
                if silent:
                    continue
                answer = self.script(index, request)
                if answer is None:
                    silent = True
                    continue
                delay, fields = answer if isinstance(answer, tuple) else (0.0, answer)
                if delay:
                    time.sleep(delay)
                try:
                    conn.sendall(json.dumps({"id": request.get("id"), "ok": True, **fields}).encode() + b"\n")
                except OSError:
                    return

    def ops(self, connection=None):
        return [r["op"] for i, r in list(self.requests) if connection is None or i == connection]

    def close(self):
        self._stopped = True
        self._server.close()
        for sock in self._socks:
            try:
                sock.close()
            except OSError:
                pass


def fake_answer(index, request):
    """What kvpeerd answers to each op, minimally well-formed."""
    op = request["op"]
    if op == "hello":
        return {"node_id": "fake:1", "version": "0", "wire_version": "1.1"}
    if op == "register_region":
        return {"region_id": 1, "bytes": 0}
    if op == "publish":
        return {"published": len(request["keys"])}
    if op == "unpublish":
        return {"released": [], "pinned": []}
    if op == "lookup":
        return {"results": ["retry"] * len(request["keys"])}
    if op == "poll":
        return {"results": [], "failed_requests": [], "released": []}
    return {}


class FakeDaemonTest(unittest.TestCase):
    """The tier against a fake daemon (a real Unix socket server in this
    process) that answers malformed, slowly or never: vLLM's scheduler
    never gets an exception and never waits; every job owed a result gets
    exactly one; the tier closes and reconnects."""

    def setUp(self):
        without_pythonhashseed(self)
        self.dir = Path(__import__("tempfile").mkdtemp(prefix="kvpeer-fake-"))
        self.addCleanup(__import__("shutil").rmtree, self.dir, True)
        self.region = VllmRegion(f"fake-{uuid.uuid4().hex[:8]}", 8, ROW)
        self.addCleanup(self.region.close)
        session_module = sys.modules["kvpeer.vllm.session"]
        self.addCleanup(setattr, session_module, "_RECONNECT_INTERVAL_S", session_module._RECONNECT_INTERVAL_S)
        session_module._RECONNECT_INTERVAL_S = 0.1
        # The constructor derives the seed's digest (scrypt, ~0.1 s, once per process): done
        # here, so the constructor's time below is its own.
        from kvpeer.vllm import identity
        identity.hash_seed_digest(identity.DEFAULT_NONE_HASH_SEED)

    def fake(self, script):
        daemon = FakeDaemon(str(self.dir / f"fake{uuid.uuid4().hex[:6]}.sock"), script)
        self.addCleanup(daemon.close)
        return daemon

    def tier(self, daemon, **kwargs):
        s = spec(self.region.path.split("vllm_offload_")[1][:-5])
        started = time.monotonic()
        kwargs.setdefault("shutdown_timeout_s", 0.2)  # the fake never ends a load: do not wait 3 s at cleanup
        tier = KvpeerSecondaryTier(s, self.region.view, "KvpeerSecondaryTier", socket=daemon.path, **kwargs)
        self.constructed_in = time.monotonic() - started
        self.addCleanup(tier.shutdown)
        return tier

    def collect(self, tier, results, until, timeout=5.0, what="condition"):
        """Calls as vLLM's scheduler does, each timed: never an exception,
        never a wait."""
        deadline = time.monotonic() + timeout
        slowest = 0.0
        while not until():
            if time.monotonic() > deadline:
                self.fail(f"{what} not reached within {timeout} s")
            started = time.monotonic()
            for result in tier.get_finished_jobs():
                results.append(result)
            tier.on_schedule_end(None)
            tier.has_pending_work()
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.005)
        # Each call is microseconds; the bound only separates "never waits" from the fake's
        # 1 s or unbounded delays on a busy machine.
        self.assertLess(slowest, 0.25, "a scheduler call waited")
        return results

    def load(self, tier, job_id):
        ctx = __import__("vllm.v1.kv_offload.base", fromlist=["ReqContext"]).ReqContext(
            req_id=f"r{job_id}", kv_transfer_params={"remote_prefiller": {
                "kv_request_id": f"kv{job_id}", "remote_host": "10.0.0.9", "remote_port": 5710}})
        tier.on_new_request(ctx)
        tier.submit_load(make_job(job_id, [b"k" * 36], [3], True, ctx))
        return ctx

    def test_malformed_answers_count_as_a_lost_daemon(self):
        for bad in ({"released": ["x"]}, {"results": ["x"]}, {"failed_requests": 7},
                    {"results": [{"job_id": "1", "success": True}]}, {"results": [{"job_id": 1, "success": 1}]}):
            with self.subTest(bad=bad):
                def script(index, request, bad=bad):
                    if request["op"] == "poll" and index == 0:
                        return bad
                    return fake_answer(index, request)
                daemon = self.fake(script)
                tier = self.tier(daemon)
                self.load(tier, 7)
                results = self.collect(tier, [], lambda: daemon.connections >= 2 and tier.ready,
                                       what="reconnected after the malformed answer")
                self.assertEqual([(r.job_id, r.success) for r in results], [(7, False)], "one failed result")
                self.assertEqual(daemon.ops(1)[:2], ["hello", "register_region"])
                self.assertEqual(tier.counters.total(Names.LOAD_FAILURES, "peer_lost"), 1)
                tier.shutdown()

    def test_slow_hello_never_waits(self):
        """hello answered after 1 s: the constructor and every call return
        at once meanwhile (the engine is busy, not blocked); the answer is
        taken in by a later call."""
        def script(index, request):
            answer = fake_answer(index, request)
            return (1.0, answer) if request["op"] == "hello" else answer
        daemon = self.fake(script)
        tier = self.tier(daemon)
        self.assertLess(self.constructed_in, 0.5, "the constructor waited for hello's answer")
        self.assertFalse(tier.ready)
        self.assertTrue(tier.has_pending_work(), "hello's answer is owed")
        self.collect(tier, [], lambda: tier.ready, what="hello answered")
        self.assertFalse(tier.has_pending_work())

    def test_hello_never_answered_is_retried(self):
        """A daemon that never answers hello: after answer_timeout_s the tier
        closes, fails what was owed once, and says hello again on a new
        connection."""
        def script(index, request):
            return None if index == 0 else fake_answer(index, request)
        daemon = self.fake(script)
        tier = self.tier(daemon, answer_timeout_s=0.3)
        self.load(tier, 5)
        results = self.collect(tier, [], lambda: tier.ready, what="a second hello answered")
        self.assertEqual([(r.job_id, r.success) for r in results], [(5, False)])
        self.assertEqual(daemon.ops(0)[:3], ["hello", "register_region", "load"])
        self.assertEqual(daemon.ops(1)[:2], ["hello", "register_region"])
        self.assertGreaterEqual(daemon.connections, 2)

    def test_poll_never_answered_is_a_lost_daemon(self):
        """hello answered, then a step's poll never is: after
        answer_timeout_s the load owed fails once and the tier reconnects."""
        def script(index, request):
            return None if index == 0 and request["op"] == "poll" else fake_answer(index, request)
        daemon = self.fake(script)
        tier = self.tier(daemon, answer_timeout_s=0.3)
        self.load(tier, 9)
        results = self.collect(tier, [], lambda: daemon.connections >= 2 and tier.ready, what="reconnected")
        self.assertEqual([(r.job_id, r.success) for r in results], [(9, False)])
        self.assertEqual(tier.counters.total(Names.LOAD_FAILURES, "peer_lost"), 1)

    def test_failed_ids_are_bounded_and_pruned(self):
        """failed_requests naming ids of requests vLLM already finished (or
        never had) are not remembered; live ones are, at most _MAX_FAILED."""
        session_module = sys.modules["kvpeer.vllm.session"]
        self.addCleanup(setattr, session_module, "_MAX_FAILED", session_module._MAX_FAILED)
        session_module._MAX_FAILED = 4
        names = [f"kv{i}" for i in range(10)]

        def script(index, request):
            if request["op"] == "poll":
                return {"results": [], "failed_requests": names + ["gone"], "released": []}
            return fake_answer(index, request)
        daemon = self.fake(script)
        tier = self.tier(daemon)
        contexts = [self.load(tier, i) for i in range(10)]
        results = self.collect(tier, [], lambda: len(tier._failed) == 4, what="failures recorded")
        self.assertEqual(list(tier._failed), names[6:], "the newest 4 live ids")
        for ctx in contexts:
            tier.on_request_finished(ctx)
        self.assertEqual(dict(tier._failed), {})
        self.collect(tier, results, lambda: daemon.ops().count("poll") > 5, what="more polls")
        self.assertEqual(dict(tier._failed), {}, "ids failed after their request finished are not kept")


def setUpModule():
    print(f"vLLM stand-in shape: {SHAPE}", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
