"""Helpers shared by the fault tests and the soak test: daemons on a fixed
port (so one can be restarted where its peers expect it), status and metrics
look-ups, and /proc readings (open descriptors, resident memory)."""

import os
import re
import socket

from kvpeer_testing.daemon import Daemon

__all__ = ["FixedDaemon", "free_port", "metric_value", "peer_entry", "engine_entry", "proc_fds", "proc_rss_kb"]


def free_port():
    """A loopback TCP port that was free a moment ago."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class FixedDaemon(Daemon):
    """A kvpeerd listening on a given loopback port; `restart_as()` gives a
    new process object with the same name (socket path, log file) and
    address, as an operator restarting the service would."""

    def __init__(self, workdir, name, port, args=(), log_level=None):
        super().__init__(workdir, name, args, listen=f"127.0.0.1:{port}", log_level=log_level)
        self.port = port

    def restart_as(self):
        return FixedDaemon(self.workdir, self.name, self.port, self.args, self.log_level)


def peer_entry(daemon, peer_id):
    """The daemon's `status` entry for `peer_id`, or None."""
    for p in daemon.status()["peers"]:
        if p["peer_id"] == peer_id:
            return p
    return None


def engine_entry(daemon, client):
    for e in daemon.status()["engines"]:
        if e["client"] == client:
            return e
    return None


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$")


def metric_value(daemon, name, **labels):
    """Sum of the samples of metric `name` whose labels include `labels`."""
    with daemon.client() as c:
        text = c.metrics()
    total = 0.0
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or m.group(1) != name:
            continue
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        if all(got.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
    return total


def proc_fds(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def proc_rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0
