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

The tier's lifecycle and configuration are in test_vllm_tier_lifecycle.py,
a scripted fake daemon's misbehaviours in test_vllm_tier_fake_daemon.py; the
shared set-up in tier_case.py.
"""

from __future__ import annotations

import sys
import time
import unittest

from kvpeer.simulator import make_keys
from kvpeer.vllm.metrics import Names
from vllm._stub_shape import SHAPE
from vllm.v1.kv_offload.base import LookupResult
from vllm_driver import make_job
from tier_case import ROW, CallRecorder, TierTestCase, content, host_port


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


def setUpModule():
    print(f"vLLM stand-in shape: {SHAPE}", file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
