"""Process harness for kvpeer's integration tests: real kvpeerd processes on
127.0.0.1 (port 0, so parallel test runs never collide), control sockets in
a per-test temp dir, and the Python client/simulator driving them.

What a test gets from `DaemonTestCase`:
  * `start_daemon()` starts a daemon and returns once its control socket
    answers `status`; its real listen address is read from that answer;
  * at cleanup every daemon still running gets SIGTERM and must exit 0
    within a bound (the spec's drain guarantee), engines are closed first;
  * when the test failed, or a daemon did not exit cleanly, the tail of
    every daemon's log is printed, so a ctest failure shows the daemon's
    side of the story.

Binaries come from $KVPEER_BIN_DIR (default <repo>/build): daemon/kvpeerd,
launched by kvpeer_testing.daemon.Daemon.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from kvpeer import KvpeerError
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, SimEngine

from kvpeer_testing import logs, wait
from kvpeer_testing.daemon import LOG_LEVEL, READY_TIMEOUT_S, STOP_TIMEOUT_S, Daemon
from kvpeer_testing.paths import REPO, bin_dir, kvpeerctl_path, kvpeerd_path

__all__ = ["LOG_LEVEL", "READY_TIMEOUT_S", "STOP_TIMEOUT_S", "REPO", "Daemon", "DaemonTestCase", "bin_dir",
           "dump", "kvpeerctl_path", "kvpeerd_path", "model_flags", "rss_bytes", "settled_status",
           "small_asan_quarantine", "snapshot", "ubsan_without_vptr"]


def model_flags(block_len, fingerprint=DEFAULT_FINGERPRINT, hash_seed=DEFAULT_HASH_SEED):
    """The flags that fix a node's model settings up front."""
    return ["--block-len", str(block_len), "--config-fingerprint", fingerprint, "--hash-seed", hash_seed]


