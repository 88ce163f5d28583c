"""Two real service hosts: each a Debian 12 root (make_root.sh, cached under
/var/cache/kvpeer-test) booted with systemd-nspawn inside a cluster host's
network namespace, the package built from the build directory (`cpack -G
DEB`) installed with `apt-get install ./kvpeer_*.deb`, and `kvpeerd@test`
enabled with its config. Checks what docs/deployment.md and the unit claim:

  * systemd starts the daemon (Type=notify: active, STATUS text, watchdog
    armed), as the user kvpeer, /run/kvpeer 0755 and the socket 0660
    kvpeer-users;
  * the group split (deployment.md, "Groups"): an engine running as an
    ordinary user in kvpeer-users and kvpeer-publishers reaches the socket
    and publishes, its region passed as a descriptor; loads both ways are
    byte-verified; that user cannot read the daemon's config or PSK (group
    kvpeer) and its `kvpeerctl disconnect` is refused naming operator-uid,
    while its `kvpeerctl status` shows who may publish and operate; a user
    in kvpeer-users only loads but cannot publish; a region file only its
    owner can open, and one in /tmp (PrivateTmp), are refused by path;
  * `systemctl reload` (ExecReload=: SIGHUP to the main process) re-reads
    the config, and the daemon keeps running (same MainPID);
  * the watchdog restarts a daemon whose loop is stopped (SIGSTOP);
  * `systemctl stop` drains: an engine's load in flight gets its one result
    and the daemon exits 0.
"""

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import cluster as C
from test_cluster import ClusterTestCase

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CACHE = os.environ.get("KVPEER_CONTAINER_CACHE", "/var/cache/kvpeer-test")
BLOCK = 1 << 20
MiB = 1 << 20


