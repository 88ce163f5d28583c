"""The real kvpeerd and its operations surface: SIGHUP reloads the config
file (live settings applied and logged, restart-only ones logged and
ignored, an invalid file changes nothing, a FIFO put at the PSK or config
path fails the reload at once without stalling the daemon), the file-mode
checks at start (a loose TLS key or a writable CA bundle: exit 2 naming the
file and mode), and --metrics-listen serves the same Prometheus text as the
`metrics` op over HTTP.

Binaries come from $KVPEER_BIN_DIR (default <repo>/build): daemon/kvpeerd.
"""

import http.client
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import unittest

from kvpeer import Client
from kvpeer_testing import logs
from kvpeer_testing.daemon import READY_TIMEOUT_S as TIMEOUT_S
from kvpeer_testing.daemon import Daemon
from kvpeer_testing.paths import kvpeerd_path
from kvpeer_testing.wait import wait_until


def wait_for(predicate, what, timeout=TIMEOUT_S):
    return wait_until(predicate, timeout, what, interval=0.02)


class ReloadTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="kvpeer-ops-")
        self.addCleanup(shutil.rmtree, self.dir, ignore_errors=True)
        self.socket_path = os.path.join(self.dir, "kvpeerd.sock")
        self.config_path = os.path.join(self.dir, "kvpeerd.toml")
        self.log_path = os.path.join(self.dir, "kvpeerd.log")
        self.psk_path = os.path.join(self.dir, "psk")
        self.daemon = Daemon(self.dir, "kvpeerd", ["--config", self.config_path], control_flags=False)
        self.proc = None
        self.addCleanup(self._cleanup)

    def _cleanup(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if logs.test_failed(self) and os.path.exists(self.log_path):
            logs.print_tails(self.id(), [self.daemon])

    def write_config(self, **settings):
        lines = [f'socket = "{self.socket_path}"', 'listen = "127.0.0.1:0"', 'metrics-listen = "127.0.0.1:0"']
        for key, value in settings.items():
            key = key.replace("_", "-")
            if isinstance(value, str):
                lines.append(f'{key} = "{value}"')
            elif isinstance(value, list):
                lines.append(f"{key} = [" + ", ".join(f'"{v}"' for v in value) + "]")
            else:
                lines.append(f"{key} = {value}")
        tmp = self.config_path + ".tmp"
        with open(tmp, "w") as f:
            f.write("\n".join(lines) + "\n")
        os.replace(tmp, self.config_path)  # as an editor saving the file would

    def write_psk(self, key):
        fd = os.open(self.psk_path + ".tmp", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(key)
        os.replace(self.psk_path + ".tmp", self.psk_path)

    def log(self):
        return self.daemon.log_text()

    def start(self):
        self.proc = self.daemon.start(TIMEOUT_S).proc
        match = re.search(r"metrics listening on http://127\.0\.0\.1:(\d+)/metrics", self.log())
        self.assertIsNotNone(match, self.log())
        self.metrics_port = int(match.group(1))

    def status(self):
        with Client(self.socket_path, timeout=10) as c:
            return c.status()

    def config(self):
        return self.status()["config"]

    def reload(self, expect_in_log):
        """SIGHUP, then wait until the log shows `expect_in_log`."""
        before = len(self.log())
        self.proc.send_signal(signal.SIGHUP)
        wait_for(lambda: expect_in_log in self.log()[before:], f"'{expect_in_log}' in the log")
        self.assertIsNone(self.proc.poll(), "kvpeerd died on SIGHUP")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.proc.wait(timeout=TIMEOUT_S), 0)

    def http_get(self, path, method="GET"):
        connection = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=10)
        try:
            connection.request(method, path)
            response = connection.getresponse()
            return response.status, dict(response.getheaders()), response.read().decode()
        finally:
            connection.close()

    # -------------------------------------------------------------------

    def test_sighup_applies_live_settings_and_logs_each_change(self):
        self.write_config(log_level="info")
        self.start()
        self.assertEqual(self.config()["log-level"], "info")
        self.assertEqual(self.config()["allow-cidr"], [])

        self.write_config(log_level="debug", allow_cidr=["127.0.0.0/8", "10.0.0.0/8"])
        self.reload("reload: allow-cidr")
        log = self.log()
        self.assertIn("reload: log-level info -> debug", log)
        self.assertIn('reload: allow-cidr [] -> ["127.0.0.0/8","10.0.0.0/8"]', log)
        config = self.config()
        self.assertEqual(config["log-level"], "debug")
        self.assertEqual(config["allow-cidr"], ["127.0.0.0/8", "10.0.0.0/8"])

        # Debug lines are written from now on (and were not before).
        self.assertNotIn(" debug control connection", log)
        self.status()
        wait_for(lambda: re.search(r" debug control connection from pid \d+ closed", self.log()),
                 "a debug line after the change")

        # Nothing changed: said so, and still nothing applied.
        self.reload("reload: no live setting changed")
        self.stop()

    def test_idle_peer_timeout_is_live(self):
        # It applies to peer connections made from then on (PeerManager::set_idle_timeout).
        self.write_config(idle_peer_timeout_s=300)
        self.start()
        self.write_config(idle_peer_timeout_s=5)
        self.reload("reload: idle-peer-timeout-s 300 -> 5")
        self.assertNotIn("needs a restart", self.log())
        self.assertEqual(self.config()["idle-peer-timeout-s"], 5)
        self.stop()

    def test_restart_only_settings_are_logged_and_ignored(self):
        self.write_config(log_level="info", load_timeout_s=30)
        self.start()
        self.write_config(log_level="warn", load_timeout_s=5)
        self.reload("reload: log-level info -> warn")
        self.assertIn("reload: load-timeout-s 30 -> 5 needs a restart; ignored", self.log())
        config = self.config()
        self.assertEqual(config["log-level"], "warn")
        self.assertEqual(config["load-timeout-s"], 30)
        self.stop()

    def test_an_invalid_file_changes_nothing(self):
        self.write_config(log_level="info")
        self.start()
        with open(self.config_path, "a") as f:
            f.write('log-level = "loud"\nno-such-key = 1\n')
        self.reload("reload: the settings are invalid; nothing changed")
        self.assertEqual(self.config()["log-level"], "info")
        # A missing PSK file is invalid too.
        self.write_config(log_level="debug", psk_file=os.path.join(self.dir, "missing"))
        self.reload("reload: the settings are invalid; nothing changed")
        self.assertEqual(self.config()["log-level"], "info")
        self.assertIsNone(self.config()["psk-file"])
        self.stop()

    def test_a_new_psk_is_picked_up_without_showing_it(self):
        secret = b"s" * 40
        self.write_psk(secret)
        self.write_config(psk_file=self.psk_path)
        self.start()
        self.write_psk(b"t" * 40)
        self.reload("reload: psk-file")
        self.assertIn(f"reload: psk-file {self.psk_path} -> {self.psk_path} (key changed)", self.log())
        self.assertNotIn("tttt", self.log())
        self.assertNotIn("ssss", self.log())
        self.assertNotIn("tttt", str(self.status()))
        self.stop()

    def assert_reload_refuses_fifo_promptly(self, fifo_path):
        """SIGHUP with a FIFO at `fifo_path` (no writer, ever): the reload
        fails naming it and `status` keeps answering at once. Opening the
        FIFO blocking used to freeze the event loop until a writer came."""
        before = len(self.log())
        self.proc.send_signal(signal.SIGHUP)
        time.sleep(0.2)  # the signal is handled on the event loop by now
        started = time.monotonic()
        self.status()
        elapsed = time.monotonic() - started
        self.assertLess(elapsed, 1.0, f"status took {elapsed:.1f} s after SIGHUP")
        expected = f"'{fifo_path}' is not a regular file"
        wait_for(lambda: expected in self.log()[before:], f"'{expected}' in the log", timeout=5)
        self.assertIn("reload: the settings are invalid; nothing changed", self.log()[before:])

    def test_a_fifo_at_the_psk_path_fails_the_reload_without_stalling(self):
        self.write_psk(b"s" * 40)
        self.write_config(log_level="info", psk_file=self.psk_path)
        self.start()
        os.remove(self.psk_path)
        os.mkfifo(self.psk_path, 0o600)
        self.write_config(log_level="debug", psk_file=self.psk_path)
        self.assert_reload_refuses_fifo_promptly(self.psk_path)
        self.assertIn(f"psk-file: '{self.psk_path}' is not a regular file", self.log())
        # The old settings stay, and a later reload with a good file works.
        self.assertEqual(self.config()["log-level"], "info")
        self.assertEqual(self.config()["psk-file"], self.psk_path)
        os.remove(self.psk_path)
        self.write_psk(b"t" * 40)
        self.reload("reload: log-level info -> debug")
        self.stop()

    def test_a_fifo_at_the_config_path_fails_the_reload_without_stalling(self):
        self.write_config(log_level="info")
        self.start()
        os.remove(self.config_path)
        os.mkfifo(self.config_path, 0o600)
        self.assert_reload_refuses_fifo_promptly(self.config_path)
        self.assertIn(f"config: '{self.config_path}' is not a regular file", self.log())
        self.assertEqual(self.config()["log-level"], "info")
        os.remove(self.config_path)
        self.write_config(log_level="debug")
        self.reload("reload: log-level info -> debug")
        self.stop()

    def start_expecting_exit_2(self):
        result = subprocess.run([str(kvpeerd_path()), "--config", self.config_path], stdin=subprocess.DEVNULL,
                                capture_output=True, timeout=TIMEOUT_S)
        self.assertEqual(result.returncode, 2, result.stderr.decode())
        return result.stderr.decode()

    def test_a_loose_tls_key_or_writable_ca_stops_the_start_naming_file_and_mode(self):
        # The contents are never looked at: the modes are checked first.
        paths = {}
        for name, mode in (("node.crt", 0o644), ("node.key", 0o600), ("ca.crt", 0o644)):
            paths[name] = os.path.join(self.dir, name)
            with open(paths[name], "w") as f:
                f.write("-----BEGIN NOTHING-----\n")
            os.chmod(paths[name], mode)
        self.write_config(tls_cert=paths["node.crt"], tls_key=paths["node.key"], tls_ca=paths["ca.crt"])
        os.chmod(paths["node.key"], 0o640)
        self.assertIn(f"kvpeerd: tls-key: '{paths['node.key']}' grants permissions to group or others (mode 0640); "
                      "allowed: owner-only, e.g. chmod 600", self.start_expecting_exit_2())
        os.chmod(paths["node.key"], 0o620)  # writable by the group: as bad (they could plant their key)
        self.assertIn("(mode 0620)", self.start_expecting_exit_2())
        os.chmod(paths["node.key"], 0o600)
        os.chmod(paths["ca.crt"], 0o666)
        self.assertIn(f"kvpeerd: tls-ca: '{paths['ca.crt']}' is writable by group or others (mode 0666); "
                      "allowed: writable by the owner only, e.g. chmod 644", self.start_expecting_exit_2())
        os.chmod(paths["ca.crt"], 0o644)
        os.chmod(paths["node.crt"], 0o664)
        self.assertIn(f"kvpeerd: tls-cert: '{paths['node.crt']}' is writable by group or others (mode 0664)",
                      self.start_expecting_exit_2())

    def test_metrics_listener_serves_the_metrics_text(self):
        self.write_config()
        self.start()
        status, headers, body = self.http_get("/metrics")
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "text/plain; version=0.0.4; charset=utf-8")
        self.assertEqual(headers["Connection"], "close")
        self.assertIn("\nkvpeer_up 1\n", body)
        self.assertTrue(body.endswith("\n"))
        with Client(self.socket_path, timeout=10) as c:
            op_text = c.metrics()

        def families(text):
            return [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]

        # The control op counts itself, so compare the families, not the values.
        self.assertEqual(families(body)[:5], families(op_text)[:5])
        self.assertLessEqual(set(families(body)), set(families(op_text)))
        self.assertIn("kvpeer_lookup_round_trip_seconds", families(body))
        self.assertEqual(self.http_get("/")[0], 404)
        self.assertEqual(self.http_get("/metrics", method="POST")[0], 405)
        promtool = shutil.which("promtool")
        if promtool:
            result = subprocess.run([promtool, "check", "metrics"], input=body.encode(), capture_output=True)
            self.assertIn(result.returncode, (0, 3), result.stdout.decode() + result.stderr.decode())
        self.stop()


if __name__ == "__main__":
    unittest.main()
