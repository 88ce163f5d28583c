"""kvpeer.vllm.KvpeerSecondaryTier against a scripted fake daemon
(FakeDaemon), for the misbehaviours a real kvpeerd never shows: malformed
answers, a slow or never answered hello, a poll never answered; and the
bound on remembered failed request ids. vLLM is replaced by the stand-in in
vllm_stub/ (one ctest per shape, KVPEER_VLLM_SHAPE).
"""

from __future__ import annotations

import sys
import threading
import time
import unittest
import uuid
from pathlib import Path

from kvpeer.vllm import KvpeerSecondaryTier
from kvpeer.vllm.metrics import Names
from vllm._stub_shape import SHAPE
from vllm_driver import VllmRegion, make_job
from tier_case import ROW, spec, without_pythonhashseed


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
