"""The soak's (soak.py) shared parts: the topology's sizes and bounds, its log
line, the statistics and invariant violations it collects, and a node (a
kvpeerd behind its FaultProxy, restartable at the same address).
"""

import sys
import threading
import time
from collections import Counter

from kvpeer_testing.fault_proxy import FaultProxy
from kvpeer_testing.fault_tools import FixedDaemon, free_port, proc_fds
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED

BLOCK_LEN = 128 * 1024
NUM_BLOCKS = 384
PUB_SLOTS = range(0, 128)  # published blocks
STORE_SLOTS = range(128, 192)  # disaggregated-prefill supply
DEST_SLOTS = range(192, 384)  # load destinations
LOAD_TIMEOUT_S = 10
STORE_UNMATCHED_S = 60  # control API: unmatched supply fails after 60 s
CLIENT_TIMEOUT_S = 30


def log(msg):
    sys.stderr.write(f"[soak {time.strftime('%H:%M:%S')}] {msg}\n")
    sys.stderr.flush()


def rss_anon_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    return int(line.split()[1])
    except FileNotFoundError:
        pass
    return 0


class Stats:
    """Counters shared by every thread."""

    def __init__(self):
        self.lock = threading.Lock()
        self.c = Counter()
        self.violations = []  # (kind, detail)
        self.reasons = Counter()
        self.api_errors = Counter()

    def add(self, key, n=1):
        with self.lock:
            self.c[key] += n

    def violation(self, kind, detail):
        with self.lock:
            self.c["violation:" + kind] += 1
            if len(self.violations) < 200:
                self.violations.append((kind, detail))
        log(f"VIOLATION {kind}: {detail}")

    def reason(self, text):
        with self.lock:
            # The first words classify it; ids and numbers vary.
            self.reasons[" ".join(text.split()[:4])[:60]] += 1

    def api_error(self, code):
        with self.lock:
            self.api_errors[code] += 1


class Node:
    """A daemon, its proxy (whose address is the node's id) and its state
    as the injector sees it."""

    def __init__(self, index, workdir, extra, log_level):
        self.index = index
        self.proxy = FaultProxy(name=f"node{index}")
        self.port = free_port()
        self.daemon = FixedDaemon(workdir, f"node{index}", self.port,
                                  ["--block-len", str(BLOCK_LEN), "--config-fingerprint", DEFAULT_FINGERPRINT,
                                   "--hash-seed", DEFAULT_HASH_SEED, "--node-id", self.proxy.address,
                                   "--load-timeout-s", str(LOAD_TIMEOUT_S), "--abort-ack-timeout-s", "5",
                                   "--handshake-timeout-s", "5", *extra], log_level=log_level)
        self.proxy.set_target(f"127.0.0.1:{self.port}")
        self.id = self.proxy.address
        self.generation = 0  # bumped on every restart
        self.cond = threading.Condition()
        self.draining = False  # a SIGTERM restart is coming: engines poll until their socket closes
        self.killing = False  # a kill -9 is coming: outstanding jobs will be orphaned
        self.stopped = False  # SIGSTOPped
        self.expected_dead = False
        self.pids = []
        self.fd_base = None
        self.rss_base = None
        self.rss_peak = 0  # RssAnon, kB, highest sample of any of this node's processes
        self.fds_peak = 0

    def sample(self):
        try:
            self.rss_peak = max(self.rss_peak, rss_anon_kb(self.daemon.pid))
            self.fds_peak = max(self.fds_peak, proc_fds(self.daemon.pid))
        except (FileNotFoundError, ProcessLookupError, AttributeError):
            pass  # between a stop and a restart

    def start(self):
        self.daemon.start()
        self.pids.append(self.daemon.pid)

    def restart(self):
        self.daemon = self.daemon.restart_as()
        self.daemon.start()
        self.pids.append(self.daemon.pid)
        with self.cond:
            self.generation += 1
            self.draining = False
            self.killing = False
            self.expected_dead = False
            self.cond.notify_all()
