"""The cluster soak: 32 namespaced hosts, each engine loading from 4 random
other hosts (probe, load, byte-verify, finish) while two hosts are cut off
from the rest of the cluster (nft drop both ways) and healed in a loop.

    python3 soak.py                  # 120 s of traffic (the default)
    python3 soak.py --seconds 600    # longer
    python3 soak.py --seconds 40     # what ctest runs (KVPEER_CLUSTER_SOAK_SECONDS)

Before the traffic every host dials every other (a full mesh) and the
daemons are left idle for --idle-seconds: their CPU time and RSS then are
the idle cost of a 32-host mesh (pings only). The daemons run with
--idle-peer-timeout-s (20 s here), so during the traffic the mesh sessions
no engine uses are closed as idle, and after it every session is: the
figures say how many closed so and what an idle daemon costs once its
connections are gone. Afterwards: results lost (0),
wrong bytes (0), second results (0: the simulator raises), pins left (0:
every published slot released on unpublish), nothing in flight, every
daemon exits 0 on SIGTERM. Figures are printed as `FIGURE name = value`
(and appended to $KVPEER_CLUSTER_FIGURES). Exit status 0 on success, 1 on
failure, 77 when namespaces cannot be made (ctest's SKIP_RETURN_CODE).
"""

import argparse
import os
import random
import sys
import threading
import time

import cluster as C

BLOCK = 65536
COUNT = 16


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def ready_sessions(host):
    return sum(1 for p in host.daemon.status()["peers"] if p["state"] == "ready")


def idle_closes(host):
    """Sessions this host's daemon closed as idle (its log: the close line names the setting)."""
    with open(host.daemon.log_path, errors="replace") as log:
        return sum(1 for line in log if "session closed (idle)" in line)


