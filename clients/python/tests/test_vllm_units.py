"""kvpeer.vllm's pure parts, without daemons: reading kv_transfer_params as
vLLM's P2P tier reads them, the publish book (budget, eviction order, when a
store job is finished), the probe states, the hello identity, failure
reasons, and the pipelined connection against a scripted socket peer."""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from pathlib import Path
from types import SimpleNamespace

from kvpeer.pipelined import PipelinedClient
from kvpeer.vllm import answers, compat, identity
from kvpeer.vllm.metrics import reason_label
from kvpeer.vllm.params import Dest, Source, parse_dest, parse_source
from kvpeer.vllm.probes import HIT, MISS, Probe
from kvpeer.vllm.publisher import PublishBook

HERE = Path(__file__).resolve().parent


def keys(n, prefix=b"k"):
    return [prefix + bytes([i]) for i in range(n)]


class ParamsTest(unittest.TestCase):
    SRC = {"kv_request_id": "r1", "remote_host": "10.0.0.2", "remote_port": 5710}

    def test_roles(self):
        self.assertEqual(parse_source({"remote_kv_source": self.SRC}), Source("r1", "10.0.0.2:5710", True))
        self.assertEqual(parse_source({"remote_prefiller": self.SRC}), Source("r1", "10.0.0.2:5710", False))
        # remote_prefiller wins over remote_kv_source (vLLM's reading, not its docs' rule)
        both = {"remote_prefiller": self.SRC, "remote_kv_source": dict(self.SRC, kv_request_id="r2")}
        self.assertEqual(parse_source(both).kv_request_id, "r1")
        self.assertEqual(parse_dest({"remote_decoder": {"kv_request_id": "d"}}), Dest("d"))
        self.assertEqual(parse_dest({"remote_decoder": {}}), Dest(None))
        self.assertIsNone(parse_dest({"remote_kv_source": self.SRC}))

    def test_incomplete_sources_are_none(self):
        for params in (None, {}, {"remote_kv_source": {}}, {"remote_kv_source": dict(self.SRC, remote_port=0)},
                       {"remote_kv_source": dict(self.SRC, remote_host="")},
                       {"remote_kv_source": dict(self.SRC, kv_request_id="")}):
            self.assertIsNone(parse_source(params), params)

    def test_ipv6_host_is_bracketed(self):
        self.assertEqual(parse_source({"remote_kv_source": dict(self.SRC, remote_host="::1")}).peer, "[::1]:5710")


class PublishBookTest(unittest.TestCase):
    def test_budget_evicts_oldest_first(self):
        book = PublishBook(4)
        a = book.admit(keys(4, b"a"), [0, 1, 2, 3])
        self.assertEqual((len(a.publish), a.unpublish), (4, []))
        b = book.admit(keys(2, b"b"), [4, 5])
        self.assertEqual(b.evict, keys(2, b"a"))  # oldest first
        self.assertEqual(b.stale, [])
        self.assertEqual(book.published_count, 4)
        c = book.admit(keys(2, b"c"), [6, 7])
        self.assertEqual(c.evict, keys(4, b"a")[2:])

    def test_a_reused_slot_withdraws_its_old_key_first(self):
        book = PublishBook(8)
        book.admit(keys(2, b"old"), [0, 1])
        again = book.admit([b"new"], [1])  # vLLM stored another block into slot 1
        self.assertEqual(again.stale, [keys(2, b"old")[1]])
        self.assertEqual(again.publish, [(b"new", 1)])
        self.assertTrue(book.is_published(keys(2, b"old")[0]))
        self.assertFalse(book.is_published(keys(2, b"old")[1]))

    def test_same_block_same_slot_is_not_published_twice(self):
        book = PublishBook(8)
        book.admit(keys(2), [0, 1])
        again = book.admit(keys(2), [0, 1])
        self.assertEqual((again.publish, again.unpublish), ([], []))

    def test_a_key_stored_at_another_slot_moves(self):
        book = PublishBook(8)
        book.admit([b"k"], [0])
        moved = book.admit([b"k"], [5])
        self.assertEqual((moved.publish, moved.unpublish), ([(b"k", 5)], []))
        self.assertEqual(book.slot_of(b"k"), 5)
        self.assertEqual(book.withdraw_slots([0]), [])

    def test_supply_withdraws_only_other_keys(self):
        book = PublishBook(8)
        book.admit(keys(2), [0, 1])
        self.assertEqual(book.withdraw_others([keys(2)[0], b"other"], [0, 1]), [keys(2)[1]])
        self.assertTrue(book.is_published(keys(2)[0]), "the same block at its slot stays published")

    def test_load_destinations_are_withdrawn(self):
        book = PublishBook(8)
        book.admit(keys(3), [0, 1, 2])
        self.assertEqual(sorted(book.withdraw_slots([1, 2, 7])), sorted(keys(3)[1:]))
        self.assertEqual(book.published_count, 1)

    def test_touch_keeps_recent_blocks(self):
        book = PublishBook(2)
        book.admit(keys(2), [0, 1])
        book.touch([keys(2)[0]])
        self.assertEqual(book.admit([b"z"], [5]).evict, [keys(2)[1]])

    def test_zero_budget_refusal_and_reset(self):
        self.assertEqual(PublishBook(0).admit(keys(3), [0, 1, 2]).publish, [])
        book = PublishBook(4)
        book.admit(keys(2), [0, 1])
        book.refused([(keys(2)[0], 0), (keys(2)[1], 9)])
        self.assertEqual(book.published_keys(), [keys(2)[1]])
        self.assertEqual(book.unpublish_all(), [keys(2)[1]])
        self.assertEqual(book.published_count, 0)

    def test_bad_input(self):
        with self.assertRaisesRegex(ValueError, "budget_blocks must be an integer >= 0, got -1"):
            PublishBook(-1)
        with self.assertRaisesRegex(ValueError, "2 keys but 1 slot ids"):
            PublishBook(4).admit(keys(2), [0])


