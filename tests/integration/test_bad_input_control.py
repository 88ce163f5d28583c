"""Bad control input, each kind tried against a real daemon: a control client
sending garbage or dribbling, strict JSON in echoed ids, a region file
smaller than declared, shrunk or flipped while hashed, block ids out of
range.

For every case the test checks that the daemon answers cleanly and disturbs
nothing else (bad_input_case.BadInputBase). The raw peer is
kvpeer_testing.wire_peer (written from the wire spec, not from the daemon's
code).
"""

import json
import os
import random
import socket
import struct
import sys
import tempfile
import threading
import time
import unittest

from kvpeer_testing.harness import dump, settled_status, snapshot
from kvpeer import Client, KvpeerError, ProtocolError, Region
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, make_keys
from bad_input_case import BLOCK_LEN, BadInputBase


class ControlInputTest(BadInputBase):

    def raw(self):
        c = Client(self.v.socket_path, timeout=10)
        self.engines.append(c)
        return c

    def test_control_garbage(self):
        """Binary garbage, invalid UTF-8, NULs, deep nesting, huge numbers,
        empty lines, pipelined by the hundred: every line answered with
        bad_request, the connection stays usable, the node unchanged."""
        before = snapshot(settled_status(self.v))
        c = self.raw()
        rnd = random.Random(1234)
        lines = []
        for _ in range(200):
            n = rnd.randrange(1, 300)
            lines.append(bytes(rnd.choice([b for b in range(256) if b != 10]) for _ in range(n)))
        lines += [
            b"\xff\xfe\xfd",
            b'{"id": 1, "op": "sta\xfftus"}',
            b'{"id": 2, "op": "status\x00"}',
            b"\x00" * 100,
            b"[" * 100000 + b"]" * 100000,
            b'{"id": 3, "op": "status", "x": ' + b"{\"a\":" * 50000 + b"1" + b"}" * 50000 + b"}",
            b'{"id": 4, "op": "poll", "wait_ms": 1e400}',
            b'{"id": 5, "op": "hello", "client": "x", "block_len": 18446744073709551617, '
            b'"config_fingerprint": "kvpeer-sim-model", "hash_seed": "kvpeer-sim-seed"}',
            b'{"id": 6, "op": "hello", "op": "status"}',
            b"{}",
            b"   ",
            b"\r",
        ]
        payload = b"".join(line + b"\n" for line in lines)
        writer = threading.Thread(target=lambda: c._sock.sendall(payload), daemon=True)
        writer.start()
        answers = []
        for _ in range(len(lines)):
            # Raw lines, parsed strictly: a response must be RFC 8259 JSON
            # (no NaN/Infinity), whatever the request was.
            raw = self.read_raw_line(c)
            try:
                answers.append(json.loads(raw, parse_constant=self.no_constants))
            except ValueError as e:
                self.fail(f"the daemon answered with invalid JSON: {raw[:300]!r} ({e})")
        writer.join(10)
        for line, r in zip(lines, answers):
            if line == b'{"id": 6, "op": "hello", "op": "status"}':
                continue  # duplicate names: JSON leaves the choice to the parser; answered either way
            self.assertIs(r.get("ok"), False, f"{line[:80]!r} -> {dump(r)}")
            self.assertIn(r["error"]["code"], ("bad_request", "unknown_op"), f"{line[:80]!r} -> {dump(r)}")
            self.assertTrue(r["error"]["message"], dump(r))
        self.assertEqual(c.status()["node_id"], self.v.node_id)  # same connection still works
        self.assertEqual(snapshot(self.v.status()), before)
        self.assert_undisturbed(transfer=True)

    def test_echoed_id_is_strict_json(self):
        """`id` may be any JSON value and is echoed; the echo must still be
        JSON (RFC 8259 has no Infinity/NaN), or a strict client loses the
        connection's framing. 1e999999 is a valid JSON number text."""
        c = self.raw()
        for text in (b"1e999999", b"-1e999999", b"1.5e300", b"18446744073709551616", b'"x"', b"[1,{}]", b"null",
                     b"[1e999]", b'{"a": [2, {"b": -1e999}]}', b'"\xc3\xa9" '):
            with self.subTest(id=text):
                c.send_line(b'{"id": ' + text + b', "op": "status"}')
                raw = self.read_raw_line(c)
                try:
                    r = json.loads(raw, parse_constant=self.no_constants)
                except ValueError as e:
                    self.fail(f"id {text!r} echoed as invalid JSON: {raw[:120]!r} ({e})")
                self.assertIn("id", r)
        self.assertEqual(c.status()["node_id"], self.v.node_id)

    @staticmethod
    def no_constants(name):
        raise ValueError(f"{name} is not JSON")

    @staticmethod
    def read_raw_line(c):
        c._sock.settimeout(20)
        while b"\n" not in c._buf:
            chunk = c._sock.recv(1 << 20)
            if not chunk:
                raise ProtocolError("connection closed by the daemon")
            c._buf += chunk
        nl = c._buf.index(b"\n")
        raw = bytes(c._buf[:nl])
        del c._buf[:nl + 1]
        return raw

    def test_control_client_closing_mid_line(self):
        for n in range(20):
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(self.v.socket_path)
            s.sendall(b'{"id": 1, "op": "hel' + b"x" * n)
            if n % 2:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
        self.assert_undisturbed(transfer=True)

    def test_control_slowloris(self):
        """A control client dribbling a request does not hold up engines."""
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.addCleanup(s.close)
        s.connect(self.v.socket_path)
        line = b'{"id": 9, "op": "status"}\n'
        stop = threading.Event()

        def dribble():
            for b in line:
                if stop.is_set():
                    return
                s.sendall(bytes([b]))
                time.sleep(0.15)

        t = threading.Thread(target=dribble, daemon=True)
        t.start()
        for _ in range(3):
            started = time.monotonic()
            self.assert_undisturbed(transfer=True)
            self.assertLess(time.monotonic() - started, 3.0)
        t.join(10)
        s.settimeout(5)
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = s.recv(1 << 16)
            self.assertTrue(chunk, "the daemon closed the slow client")
            answer += chunk
        self.assertEqual(json.loads(answer)["id"], 9)

    def test_region_smaller_than_declared(self):
        """A region file (path or fd) smaller than offset + num_blocks *
        block_len, or a size that overflows, is bad_request; nothing changes."""
        before = snapshot(settled_status(self.v))
        c = self.raw()
        c.hello("small-region", BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED)
        with tempfile.NamedTemporaryFile(dir="/dev/shm", prefix="kvpeer-short-") as f:
            f.truncate(4 * BLOCK_LEN - 1)
            f.flush()
            for num, offset in ((4, None), (3, BLOCK_LEN), (2 ** 48, None), (2 ** 63, None), (1, 2 ** 64 - 1),
                                (2 ** 32 + 1, None)):
                with self.assertRaises(KvpeerError) as cm:
                    c.register_region(f.name, num, offset=offset)
                self.assertEqual(cm.exception.code, "bad_request", f"{num} {offset}: {cm.exception}")
            fd = os.memfd_create("kvpeer-short", os.MFD_CLOEXEC)
            try:
                os.ftruncate(fd, 4 * BLOCK_LEN - 1)
                with self.assertRaises(KvpeerError) as cm:
                    c.register_region_fd(fd, 4)
                self.assertEqual(cm.exception.code, "bad_request")
            finally:
                os.close(fd)
        self.assertEqual(snapshot(self.v.status())["engines"][:1], before["engines"][:1])
        # The refusals did not use up the session's region.
        with Region.memfd(4, BLOCK_LEN) as region:
            c.register_region_fd(region.fd, 4)
        self.assert_undisturbed(transfer=True)

    def test_region_shrunk_after_registration(self):
        """The engine truncates its region file after registering it (a
        buggy or hostile engine). Serving from it or loading into it must
        not crash the daemon; the load ends with one failure result; the
        peer connection, other engines and peers carry on."""
        shrinker = self.engine(self.v, 16, BLOCK_LEN, name="shrinker", region="shm")
        keys = make_keys("shrunk", 8)
        shrinker.fill_and_publish(keys, range(8))
        os.ftruncate(shrinker.region.fd, 0)
        # Producer side: the keys are still published (the index cannot
        # know), so the probe hits; the round then fails instead of the
        # connection when the daemon finds the source gone.
        self.assertEqual(self.consumer.probe(self.v.listen, "shrunk", keys), ["hit"] * 8)
        j = self.consumer.load(self.v.listen, "shrunk", keys, range(40, 48))
        res = self.consumer.wait_jobs([j], timeout=15)[j]
        self.assertFalse(res["success"], dump(res))
        self.assertIn("peer reported failure", res.get("reason", ""))
        self.consumer.client.finish("shrunk")
        # Consumer side: a truncated destination region.
        sink = self.engine(self.h, 16, BLOCK_LEN, name="sink", region="shm")
        os.ftruncate(sink.region.fd, 0)
        self.assertEqual(sink.probe(self.v.listen, "into-shrunk", self.keys[:4]), ["hit"] * 4)
        j = sink.load(self.v.listen, "into-shrunk", self.keys[:4], range(8, 12))
        res = sink.wait_jobs([j], timeout=15)[j]
        self.assertFalse(res["success"], dump(res))
        self.assertIn("no longer mapped", res.get("reason", ""))
        sink.client.finish("into-shrunk")
        self.assertTrue(self.h.running, "kvpeerd died receiving into a truncated region")
        self.assertTrue(self.v.running, "kvpeerd died serving from a truncated region\n" + self.v.log_tail(40))
        # Same sessions as before (assert_undisturbed checks), nothing pinned.
        self.assert_undisturbed(transfer=True)
        with self.v.client() as c:
            pins = [line for line in c.metrics().splitlines() if line.startswith("kvpeer_pins ")]
        self.assertEqual(pins, ["kvpeer_pins 0"])

    def test_region_flipped_while_hashed(self):
        """Checksums (on by default) make the daemons read engine memory in
        user space: the producer hashes a source block before sending it and
        on a sealed publish, the consumer hashes each block after it lands.
        Engines here flip their region files between 0 bytes and full size
        as fast as they can while that happens, on both sides. Every read of
        a vanished page must be caught (daemon/node/guarded_read.h): no daemon
        dies of SIGBUS, every load ends with exactly one result and a
        reason, and the two nodes transfer verified bytes afterwards. (The
        session itself may be replaced: a source page vanishing while the
        kernel sends it fails the write, which closes the connection;
        docs/architecture.md, "Failure handling in one place".)"""
        flipper = self.engine(self.v, 16, BLOCK_LEN, name="flip-source", region="shm")
        keys = make_keys("flip", 16)
        flipper.fill_and_publish(keys, range(16), seal=True)
        sink = self.engine(self.h, 16, BLOCK_LEN, name="flip-sink", region="shm")
        stop = threading.Event()

        def flip(region):
            while not stop.is_set():
                os.ftruncate(region.fd, 0)
                os.ftruncate(region.fd, 16 * BLOCK_LEN)

        threads = [threading.Thread(target=flip, args=(e.region,), daemon=True) for e in (flipper, sink)]
        for t in threads:
            t.start()
        outcomes = {"succeeded": 0, "failed": 0}
        reasons = set()
        try:
            deadline = time.monotonic() + 6.0
            n = 0
            while time.monotonic() < deadline and n < 400:
                n += 1
                for engine, peer_keys, kv in ((self.consumer, keys, f"from-flip-{n}"),
                                              (sink, self.keys, f"into-flip-{n}")):
                    if engine.probe(self.v.listen, kv, peer_keys[:4]) != ["hit"] * 4:
                        engine.client.finish(kv)
                        continue
                    job = engine.load(self.v.listen, kv, peer_keys[:4], range(4, 8))
                    res = engine.wait_jobs([job], timeout=15)[job]
                    outcomes["succeeded" if res["success"] else "failed"] += 1
                    if not res["success"]:
                        self.assertTrue(res.get("reason"), dump(res))
                        reasons.add(res["reason"].split(":")[0][:60])
                    engine.client.finish(kv)
                flipper.client.publish(keys, range(16), seal=True)  # sealing reads the flipping region too
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=5)
        sys.stderr.write(f"\nflipped regions: {n} rounds, loads {outcomes}, reasons {sorted(reasons)}\n")
        self.assertTrue(self.v.running, "kvpeerd died reading a flipping source region\n" + self.v.log_tail(40))
        self.assertTrue(self.h.running, "kvpeerd died hashing into a flipping destination region")
        self.assertGreater(sum(outcomes.values()), 0, "no load ran: nothing was tested")

        def transferred():
            try:
                self.real_transfer()  # every key, bytes verified
                return True
            except AssertionError:  # the first try may meet a session being replaced
                return False
        self.wait_until(transferred, 20, "a verified transfer after the flipping", interval=0.5)

    def test_block_ids_out_of_range(self):
        before = snapshot(settled_status(self.v))
        c = self.raw()
        c.hello("ranges", BLOCK_LEN, DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED)
        with Region.memfd(8, BLOCK_LEN) as region:
            c.register_region_fd(region.fd, 8)
            key = make_keys("range", 1)
            for bad in (8, 9, 2 ** 31, 2 ** 32, 2 ** 63, 2 ** 64 - 1):
                for op, args in (("publish", dict(keys=[key[0].hex()], block_ids=[bad])),
                                 ("load", dict(job_id=1, peer=self.h.listen, kv_request_id="r", keys=[key[0].hex()],
                                               block_ids=[bad])),
                                 ("store", dict(job_id=2, kv_request_id="r", keys=[key[0].hex()], block_ids=[bad]))):
                    with self.subTest(op=op, id=bad):
                        with self.assertRaises(KvpeerError) as cm:
                            c.request(op, **args)
                        self.assertEqual(cm.exception.code, "out_of_range", cm.exception.message)
            for bad in (-1, 2 ** 64, 1.5, "3", True, None, [1]):
                for op, args in (("publish", dict(keys=[key[0].hex()], block_ids=[bad])),
                                 ("store", dict(job_id=2, kv_request_id="r", keys=[key[0].hex()], block_ids=[bad]))):
                    with self.subTest(op=op, id=bad):
                        with self.assertRaises(KvpeerError) as cm:
                            c.request(op, **args)
                        self.assertIn(cm.exception.code, ("bad_request", "out_of_range"), cm.exception.message)
            self.assertEqual(c.publish(key, [7]), 1)  # the session still works
            c.unpublish(key)
        self.assertEqual(snapshot(self.v.status())["peers"], before["peers"])
        self.assert_undisturbed(transfer=True)


if __name__ == "__main__":
    unittest.main()