def idle_close(cl, pids, args, failures):
    """After the traffic every session idles out within the timeout (plus a tick); then the daemons
    hold no connection, and their CPU is what an idle daemon costs with none."""
    t = time.monotonic()
    deadline = t + args.idle_peer_timeout_s + 10
    while any(ready_sessions(h) for h in cl.hosts):
        if time.monotonic() > deadline:
            failures.append(f"sessions still ready {args.idle_peer_timeout_s + 10} s after the traffic: "
                            f"{[ready_sessions(h) for h in cl.hosts]}")
            return
        time.sleep(0.5)
    C.record_figure("idle_close_all_closed_after_s", round(time.monotonic() - t, 1), "s")
    C.record_figure("idle_close_sessions_closed", sum(idle_closes(h) for h in cl.hosts))
    cpu0 = [cpu_seconds(p) for p in pids]
    time.sleep(args.idle_seconds)
    cpu1 = [cpu_seconds(p) for p in pids]
    cpu = [(b - a) / args.idle_seconds * 100 for a, b in zip(cpu0, cpu1)]
    C.record_figure("idle_closed_cpu_pct_per_daemon_mean", round(sum(cpu) / len(cpu), 3), "%")
    C.record_figure("idle_closed_rss_mib_per_daemon_max",
                    round(max(C.harness.rss_bytes(p) for p in pids) / 2**20, 1), "MiB")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hosts", type=int, default=32)
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("KVPEER_CLUSTER_SOAK_SECONDS", "120")))
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--idle-peer-timeout-s", type=int, default=20,
                    help="the daemons' --idle-peer-timeout-s: above --idle-seconds plus the mesh's connect time")
    ap.add_argument("--fanout", type=int, default=4)
    ap.add_argument("--cut-seconds", type=float, default=12.0, help="how long the two hosts stay cut off")
    ap.add_argument("--heal-seconds", type=float, default=6.0)
    ap.add_argument("--pace-ms", type=int, default=20, help="each engine's pause between requests")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    args = ap.parse_args()

    reason = C.skip_reason()
    if reason:
        if C.required():
            print(f"FAIL: cluster soak required but cannot run: {reason}")
            return 1
        print(f"SKIP: {reason}")
        return 77
    rng = random.Random(args.seed)
    print(f"soak: {args.hosts} hosts, {args.seconds:.0f} s, seed {args.seed}", flush=True)
    failures = []
    cl = C.Cluster(args.hosts, block_len=BLOCK)
    try:
        t = time.monotonic()
        cl.start_daemons(extra=["--idle-peer-timeout-s", str(args.idle_peer_timeout_s)])
        C.record_figure("soak_cluster_start_s", round(time.monotonic() - t, 2), "s")
        hosts = cl.hosts
        agents = [cl.agent(h, 2 * COUNT, name=h.name) for h in hosts]
        for h, a in zip(hosts, agents):
            a.call(op="publish", prefix=f"pub-{h.node_id}", count=COUNT, slot0=COUNT)
        cut = hosts[:2]  # the two hosts cut off and healed in a loop
        peers = []
        for i, h in enumerate(hosts):
            others = [o for o in hosts if o is not h]
            pick = rng.sample(others, args.fanout)
            if i in (2, 3) and not any(o in cut for o in pick):
                pick[0] = cut[i - 2]  # someone always loads from a cut host
            peers.append([o.node_id for o in pick])

        # Idle cost: a full mesh of sessions, pings only.
        t = time.monotonic()
        for i, h in enumerate(hosts):
            with C.Client(h.daemon.socket_path) as ctl:
                for o in hosts[i + 1:]:
                    ctl.connect(o.node_id)
        C.record_figure("soak_full_mesh_connect_s", round(time.monotonic() - t, 2), "s")
        pids = [h.daemon.pid for h in hosts]
        cpu0 = [cpu_seconds(p) for p in pids]
        time.sleep(args.idle_seconds)
        cpu1 = [cpu_seconds(p) for p in pids]
        idle_cpu = [(b - a) / args.idle_seconds * 100 for a, b in zip(cpu0, cpu1)]
        idle_rss = [C.harness.rss_bytes(p) for p in pids]
        ready = [ready_sessions(h) for h in hosts]
        C.record_figure("idle_mesh_ready_sessions_min", min(ready))
        if min(ready) != len(hosts) - 1:
            failures.append(f"the mesh was not whole while measured idle: {ready} sessions ready")
        C.record_figure("idle_mesh_cpu_pct_per_daemon_mean", round(sum(idle_cpu) / len(idle_cpu), 3), "%")
        C.record_figure("idle_mesh_cpu_pct_per_daemon_max", round(max(idle_cpu), 3), "%")
        C.record_figure("idle_mesh_rss_mib_per_daemon_max", round(max(idle_rss) / 2**20, 1), "MiB")

        # The soak.
        stop = threading.Event()
        faults = {"cuts": 0, "heals": 0}
        max_rss = [0] * len(hosts)

        def fault_loop():
            while not stop.is_set():
                for x in cut:
                    x.isolate(keep=[y for y in cut if y is not x])
                faults["cuts"] += 1
                if stop.wait(args.cut_seconds):
                    break
                for x in cut:
                    x.unblock()
                faults["heals"] += 1
                stop.wait(args.heal_seconds)

        def rss_loop():
            while not stop.is_set():
                for i, p in enumerate(pids):
                    try:
                        max_rss[i] = max(max_rss[i], C.harness.rss_bytes(p))
                    except (OSError, AssertionError):
                        pass
                stop.wait(1.0)

        threads = [threading.Thread(target=fault_loop), threading.Thread(target=rss_loop)]
        cpu0 = [cpu_seconds(p) for p in pids]
        t0 = time.monotonic()
        for th in threads:
            th.start()
        for i, a in enumerate(agents):
            a.send(op="soak", peers=peers[i], seconds=args.seconds, count=COUNT, slot0=0, seed=args.seed + i,
                   pace_ms=args.pace_ms)
        reports = []
        for a in agents:
            r = a.recv()
            if not r.get("ok"):
                failures.append(f"{a.name}: {r.get('error')}")
                r = {}
            reports.append(r)
        stop.set()
        for th in threads:
            th.join()
        elapsed = time.monotonic() - t0
        cpu1 = [cpu_seconds(p) for p in pids]
        for h in hosts:
            h.unblock()

        tot = {k: sum(r.get(k, 0) for r in reports) for k in
               ("requests", "loads_ok", "loads_failed", "lookup_failed", "lookup_retry", "lost", "bad_blocks",
                "duplicates", "bytes")}
        reasons = {}
        for r in reports:
            for k, v in r.get("reasons", {}).items():
                reasons[k] = reasons.get(k, 0) + v
        C.record_figure("soak_hosts", args.hosts)
        C.record_figure("soak_seconds", round(elapsed, 1), "s")
        C.record_figure("soak_requests", tot["requests"])
        C.record_figure("soak_loads_ok", tot["loads_ok"])
        C.record_figure("soak_loads_failed", tot["loads_failed"])
        C.record_figure("soak_lookups_failed_or_retry", tot["lookup_failed"] + tot["lookup_retry"])
        C.record_figure("soak_partition_cycles", faults["cuts"])
        C.record_figure("soak_lost_results", tot["lost"])
        C.record_figure("soak_wrong_blocks", tot["bad_blocks"])
        C.record_figure("soak_duplicate_results", tot["duplicates"])
        C.record_figure("soak_mib_loaded", round(tot["bytes"] / 2**20, 1), "MiB")
        C.record_figure("soak_max_rss_mib_per_daemon", round(max(max_rss) / 2**20, 1), "MiB")
        C.record_figure("soak_cpu_pct_per_daemon_mean",
                        round(sum(b - a for a, b in zip(cpu0, cpu1)) / elapsed / len(pids) * 100, 2), "%")
        print(f"soak: failure reasons {reasons}", flush=True)
        if tot["lost"] or tot["bad_blocks"] or tot["duplicates"]:
            failures.append(f"lost {tot['lost']}, wrong blocks {tot['bad_blocks']}, duplicates {tot['duplicates']}")
        if tot["loads_ok"] == 0 or faults["cuts"] == 0:
            failures.append(f"the soak did nothing: {tot}, {faults}")
        # Nothing held once quiet: no work in flight, every published slot released.
        problems = cl.quiesce_check(timeout=30)
        if problems:
            failures.append(f"work left in flight: {problems[:10]}")
        leaked = 0
        for h, a in zip(hosts, agents):
            r = a.call(op="unpublish", prefix=f"pub-{h.node_id}", count=COUNT, wait=15.0)
            leaked += len(r["still_pinned"])
        C.record_figure("soak_pins_leaked", leaked)
        if leaked:
            failures.append(f"{leaked} pinned slots never released")
        idle_close(cl, pids, args, failures)
    except Exception as err:  # noqa: BLE001 (reported, then the cluster is torn down)
        failures.append(f"{type(err).__name__}: {err}")
    finally:
        if failures:
            print(cl.logs()[-20000:])
        prefix = cl.prefix
        cl.close()
        failures.extend(cl.stop_problems)
        if C.leftover_namespaces(prefix):
            failures.append(f"namespaces left: {C.leftover_namespaces(prefix)}")
    if failures:
        print("FAIL: " + "; ".join(failures))
        return 1
    print("soak: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