def container_skip_reason():
    reason = C.skip_reason()
    if reason:
        return reason
    for tool in ("systemd-nspawn", "debootstrap", "nsenter", "cpack"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed (scripts/setup.sh installs systemd-container and debootstrap)"
    return None


class Container:
    """A booted systemd container in host `host`'s network namespace."""

    def __init__(self, host, root, binds, workdir):
        self.host = host
        self.name = host.ns[-12:].replace("-", "")
        self.log_path = os.path.join(workdir, f"{host.name}-container.log")
        argv = ["systemd-nspawn", "--register=no", "--keep-unit", "-q", "-D", root, "--volatile=overlay",
                "-M", self.name, f"--network-namespace-path=/run/netns/{host.ns}"]
        argv += [f"--bind-ro={src}:{dst}" for src, dst in binds]
        argv += ["-b"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            self._boot()
        except BaseException:
            self.stop()
            raise

    def _boot(self):
        self.leader = None
        deadline = time.monotonic() + 90
        while self.leader is None and time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"systemd-nspawn exited {self.proc.returncode}: {self.log()}")
            self.leader = self._child_systemd()
            time.sleep(0.1)
        if self.leader is None:
            raise RuntimeError("no systemd in the container")
        # Until its systemd answers on its bus (right after the exec, systemctl cannot connect yet).
        state, err = "", ""
        while time.monotonic() < deadline:
            p = self.sh("timeout 60 systemctl is-system-running --wait", check=False)
            state, err = p.stdout.strip(), p.stderr.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(0.3)
        else:
            raise RuntimeError(f"container did not boot: {state!r} {err!r}\n{self.log()}")

    def _child_systemd(self):
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                with open(f"/proc/{pid}/comm") as f:
                    comm = f.read().strip()
            except OSError:
                continue
            if int(fields[1]) == self.proc.pid and comm == "systemd":
                return int(pid)
        return None

    def enter(self):
        return ["nsenter", "-t", str(self.leader), "-a"]

    def sh(self, script, check=True):
        p = subprocess.run(self.enter() + ["sh", "-c", script], capture_output=True, text=True)
        if check and p.returncode != 0:
            raise RuntimeError(f"in {self.host.name}: {script!r} exited {p.returncode}: {p.stdout}{p.stderr}")
        return p

    def show(self, unit, *props):
        out = self.sh(f"systemctl show {unit} " + " ".join(f"-p {p}" for p in props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def status_json(self):
        return json.loads(self.sh("kvpeerctl --socket /run/kvpeer/test.sock status --json").stdout)

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()[-4000:]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()  # nspawn powers the container off
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class ServiceHostsTest(ClusterTestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="kvpeer-svc-")
        reason = container_skip_reason()
        if reason:
            cls.skip = reason
            return
        cls.skip = None
        cls.psk = secrets.token_hex(32)  # the same key on both hosts
        p = subprocess.run([os.path.join(HERE, "make_root.sh"), CACHE], capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"make_root.sh failed: {p.stderr[-3000:]}")
        cls.root = p.stdout.strip().splitlines()[-1]
        t = time.monotonic()
        deb_dir = os.path.join(cls.tmp, "deb")
        p = subprocess.run(["cpack", "-G", "DEB", "--config", str(C.harness.bin_dir() / "CPackConfig.cmake"),
                            "-B", deb_dir], capture_output=True, text=True)
        debs = [f for f in os.listdir(deb_dir) if f.endswith(".deb")] if os.path.isdir(deb_dir) else []
        if p.returncode != 0 or len(debs) != 1:
            raise RuntimeError(f"cpack failed: {p.stdout[-3000:]}{p.stderr[-2000:]}")
        cls.deb_dir = deb_dir
        cls.deb = debs[0]
        print(f"package {cls.deb} built in {time.monotonic() - t:.1f} s", flush=True)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def setUp(self):
        if self.skip:
            if C.required():
                self.fail(f"the systemd-container scenario is required here but cannot run: {self.skip}")
            self.skipTest(self.skip)

    def boot(self, host):
        c = Container(host, self.root, [(self.deb_dir, "/mnt/deb"), (REPO, "/mnt/src")], self.cl.workdir)
        self.cl.closers.append(c.stop)
        c.sh(f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q /mnt/deb/{self.deb}")
        c.sh("getent group kvpeer && getent passwd kvpeer && getent group kvpeer-users && "
             "getent group kvpeer-publishers")
        conf = "\n".join([f'listen = "{host.node_id}"', f'node-id = "{host.node_id}"', f"block-len = {BLOCK}",
                          'config-fingerprint = "kvpeer-sim-model"', 'hash-seed = "kvpeer-sim-seed"',
                          'publisher-gid = ["kvpeer-publishers"]', 'operator-uid = ["root"]',
                          'psk-file = "/etc/kvpeer/psk"',
                          'log-level = "info"', ""])
        c.sh("install -d -m 0750 -g kvpeer /etc/kvpeer")
        subprocess.run(c.enter() + ["sh", "-c", "install -m 0600 -o kvpeer -g kvpeer /dev/null /etc/kvpeer/psk "
                                    "&& cat > /etc/kvpeer/psk"], input=self.psk + "\n", text=True, check=True)
        subprocess.run(c.enter() + ["sh", "-c", "cat > /etc/kvpeer/test.toml && chgrp kvpeer /etc/kvpeer/test.toml "
                                    "&& chmod 0640 /etc/kvpeer/test.toml"], input=conf, text=True, check=True)
        c.sh("kvpeerd --config /etc/kvpeer/test.toml --check-config")
        r = c.sh("systemctl enable --now kvpeerd@test", check=False)
        if r.returncode != 0:
            journal = c.sh("journalctl -u kvpeerd@test --no-pager -o cat", check=False).stdout
            raise RuntimeError(f"kvpeerd@test did not start: {r.stderr}\n{journal[-3000:]}")
        c.sh("useradd -m -G kvpeer-users,kvpeer-publishers engine")
        c.sh("useradd -m -G kvpeer-users loader")
        return c

    @staticmethod
    def as_user(c, user, script):
        """`script` run in container `c` as `user` with that user's groups."""
        return subprocess.run(c.enter() + ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups",
                                           "sh", "-c", script], capture_output=True, text=True)

    def agent(self, c, name, region, num_blocks, extra=(), user="engine"):
        prefix = c.enter() + ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups",
                              "env", "PYTHONDONTWRITEBYTECODE=1", "PYTHONPATH=/mnt/src/clients/python"]
        a = C.Agent(prefix, "/run/kvpeer/test.sock", BLOCK, num_blocks, name, region=region, extra=extra,
                    python="python3", agent_path="/mnt/src/tests/cluster/agent.py")
        self.cl.agents.append(a)
        return a

    def wait_active(self, c, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            props = c.show("kvpeerd@test", "ActiveState", "SubState", "MainPID", "StatusText")
            if props["ActiveState"] == "active" and props["SubState"] == "running":
                return props
            time.sleep(0.2)
        self.fail(f"kvpeerd@test not active: {props}")

    def test_two_service_hosts(self):
        cl = self.make(2, block_len=BLOCK, start=False)
        h0, h1 = cl.hosts
        t = time.monotonic()
        c0, c1 = self.boot(h0), self.boot(h1)
        C.record_figure("container_two_hosts_boot_install_s", round(time.monotonic() - t, 1), "s")

        # What systemd shows.
        for c, h in ((c0, h0), (c1, h1)):
            props = self.wait_active(c)
            self.assertIn(f"node {h.node_id}", props["StatusText"])
            more = c.show("kvpeerd@test", "WatchdogUSec", "User", "Type", "NRestarts")
            self.assertEqual((more["Type"], more["User"], more["WatchdogUSec"]), ("notify", "kvpeer", "30s"), more)
            st = c.sh("stat -c '%a %U %G' /run/kvpeer /run/kvpeer/test.sock").stdout.split("\n")
            self.assertEqual(st[0], "755 kvpeer kvpeer")
            self.assertEqual(st[1], "660 kvpeer kvpeer-users")
            self.assertEqual(c.sh(f"ps -o user= -p {props['MainPID']}").stdout.strip(), "kvpeer")

        # Engines as an ordinary user in kvpeer-users and kvpeer-publishers, regions by descriptor.
        e0 = self.agent(c0, "e0-fd", "memfd", 64)
        self.assertNotEqual(e0.hello["uid"], 0)
        e1 = self.agent(c1, "e1-fd", "memfd", 64)
        e0.call(op="publish", prefix="p0", count=32, slot0=32)
        e1.call(op="publish", prefix="p1", count=32, slot0=32)
        rep = e1.call(op="fetch", peer=h0.node_id, prefix="p0", count=32, slot0=0)
        self.assertEqual((rep["hits"], rep["jobs_failed"], rep["bad_blocks"]), (32, 0, 0), rep)
        rep = e0.call(op="fetch", peer=h1.node_id, prefix="p1", count=32, slot0=0)
        self.assertEqual((rep["hits"], rep["jobs_failed"], rep["bad_blocks"]), (32, 0, 0), rep)

        # The group split: the engine user reads nothing of the daemon's, may not operate, may read
        # status; a user in kvpeer-users only may load but not publish.
        for path in ("/etc/kvpeer/test.toml", "/etc/kvpeer/psk"):
            r = self.as_user(c0, "engine", f"cat {path}")
            self.assertNotEqual(r.returncode, 0, f"the engine user read {path}")
            self.assertIn("Permission denied", r.stderr)
        r = self.as_user(c0, "engine", f"kvpeerctl --socket /run/kvpeer/test.sock disconnect {h1.node_id}")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("operator-uid and operator-gid", r.stderr)
        r = self.as_user(c0, "engine", "kvpeerctl --socket /run/kvpeer/test.sock status")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("publish  uids 0 (root)", r.stdout)
        self.assertIn("(kvpeer-publishers)", r.stdout)
        self.assertIn(h1.node_id, c0.sh("kvpeerctl --socket /run/kvpeer/test.sock peers").stdout)
        loader = self.agent(c0, "loader", "memfd", 16, user="loader")
        with self.assertRaises(RuntimeError) as cm:
            loader.call(op="publish", prefix="loader", count=4, slot0=0)
        self.assertIn("publisher-uid and publisher-gid", str(cm.exception))
        rep = loader.call(op="fetch", peer=h1.node_id, prefix="p1", count=8, slot0=0)
        self.assertEqual((rep["hits"], rep["jobs_failed"], rep["bad_blocks"]), (8, 0, 0), rep)
        loader.close()

        # A region only its owner can open (mkstemp's 0600), and one in /tmp (the service's /tmp is
        # private), are refused by path.
        with self.assertRaises(RuntimeError) as cm:
            self.agent(c0, "e0-private", "shm", 4)
        sys.stderr.write(f"0600 region: {cm.exception}\n")
        with self.assertRaises(RuntimeError) as cm:
            self.agent(c0, "e0-tmp", "shm", 4, extra=["--shm-dir", "/tmp", "--shm-group", "kvpeer-users"])
        sys.stderr.write(f"/tmp region: {cm.exception}\n")

        # Reload: ExecReload= sends SIGHUP to the main process; the file is read again.
        c0.sh("sed -i 's/^log-level = \"info\"/log-level = \"debug\"/' /etc/kvpeer/test.toml")
        r = c0.sh("systemctl reload kvpeerd@test", check=False)
        sys.stderr.write(f"systemctl reload: exit {r.returncode} {r.stderr.strip()}\n")
        self.assertEqual(r.returncode, 0, r.stderr)

        def reloaded(timeout):
            deadline = time.monotonic() + timeout
            while c0.status_json()["config"]["log-level"] != "debug":
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.1)
            return True
        self.assertTrue(reloaded(10), "SIGHUP did not apply log-level debug")
        self.assertIn("reload: log-level info -> debug",
                      c0.sh("journalctl -u kvpeerd@test --no-pager -o cat").stdout)
        self.assertEqual(c0.show("kvpeerd@test", "MainPID")["MainPID"],
                         self.wait_active(c0)["MainPID"])

        # The watchdog: a stopped loop sends no WATCHDOG=1; systemd restarts the daemon.
        old = self.wait_active(c1)["MainPID"]
        e1.close()
        t_stop = time.monotonic()
        c1.sh(f"kill -STOP {old}")
        deadline = time.monotonic() + 100
        while True:
            props = c1.show("kvpeerd@test", "ActiveState", "SubState", "MainPID", "NRestarts", "Result")
            if props["MainPID"] not in (old, "0") and props["ActiveState"] == "active" and \
                    props["SubState"] == "running":
                break
            self.assertLess(time.monotonic(), deadline, f"not restarted: {props}")
            time.sleep(0.5)
        restart_s = time.monotonic() - t_stop
        C.record_figure("container_watchdog_restart_after_sigstop_s", round(restart_s, 1), "s")
        self.assertGreaterEqual(int(props["NRestarts"]), 1)
        journal = c1.sh("journalctl -u kvpeerd@test --no-pager -o cat").stdout
        self.assertIn("Watchdog timeout", journal)
        wanted = ("atchdog", "Killing", "signal", "Scheduled restart")
        lines = [line for line in journal.splitlines() if any(w in line for w in wanted)]
        sys.stderr.write("watchdog: " + " | ".join(lines)[-1500:] + "\n")

        # `systemctl stop` drains: a load in flight gets its result, the daemon exits 0.
        e1 = self.agent(c1, "e1-fd-again", "memfd", 64)
        e0.call(op="publish", prefix="big", count=32, slot0=0)
        h0.shape(40)  # 32 MiB at 40 Mbit/s: about 7 s
        start = e1.call(op="load_start", peer=h0.node_id, prefix="big", count=32, slot0=0)
        time.sleep(1.0)
        e1.send(op="wait", jobs=[start["job"]], timeout=30)
        t = time.monotonic()
        r = c1.sh("systemctl stop kvpeerd@test", check=False)
        stop_s = time.monotonic() - t
        done = e1.recv()["jobs"][0]
        C.record_figure("container_systemctl_stop_s", round(stop_s, 2), "s")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIsNotNone(done["result"], "the load in flight got no result before the daemon exited")
        sys.stderr.write(f"load result at stop: {done['result']}\n")
        props = c1.show("kvpeerd@test", "ActiveState", "Result", "ExecMainStatus", "ExecMainCode")
        self.assertEqual((props["ActiveState"], props["Result"], props["ExecMainStatus"]), ("inactive", "success", "0"),
                         props)
        h0.unshape()
        e1.close()
        # The other host's daemon: quiet, nothing pinned, stopped by systemd as well.
        r = e0.call(op="unpublish", prefix="big", count=32, wait=15.0)
        self.assertEqual(r["still_pinned"], [], r)
        e0.close()
        c0.sh("systemctl stop kvpeerd@test")
        props = c0.show("kvpeerd@test", "Result", "ExecMainStatus")
        self.assertEqual((props["Result"], props["ExecMainStatus"]), ("success", "0"), props)


if __name__ == "__main__":
    unittest.main()