class ProbeTest(unittest.TestCase):
    def test_states(self):
        p = Probe("r", "h:1")
        self.assertFalse(p.pending)
        k = keys(3)
        self.assertIsNone(p.answer(k[0]))
        self.assertIsNone(p.answer(k[1]))
        self.assertEqual(p.take_queued(), k[:2])
        self.assertEqual(p.take_queued(), [])
        self.assertEqual(p.record(k[:2], ["retry", "retry"]), [])
        self.assertEqual(p.take_retry(), k[:2])
        self.assertEqual(p.record(k[:2], [HIT, MISS]), [HIT, MISS])
        self.assertEqual((p.answer(k[0]), p.answer(k[1])), (HIT, MISS))
        p.loaded()
        self.assertIsNone(p.answer(k[0]))  # a load closed the round: ask again
        self.assertEqual(p.answer(k[1]), MISS)
        self.assertTrue(p.pending)


class IdentityTest(unittest.TestCase):
    def spec(self, **over):
        parallel = SimpleNamespace(tp_size=over.get("tp", 1), pp_size=1, pcp_size=1, dcp_size=1,
                                   is_parallelism_agnostic=over.get("agnostic", False))
        return SimpleNamespace(config=SimpleNamespace(
            model=SimpleNamespace(name=over.get("model", "m"), dtype="float16"),
            cache=SimpleNamespace(tokens_per_hash=16, blocks_per_chunk=1), parallel=parallel,
            groups=(SimpleNamespace(tokens_per_block=16, layer_names=("l0",)),)))

    def test_fingerprint_separates_what_must_not_share(self):
        base = identity.config_fingerprint(self.spec())
        self.assertEqual(base, identity.config_fingerprint(self.spec()))
        self.assertNotEqual(base, identity.config_fingerprint(self.spec(model="other")))
        self.assertNotEqual(base, identity.config_fingerprint(self.spec(tp=2)))
        self.assertEqual(identity.config_fingerprint(self.spec(tp=1, agnostic=True)),
                         identity.config_fingerprint(self.spec(tp=2, agnostic=True)))
        with self.assertRaisesRegex(ValueError, "no config"):
            identity.config_fingerprint(SimpleNamespace())

    def test_seed_digest_is_a_slow_salted_kdf(self):
        """issue 25 item 4: scrypt with a fixed salt; the same seed gives the
        same digest (in any process: a fresh one is asked too), different
        seeds differ, one derivation costs >= 50 ms (measured once), and a
        process derives each seed once (cached)."""
        identity.hash_seed_digest.cache_clear()
        started = time.perf_counter()
        d = identity.hash_seed_digest("12345")
        cost = time.perf_counter() - started
        self.assertGreaterEqual(cost, 0.050, f"one derivation took {cost * 1000:.1f} ms")
        started = time.perf_counter()
        self.assertEqual(d, identity.hash_seed_digest("12345"))
        self.assertLess(time.perf_counter() - started, 0.005, "derived once per process")
        self.assertNotEqual(d, identity.hash_seed_digest("12346"))
        self.assertNotIn("12345", d)
        other = subprocess.run([sys.executable, "-c",
                                "from kvpeer.vllm import identity; print(identity.hash_seed_digest('12345'))"],
                               env=dict(os.environ, PYTHONPATH=str(HERE.parent)), capture_output=True, text=True,
                               check=True)
        self.assertEqual(other.stdout.strip(), d, "another process (node) derives the same value")
        with self.assertRaisesRegex(TypeError, "hash seed must be a string"):
            identity.hash_seed_digest(12345)

    def test_seed_at_construction_follows_vllms_rule(self):
        saved = os.environ.pop("PYTHONHASHSEED", None)
        self.addCleanup(lambda: os.environ.__setitem__("PYTHONHASHSEED", saved) if saved is not None
                        else os.environ.pop("PYTHONHASHSEED", None))
        self.assertEqual(identity.seed_at_construction(), identity.DEFAULT_NONE_HASH_SEED)
        self.assertEqual(identity.seed_at_construction("sha256_cbor"), identity.DEFAULT_NONE_HASH_SEED)
        self.assertIsNone(identity.seed_at_construction("xxhash"), "random per process: not known yet")
        os.environ["PYTHONHASHSEED"] = "7"
        self.assertEqual(identity.seed_at_construction("xxhash"), "7")
        with self.assertRaisesRegex(ValueError, "'hash_algo' must be one of .* got 'md5'"):
            os.environ.pop("PYTHONHASHSEED")
            identity.seed_at_construction("md5")


