"""A cluster of namespaced hosts for kvpeer's tests: each host is its own
Linux network namespace with one address on a bridge that lives in a test
namespace of its own, runs its own kvpeerd (`--listen ADDR:PORT --node-id
ADDR:PORT`, its own control socket) and engines (tests/cluster/agent.py,
started with `ip netns exec`). Link faults are real: nft rules inside a
host's namespace (drop, reject with tcp reset), `ip link set down`, and htb
shaping on a host's interface.

Every namespace is named `kvc<PID>-...` after the test process that made
it. `Cluster.close()` (also run at exit and on SIGTERM) deletes them all;
`clean_stale()` at start deletes those of runs whose process is gone (a
crashed run or a SIGKILLed ctest). Deleting a namespace removes its veth
ends, bridge, qdiscs and nft tables with it.

`skip_reason()` says why namespaces cannot be made here (not root, no `ip`
or `nft`, unshare refused), or None.
"""

import atexit
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kvpeer_testing import harness
from kvpeer import Client, KvpeerError, ProtocolError

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

PREFIX = "kvc"
NET = "10.213"  # hosts 10.213.0.N/16; outsiders (the attacker) 10.213.1.N
PORT = 5710
FIGURES_ENV = "KVPEER_CLUSTER_FIGURES"


def run(argv, check=True, input=None):
    p = subprocess.run(argv, input=input, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({p.returncode}): {p.stderr.strip()}")
    return p


def required():
    """True where the cluster tests must run rather than skip: CI, or KVPEER_CLUSTER_REQUIRED=1."""
    return os.environ.get("CI", "").lower() == "true" or os.environ.get("KVPEER_CLUSTER_REQUIRED") == "1"


def skip_reason():
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft", "tc"):
        if shutil.which(tool) is None:
            return f"'{tool}' is not installed (scripts/setup.sh installs iproute2 and nftables)"
    name = f"{PREFIX}{os.getpid()}-probe"
    p = run(["ip", "netns", "add", name], check=False)
    if p.returncode != 0:
        return f"cannot make a network namespace: {p.stderr.strip()}"
    try:
        p = run(["ip", "netns", "exec", name, "nft", "list", "tables"], check=False)
        if p.returncode != 0:
            return f"nft does not work inside a namespace: {p.stderr.strip()}"
    finally:
        run(["ip", "netns", "del", name], check=False)
    return None


def _pid_alive(pid):
    """True while `pid` runs (a zombie, never reaped where PID 1 does not reap, is dead)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def clean_stale():
    """Deletes the namespaces of earlier runs whose process is gone; returns their names."""
    p = run(["ip", "netns", "list"], check=False)
    gone = []
    for line in p.stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        if not name.startswith(PREFIX):
            continue
        digits = name[len(PREFIX):].split("-")[0]
        if not digits.isdigit() or int(digits) == os.getpid() or _pid_alive(int(digits)):
            continue
        # Processes still inside (a daemon of a crashed run) die with it.
        pids = run(["ip", "netns", "pids", name], check=False).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except (ProcessLookupError, ValueError):
                pass
        run(["ip", "netns", "del", name], check=False)
        gone.append(name)
    # Work directories (sockets, logs) of those runs.
    tmp = Path(tempfile.gettempdir())
    for d in tmp.glob("kvpeer-cluster-*-*"):
        digits = d.name[len("kvpeer-cluster-"):].split("-")[0]
        if digits.isdigit() and int(digits) != os.getpid() and not _pid_alive(int(digits)):
            shutil.rmtree(d, ignore_errors=True)
            gone.append(str(d))
    return gone


def record_figure(name, value, unit=""):
    """Prints a figure and appends it to $KVPEER_CLUSTER_FIGURES (scripts/test.sh prints that file)."""
    line = {"figure": name, "value": value, "unit": unit}
    print(f"FIGURE {name} = {value} {unit}".rstrip(), flush=True)
    path = os.environ.get(FIGURES_ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\n")


class ClusterDaemon(harness.Daemon):
    """kvpeerd inside a host's namespace."""

    def __init__(self, host, workdir, args, env=None):
        super().__init__(workdir, host.name, args, env=env, listen=host.node_id,
                         log_level=os.environ.get("KVPEER_CLUSTER_LOG_LEVEL", "info"),
                         wrapper=["ip", "netns", "exec", host.ns])
        self.host = host

    def command(self):
        return super().command() + ["--node-id", self.host.node_id]

    def start(self, timeout=harness.READY_TIMEOUT_S):
        # A fresh log per start, so a restarted daemon's log is its own (the old one is kept beside it).
        if os.path.exists(self.log_path):
            os.replace(self.log_path, self.log_path + f".{int(time.time() * 1000)}")
        return super().start(timeout)


class Agent:
    """An engine process (agent.py) driven by JSON lines. `prefix` is what runs it where it belongs:
    `ip netns exec NS` for a namespaced host, nsenter into a container for a service host."""

    def __init__(self, prefix, socket_path, block_len, num_blocks, name, region="memfd", extra=(),
                 python=sys.executable, agent_path=HERE / "agent.py"):
        argv = list(prefix) + [python, str(agent_path), "--socket", socket_path, "--block-len", str(block_len),
                               "--num-blocks", str(num_blocks), "--name", name, "--region", region] + list(extra)
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                                     bufsize=1)
        self.hello = self.recv()
        if not self.hello.get("ok"):
            self.proc.stdout.close()
            self.close()
            raise RuntimeError(f"{name}: {self.hello.get('error')}")
        self.pid = self.hello["pid"]

    def send(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def recv(self):
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            raise RuntimeError(f"agent {self.name} exited ({self.proc.returncode})")
        return json.loads(line)

    def call(self, **cmd):
        self.send(**cmd)
        r = self.recv()
        if not r.get("ok"):
            raise RuntimeError(f"agent {self.name}: {cmd.get('op')} failed: {r.get('error')}")
        return r

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Host:
    def __init__(self, cluster, index, addr, name):
        self.cluster = cluster
        self.index = index
        self.addr = addr
        self.name = name
        self.ns = f"{cluster.prefix}-{name}"
        self.node_id = f"{addr}:{PORT}"
        self.daemon = None
        self.nft_ready = False

    def ip(self, *args, check=True):
        return run(["ip", "-n", self.ns] + list(args), check=check)

    def exec(self, *argv, check=True):
        return run(["ip", "netns", "exec", self.ns] + list(argv), check=check)

    # -- faults ----------------------------------------------------------------

    def _nft_table(self):
        if not self.nft_ready:
            run(["ip", "netns", "exec", self.ns, "nft", "-f", "-"],
                input="table inet kvc {\n chain input { type filter hook input priority 0; }\n"
                      " chain output { type filter hook output priority 0; }\n}\n")
            self.nft_ready = True

    def block(self, other, how="drop"):
        """Cuts this host off from `other` in this host's namespace: "drop" drops every packet both
        ways (a silent partition); "reset" answers every TCP segment from `other` with a TCP reset
        (resets from `other` still pass, so when both hosts do this each side's segments reset the
        other's connection)."""
        self._nft_table()
        if how == "drop":
            rules = (f"add rule inet kvc input ip saddr {other.addr} drop\n"
                     f"add rule inet kvc output ip daddr {other.addr} drop\n")
        else:
            rules = (f"add rule inet kvc input ip saddr {other.addr} tcp flags & rst == rst accept\n"
                     f"add rule inet kvc input ip saddr {other.addr} meta l4proto tcp reject with tcp reset\n")
        run(["ip", "netns", "exec", self.ns, "nft", "-f", "-"], input=rules)

    def isolate(self, keep=()):
        """Silently cuts this host off from every other host but those in `keep` (drop both ways,
        in this host's namespace: one nft call however many hosts there are)."""
        self._nft_table()
        allowed = ", ".join([self.addr] + [h.addr for h in keep])
        rules = (f"add rule inet kvc input ip saddr != {{ {allowed} }} drop\n"
                 f"add rule inet kvc output ip daddr != {{ {allowed} }} drop\n")
        run(["ip", "netns", "exec", self.ns, "nft", "-f", "-"], input=rules)

    def unblock(self):
        if self.nft_ready:
            run(["ip", "netns", "exec", self.ns, "nft", "flush", "table", "inet", "kvc"])

    def link(self, up):
        self.ip("link", "set", "eth0", "up" if up else "down")

    def shape(self, mbit):
        """htb on this host's egress: everything it sends is limited to `mbit` Mbit/s."""
        self.exec("tc", "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "htb", "default", "10")
        self.exec("tc", "class", "replace", "dev", "eth0", "parent", "1:", "classid", "1:10", "htb",
                  "rate", f"{mbit}mbit", "ceil", f"{mbit}mbit")

    def unshape(self):
        self.exec("tc", "qdisc", "del", "dev", "eth0", "root", check=False)


class Cluster:
    """N hosts on one bridge. Use as a context manager (or call close())."""

    def __init__(self, n, block_len=65536, daemon_args=(), workdir=None, extra_hosts=()):
        self.closed = True  # until there is something to close
        self.stop_problems = []  # filled by close(), which a SIGTERM may run first
        reason = skip_reason()
        if reason:
            raise unittest_skip(reason)
        clean_stale()
        self.prefix = f"{PREFIX}{os.getpid()}-{random.randrange(16**4):04x}"
        self.workdir = workdir or tempfile.mkdtemp(prefix=f"kvpeer-cluster-{os.getpid()}-")
        self.block_len = block_len
        self.daemon_args = list(daemon_args)
        self.hosts = []
        self.agents = []
        self.closers = []  # more teardown (containers), run first
        self.closed = False
        atexit.register(self.close)
        self._old_term = signal.signal(signal.SIGTERM, self._on_term)
        self.br_ns = f"{self.prefix}-br"
        try:
            run(["ip", "netns", "add", self.br_ns])
            run(["ip", "-n", self.br_ns, "link", "add", "br0", "type", "bridge"])
            run(["ip", "-n", self.br_ns, "link", "set", "br0", "up"])
            for i in range(n):
                self.add_host(f"{NET}.0.{i + 1}", f"h{i}")
            for addr, name in extra_hosts:
                self.add_host(addr, name)
        except BaseException:
            self.close()
            raise

    def _on_term(self, signum, frame):
        self.close()
        sys.exit(128 + signum)

    def add_host(self, addr, name):
        h = Host(self, len(self.hosts), addr, name)
        run(["ip", "netns", "add", h.ns])
        self.hosts.append(h)
        run(["ip", "-n", self.br_ns, "link", "add", name, "type", "veth", "peer", "name", "eth0", "netns", h.ns])
        run(["ip", "-n", self.br_ns, "-batch", "-"],
            input=f"link set {name} master br0\nlink set {name} up\n")
        run(["ip", "-n", h.ns, "-batch", "-"],
            input=f"link set lo up\naddr add {addr}/16 dev eth0\nlink set eth0 up\n")
        return h

    def start_daemons(self, hosts=None, extra=(), block_len=None):
        for h in hosts or self.hosts:
            self.start_daemon(h, extra, block_len)

    def start_daemon(self, h, extra=(), block_len=None):
        args = harness.model_flags(block_len or self.block_len) + self.daemon_args + list(extra)
        if h.daemon is None:
            h.daemon = ClusterDaemon(h, self.workdir, args)
        else:
            h.daemon.args = args
        h.daemon.start()
        return h.daemon

    def agent(self, h, num_blocks, name=None, region="memfd", socket_path=None, block_len=None):
        a = Agent(["ip", "netns", "exec", h.ns], socket_path or h.daemon.socket_path, block_len or self.block_len,
                  num_blocks, name or f"{h.name}-e{len(self.agents)}", region=region)
        self.agents.append(a)
        return a

    def quiesce_check(self, timeout=30.0):
        """Every daemon: no loads in flight (engines and peers), no rounds serving or open. Returns
        the problems left after `timeout` (empty when quiet)."""
        deadline = time.monotonic() + timeout
        while True:
            problems = []
            for h in self.hosts:
                if h.daemon is None or not h.daemon.running:
                    continue
                st = h.daemon.status()
                for e in st["engines"]:
                    if e["loads_in_flight"]:
                        problems.append(f"{h.name}: engine {e['client']} loads_in_flight {e['loads_in_flight']}")
                for p in st["peers"]:
                    for k in ("loads_in_flight", "rounds_serving", "rounds_open"):
                        if p.get(k):
                            problems.append(f"{h.name}: peer {p['peer_id']} {k} {p[k]}")
            if not problems or time.monotonic() > deadline:
                return problems
            time.sleep(0.2)

    def logs(self):
        out = []
        for h in self.hosts:
            if h.daemon is not None:
                out.append(h.daemon.log_tail(60))
        return "\n".join(out)

    def close(self):
        if self.closed:
            return
        self.closed = True
        for fn in reversed(self.closers):
            try:
                fn()
            except Exception as err:  # noqa: BLE001 (teardown goes on)
                sys.stderr.write(f"cluster teardown: {err}\n")
        for a in self.agents:
            try:
                a.close()
            except Exception:
                pass
        problems = []
        for h in self.hosts:
            d = h.daemon
            if d is not None and d.running:
                code = d.stop()
                if code != 0:
                    problems.append(f"{h.name}: kvpeerd exit {code} after SIGTERM")
        for h in self.hosts:
            for pid in run(["ip", "netns", "pids", h.ns], check=False).stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            run(["ip", "netns", "del", h.ns], check=False)
        run(["ip", "netns", "del", self.br_ns], check=False)
        if os.environ.get("KVPEER_KEEP_TEST_DIRS"):
            sys.stderr.write(f"kept {self.workdir}\n")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)
        try:
            signal.signal(signal.SIGTERM, self._old_term)
        except (ValueError, TypeError):
            pass
        self.stop_problems = problems

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def unittest_skip(reason):
    import unittest
    return unittest.SkipTest(reason)


def leftover_namespaces(prefix):
    return [line.split()[0] for line in run(["ip", "netns", "list"], check=False).stdout.splitlines()
            if line.startswith(prefix)]


__all__ = ["Cluster", "Host", "Agent", "skip_reason", "clean_stale", "record_figure", "Client", "KvpeerError",
           "ProtocolError", "leftover_namespaces"]
