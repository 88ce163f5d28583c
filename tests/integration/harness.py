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

Binaries come from $KVPEER_BIN_DIR (default <repo>/build): daemon/kvpeerd.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "clients" / "python"))

from kvpeer import Client, KvpeerError, ProtocolError  # noqa: E402
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, SimEngine  # noqa: E402

# Generous bounds: the same tests run under ASan, several times slower.
READY_TIMEOUT_S = float(os.environ.get("KVPEER_READY_TIMEOUT_S", "30"))
STOP_TIMEOUT_S = float(os.environ.get("KVPEER_STOP_TIMEOUT_S", "30"))
LOG_LEVEL = os.environ.get("KVPEER_TEST_LOG_LEVEL", "debug")
LOG_TAIL_LINES = 150


def bin_dir():
    return Path(os.environ.get("KVPEER_BIN_DIR", REPO / "build"))


def kvpeerd_path():
    return bin_dir() / "daemon" / "kvpeerd"


def kvpeerctl_path():
    return bin_dir() / "cli" / "kvpeerctl"


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


class Daemon:
    """One kvpeerd process. `name` labels its socket and log file."""

    def __init__(self, workdir, name, args=(), env=None):
        self.name = name
        self.env = dict(env or {})  # added to the inherited environment
        self.socket_path = os.path.join(workdir, f"{name}.sock")
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.args = list(args)
        self.proc = None
        self.listen = None
        self.node_id = None
        self.expect_clean_exit = True  # False once the test killed it on purpose
        self.term_sent = False
        self.returncode = None

    def command(self):
        cmd = [str(kvpeerd_path()), "--listen", "127.0.0.1:0", "--socket", self.socket_path,
               "--log-level", LOG_LEVEL]
        return cmd + self.args

    def start(self, timeout=READY_TIMEOUT_S):
        """Starts the process and waits until `status` answers."""
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env={**os.environ, **self.env})
        deadline = time.monotonic() + timeout
        last_error = None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.expect_clean_exit = False  # reported here, not again at cleanup
                raise RuntimeError(f"{self.name}: kvpeerd exited with {self.proc.returncode} before it was "
                                   f"ready\n{self.log_tail()}")
            try:
                st = self.status()
                self.listen = st["listen"]
                self.node_id = st["node_id"]
                return self
            except (OSError, KvpeerError, ProtocolError) as e:  # not listening yet
                last_error = e
                time.sleep(0.02)
        raise RuntimeError(f"{self.name}: control socket not ready within {timeout:.0f} s "
                           f"({last_error})\n{self.log_tail()}")

    @property
    def pid(self):
        return self.proc.pid

    @property
    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def client(self, timeout=30.0):
        return Client(self.socket_path, timeout=timeout)

    def status(self):
        with self.client() as c:
            return c.status()

    def pause(self):
        """SIGSTOP: the process keeps its sockets but answers nothing, like a
        wedged or overloaded peer."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self):
        os.kill(self.pid, signal.SIGCONT)

    def kill(self):
        """SIGKILL: the process dies without a word to its peers."""
        self.expect_clean_exit = False
        self.proc.kill()
        self.proc.wait()
        self.returncode = self.proc.returncode

    def send_term(self):
        """SIGTERM (resuming a stopped process first, or it would never act)."""
        self.term_sent = True
        if self.proc.poll() is None:
            self.resume()
            self.proc.send_signal(signal.SIGTERM)

    def wait_exit(self, timeout=STOP_TIMEOUT_S):
        """Waits for the process to end; returns its exit status, or None if
        it hung (it is then killed so nothing leaks)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self.returncode = None
            return None
        self.returncode = self.proc.returncode
        return self.returncode

    def stop(self, timeout=STOP_TIMEOUT_S):
        """SIGTERM and wait: the clean shutdown the spec promises."""
        self.send_term()
        return self.wait_exit(timeout)

    def exit_problem(self):
        """Why this daemon's ending is not acceptable, or None. Called at
        cleanup, after anything still running was stopped."""
        if not self.expect_clean_exit or self.proc is None:
            return None
        if not self.term_sent:
            return None
        if self.returncode is None:
            return "did not exit within the drain bound after SIGTERM"
        if self.returncode != 0:
            return f"exit status {self.returncode} after SIGTERM"
        return None

    def log_text(self):
        try:
            with open(self.log_path, "r", errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def log_tail(self, lines=LOG_TAIL_LINES):
        text = self.log_text().splitlines()
        head = f"---- {self.name} ({' '.join(self.command())}) log, last {min(lines, len(text))} lines ----"
        return "\n".join([head] + text[-lines:])


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
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                self.fail(f"{what} not reached within {timeout:.0f} s")
            time.sleep(interval)

    def assertApiError(self, code, fn, *args, **kwargs):
        """Asserts that fn raises KvpeerError with `code`; returns it."""
        with self.assertRaises(KvpeerError, msg=f"expected error {code}") as cm:
            fn(*args, **kwargs)
        self.assertEqual(cm.exception.code, code, f"message: {cm.exception.message}")
        self.assertIsInstance(cm.exception.message, str)
        self.assertTrue(cm.exception.message, "an error must say what was wrong")
        return cm.exception

    # -- cleanup ---------------------------------------------------------------

    def _test_failed(self):
        outcome = getattr(self, "_outcome", None)
        result = getattr(outcome, "result", None)
        if result is None:
            return True
        return any(t is self for t, _ in list(result.errors) + list(result.failures))

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
        if bad or self._test_failed():
            sys.stderr.write(f"\n==== daemon logs for {self.id()} ({self.workdir}) ====\n")
            for d in self.daemons:
                sys.stderr.write(d.log_tail() + "\n")
        if os.environ.get("KVPEER_KEEP_TEST_DIRS"):
            sys.stderr.write(f"kept {self.workdir}\n")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if bad:
            self.fail("daemon did not stop cleanly on SIGTERM: " + "; ".join(bad))


def dump(obj):
    """Compact JSON for assertion messages."""
    return json.dumps(obj, sort_keys=True)[:2000]