class CompatTest(unittest.TestCase):
    """Feature detection of vLLM's interface shape, on classes shaped like
    each vLLM version (and broken ones)."""

    @staticmethod
    def classes(slots="block_ids", policy="BLOCK_LEVEL", backpressure=False, request_level=True):
        job = dataclasses.make_dataclass("TransferJob", ["job_id", "keys", slots, "is_promotion", "req_context"])
        members = {policy: policy.lower()}
        if request_level:
            members["REQUEST_LEVEL"] = "request_level"
        Policy = enum.Enum("OffloadPolicy", members)
        if backpressure:
            class Base:
                def __init__(self, offloading_spec, primary_kv_view, tier_type, backpressure_detector=None):
                    pass
        else:
            class Base:
                def __init__(self, offloading_spec, primary_kv_view, tier_type):
                    pass
        return job, Policy, Base

    def test_both_shapes_and_mixtures(self):
        old = compat.detect(*self.classes())
        self.assertEqual((old.slots_field, old.incremental_policy.name, old.backpressure),
                         ("block_ids", "BLOCK_LEVEL", False))
        new = compat.detect(*self.classes("chunk_ids", "CHUNK_LEVEL", True))
        self.assertEqual((new.slots_field, new.incremental_policy.name, new.backpressure),
                         ("chunk_ids", "CHUNK_LEVEL", True))
        mixed = compat.detect(*self.classes("chunk_ids", "CHUNK_LEVEL", False))  # #52615 without #50045
        self.assertEqual((mixed.slots_field, mixed.backpressure), ("chunk_ids", False))

    def test_anything_else_names_what_is_missing(self):
        with self.assertRaisesRegex(compat.IncompatibleVllm, "neither 'block_ids' .* nor 'chunk_ids'"):
            compat.detect(*self.classes(slots="slot_ids"))
        with self.assertRaisesRegex(compat.IncompatibleVllm, "neither 'BLOCK_LEVEL' .* nor 'CHUNK_LEVEL'"):
            compat.detect(*self.classes(policy="TOKEN_LEVEL"))
        with self.assertRaisesRegex(compat.IncompatibleVllm, "no member 'REQUEST_LEVEL'"):
            compat.detect(*self.classes(request_level=False))
        job, policy, _ = self.classes()

        class NoTierType:
            def __init__(self, offloading_spec, primary_kv_view):
                pass
        with self.assertRaisesRegex(compat.IncompatibleVllm, "no parameter 'tier_type'"):
            compat.detect(job, policy, NoTierType)


