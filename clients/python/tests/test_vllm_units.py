"""kvpeer.vllm's pure parts, without daemons: reading kv_transfer_params as
vLLM's P2P tier reads them, the publish book (budget, eviction order, when a
store job is finished), the probe states, the hello identity, failure
reasons, and the pipelined connection against a scripted socket peer."""

from __future__ import annotations

import json
import os
import socket
import sys
import tempfile
import threading
import unittest
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from kvpeer.pipelined import PipelinedClient  # noqa: E402
from kvpeer.vllm import identity  # noqa: E402
from kvpeer.vllm.metrics import reason_label  # noqa: E402
from kvpeer.vllm.params import Dest, Source, parse_dest, parse_source  # noqa: E402
from kvpeer.vllm.probes import HIT, MISS, Probe  # noqa: E402
from kvpeer.vllm.publisher import PublishBook  # noqa: E402


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
    def test_budget_evicts_oldest_and_job_finishes_when_all_released(self):
        book = PublishBook(4)
        a = book.admit(1, keys(4, b"a"), [0, 1, 2, 3])
        self.assertEqual((len(a.publish), a.evict, a.finished_now), (4, [], False))
        b = book.admit(2, keys(2, b"b"), [4, 5])
        self.assertEqual(b.evict, keys(2, b"a"))  # oldest first
        self.assertIsNone(book.release(0))
        self.assertIsNone(book.release(1))  # job 1 still holds a2, a3
        c = book.admit(3, keys(2, b"c"), [6, 7])
        self.assertEqual(c.evict, keys(4, b"a")[2:])
        self.assertIsNone(book.release(2))
        self.assertEqual(book.release(3), 1)
        self.assertFalse(book.take_failed(1))

    def test_already_published_keys_hold_nothing(self):
        book = PublishBook(8)
        book.admit(1, keys(2), [0, 1])
        again = book.admit(2, keys(2), [0, 1])
        self.assertTrue(again.finished_now)
        self.assertEqual(again.publish, [])

    def test_touch_keeps_recent_blocks(self):
        book = PublishBook(2)
        book.admit(1, keys(2), [0, 1])
        book.touch([keys(2)[0]])
        self.assertEqual(book.admit(2, [b"z"], [5]).evict, [keys(2)[1]])

    def test_zero_budget_and_publish_failure(self):
        self.assertTrue(PublishBook(0).admit(1, keys(3), [0, 1, 2]).finished_now)
        book = PublishBook(4)
        book.admit(7, keys(2), [0, 1])
        self.assertEqual(book.publish_failed(7, keys(2)), 7)
        self.assertTrue(book.take_failed(7))
        self.assertEqual(book.published_count, 0)

    def test_bad_input(self):
        with self.assertRaises(ValueError):
            PublishBook(-1)
        with self.assertRaisesRegex(ValueError, "2 keys but 1 block ids"):
            PublishBook(4).admit(1, keys(2), [0])


class ProbeTest(unittest.TestCase):
    def test_states(self):
        p = Probe("r", "h:1")
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

    def test_seed_digest_hides_the_seed(self):
        d = identity.hash_seed_digest("secret-seed")
        self.assertEqual(d, identity.hash_seed_digest("secret-seed"))
        self.assertNotEqual(d, identity.hash_seed_digest("other"))
        self.assertNotIn("secret", d)


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
