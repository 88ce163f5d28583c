"""The real kvpeerd under a fake systemd: a Unix datagram socket named by
NOTIFY_SOCKET, as systemd passes it to a Type=notify service.

Checks what the units rely on: READY=1 (with a STATUS line naming the node)
once the daemon serves, WATCHDOG=1 at half of WATCHDOG_USEC while it runs,
STOPPING=1 on SIGTERM and exit status 0; WATCHDOG_PID decides whether the
watchdog applies to the process (sd_watchdog_enabled(3)).

Binaries come from $KVPEER_BIN_DIR (default <repo>/build): daemon/kvpeerd.
"""

import os
import shutil
import signal
import socket
import tempfile
import time
import unittest

from kvpeer_testing import logs
from kvpeer_testing.daemon import READY_TIMEOUT_S as TIMEOUT_S
from kvpeer_testing.daemon import Daemon

WATCHDOG_USEC = 200000  # so WATCHDOG=1 every 100 ms


def parse(datagram):
    """'A=1\\nB=x' -> {'A': '1', 'B': 'x'}"""
    fields = {}
    for line in datagram.decode().split("\n"):
        key, _, value = line.partition("=")
        fields[key] = value
    return fields


class NotifyTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvpeer-notify-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.notify_path = os.path.join(self.dir, "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.addCleanup(self.sock.close)
        self.sock.bind(self.notify_path)
        self.log_path = os.path.join(self.dir, "kvpeerd.log")
        self.proc = None
        self.daemon = None
        self.addCleanup(self._cleanup)

    def _cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self.daemon is not None and logs.test_failed(self):
            logs.print_tails(self.id(), [self.daemon])

    def assert_silent(self, seconds):
        """No notification for `seconds`."""
        self.sock.settimeout(seconds)
        try:
            data = self.sock.recv(4096)
        except socket.timeout:
            return
        self.fail(f"unexpected notification {parse(data)}")

    def start(self, env_extra, shell_prefix=None):
        """Starts kvpeerd with NOTIFY_SOCKET and `env_extra`. With
        `shell_prefix`, a shell sets those variables and then execs the
        daemon, so that "$$" is the daemon's own pid."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "JOURNAL_STREAM")}
        env["NOTIFY_SOCKET"] = self.notify_path
        env.update(env_extra)
        wrapper = [] if shell_prefix is None else ["/bin/sh", "-c", shell_prefix + ' exec "$@"', "sh"]
        self.daemon = Daemon(self.dir, "kvpeerd", base_env=env, wrapper=wrapper)
        self.control_path = self.daemon.socket_path
        self.proc = self.daemon.spawn().proc

    def receive(self, timeout=TIMEOUT_S):
        """The next notification as a dict; fails after `timeout`."""
        self.sock.settimeout(timeout)
        try:
            return parse(self.sock.recv(4096))
        except socket.timeout:
            self.fail(f"no notification within {timeout} s (daemon exit status {self.proc.poll()})")

    def receive_until(self, key, timeout=TIMEOUT_S):
        """Notifications until one has `key`; returns (that one, all seen)."""
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            message = self.receive(max(0.01, deadline - time.monotonic()))
            seen.append(message)
            if key in message:
                return message, seen

    def stop_and_expect_stopping(self):
        self.proc.send_signal(signal.SIGTERM)
        stopping, _ = self.receive_until("STOPPING")
        self.assertEqual(stopping["STOPPING"], "1")
        self.assertEqual(self.proc.wait(timeout=TIMEOUT_S), 0)

    def test_ready_watchdog_stopping(self):
        self.start({"WATCHDOG_USEC": str(WATCHDOG_USEC)})
        ready = self.receive()
        self.assertEqual(ready.get("READY"), "1", ready)
        # STATUS names the node (its real port: the daemon listens on port 0).
        self.assertRegex(ready.get("STATUS", ""), r"^node 127\.0\.0\.1:[1-9][0-9]*, 0 peers ready, 0 engines$")
        # The control socket is up by the time READY=1 is sent.
        self.assertTrue(os.path.exists(self.control_path))

        # Keep-alives at half the interval, each refreshing the status.
        start = time.monotonic()
        pings = 0
        while pings < 5:
            message, _ = self.receive_until("WATCHDOG")
            self.assertEqual(message["WATCHDOG"], "1")
            self.assertEqual(message.get("STATUS"), ready["STATUS"])
            pings += 1
        elapsed = time.monotonic() - start
        # Five pings 100 ms apart: no faster than the period allows (the
        # first may come at once), and not so slow that systemd's 200 ms
        # watchdog would fire (loose bound: ASan, a busy CI machine).
        self.assertGreater(elapsed, 0.3)
        self.assertLess(elapsed, 5.0)

        self.stop_and_expect_stopping()

    def test_watchdog_pid_of_the_daemon_enables_the_watchdog(self):
        self.start({"WATCHDOG_USEC": str(WATCHDOG_USEC)}, shell_prefix="WATCHDOG_PID=$$; export WATCHDOG_PID;")
        self.assertEqual(self.receive().get("READY"), "1")
        message, _ = self.receive_until("WATCHDOG")
        self.assertEqual(message["WATCHDOG"], "1")
        self.stop_and_expect_stopping()

    def test_watchdog_pid_of_another_process_disables_the_watchdog(self):
        # WATCHDOG_PID names this test process: the watchdog is not the daemon's.
        self.start({"WATCHDOG_USEC": str(WATCHDOG_USEC), "WATCHDOG_PID": str(os.getpid())})
        self.assertEqual(self.receive().get("READY"), "1")
        self.assert_silent(0.6)
        self.stop_and_expect_stopping()

    def test_without_watchdog_only_ready_and_stopping(self):
        self.start({})
        self.assertEqual(self.receive().get("READY"), "1")
        self.assert_silent(0.6)
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.receive(), {"STOPPING": "1", "STATUS": "draining"})
        self.assertEqual(self.proc.wait(timeout=TIMEOUT_S), 0)


if __name__ == "__main__":
    unittest.main()
