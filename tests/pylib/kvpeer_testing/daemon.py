"""The one kvpeerd launcher: a process on loopback (port 0 unless told),
its control socket and log file in the test's directory, ready once `status`
answers."""

import os
import signal
import subprocess
import time

from kvpeer import Client, KvpeerError, ProtocolError

from kvpeer_testing import logs
from kvpeer_testing.paths import kvpeerd_path

# Generous bounds: the same tests run under ASan, several times slower.
READY_TIMEOUT_S = float(os.environ.get("KVPEER_READY_TIMEOUT_S", "30"))
STOP_TIMEOUT_S = float(os.environ.get("KVPEER_STOP_TIMEOUT_S", "30"))
LOG_LEVEL = os.environ.get("KVPEER_TEST_LOG_LEVEL", "debug")


class Daemon:
    """One kvpeerd process. `name` labels its socket and log file. With
    `control_flags` false the command line is only `args` (a daemon run from
    a config file that names the socket itself)."""

    def __init__(self, workdir, name, args=(), env=None, listen="127.0.0.1:0", log_level=None,
                 control_flags=True, base_env=None, wrapper=()):
        self.workdir = workdir
        self.name = name
        self.env = dict(env or {})  # added to the inherited environment (or to `base_env`)
        self.base_env = base_env
        self.wrapper = list(wrapper)  # argv run in front of kvpeerd's own (e.g. a shell that execs it)
        self.socket_path = os.path.join(workdir, f"{name}.sock")
        self.log_path = os.path.join(workdir, f"{name}.log")
        self.args = list(args)
        self.listen_arg = listen
        self.log_level = log_level or LOG_LEVEL
        self.control_flags = control_flags
        self.proc = None
        self.listen = None
        self.node_id = None
        self.expect_clean_exit = True  # False once the test killed it on purpose
        self.term_sent = False
        self.returncode = None

    def command(self):
        cmd = [str(kvpeerd_path())]
        if self.control_flags:
            cmd += ["--listen", self.listen_arg, "--socket", self.socket_path, "--log-level", self.log_level]
        return cmd + self.args

    def spawn(self):
        """Starts the process; does not wait for it to serve."""
        base = os.environ if self.base_env is None else self.base_env
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.wrapper + self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, env={**base, **self.env})
        return self

    def start(self, timeout=READY_TIMEOUT_S):
        """Starts the process and waits until `status` answers."""
        self.spawn()
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
        return logs.read_log(self.log_path)

    def log_tail(self, lines=logs.LOG_TAIL_LINES):
        return logs.tail(self.log_path, lines, f"{self.name} ({' '.join(self.command())})")