def rss_bytes(pid):
    """The resident set size of process `pid`, from /proc."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def _add_sanitizer_option(variable, option):
    inherited = os.environ.get(variable, "")
    return {variable: (inherited + ":" if inherited else "") + option}


def small_asan_quarantine():
    """Environment for a daemon whose RSS a test bounds. AddressSanitizer
    holds freed memory back (256 MiB by default) to catch use after free,
    and RSS counts it as growth; a small quarantine keeps RSS about what the
    daemon itself holds. Inert in other builds."""
    return _add_sanitizer_option("ASAN_OPTIONS", "quarantine_size_mb=8")


def ubsan_without_vptr(workdir, name):
    """Environment for a daemon a test runs out of file descriptors.
    UBSan's vptr check reads an object's type through a pipe it opens on the
    spot; with every descriptor in use that pipe fails and the check reports
    a valid object as "invalid vptr". A suppression file cannot always hide
    it: matching a suppression symbolizes the PC, which also needs a free
    descriptor. So for this daemon only, a report does not halt. vptr is the
    one check the sanitizer build keeps recoverable (top-level
    CMakeLists.txt); every other check still stops the process. Inert in
    other builds."""
    path = os.path.join(workdir, f"{name}.ubsan-suppressions")
    with open(path, "w") as f:
        f.write("vptr_check:*\n")
    return _add_sanitizer_option("UBSAN_OPTIONS", f"suppressions={path}:halt_on_error=0")


def snapshot(status):
    """The parts of `status` a refused request must not change: engines and
    their counts, peers and their states. (Uptime, byte counters and
    timestamps move by themselves.)"""
    engines = sorted((e["client"], e["pid"], e["num_blocks"], e["published"], e["loads_in_flight"])
                     for e in status["engines"])
    peers = sorted((p["peer_id"], p["state"], p["loads_in_flight"], p["rounds_serving"])
                   for p in status["peers"])
    return {"engines": engines, "peers": peers, "config": status["config"], "node_id": status["node_id"]}


TRANSIENT_PEER_STATES = ("connecting", "handshaking")


def settled_status(daemon, timeout=15.0):
    """`status` once no peer is mid-dial, so two snapshots taken around a
    refused request differ only if the request changed something."""
    deadline = time.monotonic() + timeout
    while True:
        st = daemon.status()
        if all(p["state"] not in TRANSIENT_PEER_STATES for p in st["peers"]) or time.monotonic() > deadline:
            return st
        time.sleep(0.02)


class DaemonTestCase(unittest.TestCase):
    """Base class: per-test temp dir, daemons and engines cleaned up and
    checked at the end of each test."""

    def setUp(self):
        if not kvpeerd_path().exists():
            self.fail(f"kvpeerd not found at {kvpeerd_path()} (set KVPEER_BIN_DIR)")
        self.workdir = tempfile.mkdtemp(prefix="kvpeer-it-")
        self.daemons = []
        self.engines = []
        self.procs = []
        self.addCleanup(self._cleanup)

    # -- building blocks -------------------------------------------------------

    def start_daemon(self, name=None, block_len=None, extra=(), env=None):
        """Starts a daemon; with `block_len` its model settings are fixed by
        flags (the simulator's fingerprint and seed), else by the first hello.
        `env` adds variables to the daemon's environment."""
        name = name or f"node{len(self.daemons)}"
        args = (model_flags(block_len) if block_len else []) + list(extra)
        d = Daemon(self.workdir, name, args, env=env)
        self.daemons.append(d)
        return d.start()

    def engine(self, daemon, num_blocks, block_len, name=None, **kwargs):
        """A SimEngine on `daemon`, closed at cleanup."""
        e = SimEngine(daemon.socket_path, num_blocks, block_len, name=name or f"engine{len(self.engines)}",
                      **kwargs)
        self.engines.append(e)
        return e

    def client(self, daemon, timeout=30.0):
        c = daemon.client(timeout=timeout)
        self.engines.append(c)
        return c

    def spawn(self, argv, **kwargs):
        """A helper process (e.g. an engine to crash), killed at cleanup."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([str(REPO / "clients" / "python"), env.get("PYTHONPATH", "")])
        env.setdefault("PYTHONDONTWRITEBYTECODE", "1")
        p = subprocess.Popen(argv, env=env, **kwargs)
        self.procs.append(p)
        return p

    def wait_until(self, predicate, timeout=20.0, what="condition", interval=0.05):
        """Polls `predicate` until it returns a truthy value (returned)."""
        value = wait.poll(predicate, timeout, interval)
        if not value:
            self.fail(f"{what} not reached within {timeout:.0f} s")
        return value

    def assertApiError(self, code, fn, *args, **kwargs):
        """Asserts that fn raises KvpeerError with `code`; returns it."""
        with self.assertRaises(KvpeerError, msg=f"expected error {code}") as cm:
            fn(*args, **kwargs)
        self.assertEqual(cm.exception.code, code, f"message: {cm.exception.message}")
        self.assertIsInstance(cm.exception.message, str)
        self.assertTrue(cm.exception.message, "an error must say what was wrong")
        return cm.exception

    # -- cleanup ---------------------------------------------------------------

    def _cleanup(self):
        """Closes engines, stops daemons (SIGTERM, exit 0 required) and
        prints logs when anything went wrong."""
        for e in reversed(self.engines):
            try:
                e.close()
            except Exception:  # a crashed engine's socket may already be gone
                pass
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
        bad = []
        for d in self.daemons:
            if d.proc is None:
                continue
            died = d.proc.poll() is not None and not d.term_sent and d.expect_clean_exit
            if died:
                bad.append(f"{d.name}: died on its own with status {d.proc.returncode}")
            elif d.proc.poll() is None:
                d.stop()
            elif d.returncode is None and d.term_sent:
                d.wait_exit()
            problem = d.exit_problem()
            if problem:
                bad.append(f"{d.name}: {problem}")
        if bad or logs.test_failed(self):
            logs.print_tails(f"{self.id()} ({self.workdir})", self.daemons)
        if os.environ.get("KVPEER_KEEP_TEST_DIRS"):
            sys.stderr.write(f"kept {self.workdir}\n")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if bad:
            self.fail("daemon did not stop cleanly on SIGTERM: " + "; ".join(bad))


def dump(obj):
    """Compact JSON for assertion messages."""
    return json.dumps(obj, sort_keys=True)[:2000]