class AnswersTest(unittest.TestCase):
    """Every field the tier reads from kvpeerd is type-checked; the error
    names the op, the field and what came."""

    def test_poll(self):
        ok = answers.poll({"results": [{"job_id": 3, "kv_request_id": "r", "success": False, "reason": "x"}],
                           "failed_requests": ["r"], "released": [4]})
        self.assertEqual((ok.results[0].job_id, ok.results[0].success, ok.failed_requests, ok.released),
                         (3, False, ["r"], [4]))
        self.assertEqual(answers.poll({}).results, [])
        for bad, message in (({"released": ["x"]}, "'released' must be a block id"),
                             ({"released": [True]}, "'released' must be a block id"),
                             ({"results": ["x"]}, "'results' must be an object"),
                             ({"results": {}}, "'results' must be a list"),
                             ({"failed_requests": 7}, "'failed_requests' must be a list, got 7"),
                             ({"failed_requests": [7]}, "'failed_requests' must be a string"),
                             ({"results": [{"job_id": True, "success": True}]}, "'job_id' must be an integer"),
                             ({"results": [{"job_id": 1, "success": "yes"}]}, "'success' must be true or false"),
                             ({"results": [{"job_id": 1, "success": True, "reason": 5}]}, "'reason' must be")):
            with self.subTest(bad=bad), self.assertRaisesRegex(answers.BadAnswer, message):
                answers.poll(bad)

    def test_lookup_hello_unpublish(self):
        self.assertEqual(answers.lookup_results({"results": ["hit", "retry"]}, [b"a", b"b"]), ["hit", "retry"])
        with self.assertRaisesRegex(answers.BadAnswer, "1 results for 2 keys"):
            answers.lookup_results({"results": ["hit"]}, [b"a", b"b"])
        with self.assertRaisesRegex(answers.BadAnswer, "'hit', 'miss' or 'retry', got 'maybe'"):
            answers.lookup_results({"results": ["maybe"]}, [b"a"])
        self.assertEqual(answers.hello_node_id({"node_id": "n:1"}), "n:1")
        with self.assertRaisesRegex(answers.BadAnswer, "'node_id' must be a non-empty string"):
            answers.hello_node_id({"node_id": 3})
        answers.unpublish({"released": [1], "pinned": []})
        with self.assertRaisesRegex(answers.BadAnswer, "'pinned' must be a block id"):
            answers.unpublish({"released": [], "pinned": ["1"]})


class ReasonTest(unittest.TestCase):
    def test_labels(self):
        self.assertEqual(reason_label("block 3: checksum mismatch"), "checksum")
        self.assertEqual(reason_label("load timed out after 30 s"), "timeout")
        self.assertEqual(reason_label("request finished"), "request_finished")
        self.assertEqual(reason_label("peer 1.2.3.4:5 session closed: reset"), "peer_lost")
        self.assertEqual(reason_label(None), "other")


class PipelinedTest(unittest.TestCase):
    """Against a scripted peer on a socketpair-like Unix socket: answers
    matched in order, nothing blocks, a closed peer fails what is pending."""

    def test_pipelining_and_close(self):
        path = os.path.join(tempfile.mkdtemp(prefix="kvpeer-pipe-"), "s")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path)
        server.listen(1)
        ready = threading.Event()

        def serve():
            conn, _ = server.accept()
            f = conn.makefile("rwb")
            ready.wait(5)
            for _ in range(3):
                req = json.loads(f.readline())
                f.write(json.dumps({"id": req["id"], "ok": True, "op": req["op"]}).encode() + b"\n")
            f.flush()
            req = json.loads(f.readline())  # the 4th is never answered
            conn.close()

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        client = PipelinedClient(path)
        got = []
        for op in ("a", "b", "c", "d"):
            client.submit(op, got.append)
        self.assertEqual(client.pump(), 0)  # nothing answered yet, and no waiting
        ready.set()
        client.wait(lambda: len(got) == 4, 5.0)
        self.assertEqual([(r.op, r.ok) for r in got[:3]], [("a", True), ("b", True), ("c", True)])
        self.assertEqual(got[3].error.code, "connection_closed")
        self.assertTrue(client.closed)
        t.join(5)
        server.close()

    def test_unreachable_socket(self):
        with self.assertRaisesRegex(ConnectionError, "cannot be reached"):
            PipelinedClient("/nonexistent/kvpeerd.sock", connect_timeout=1)


if __name__ == "__main__":
    unittest.main()
