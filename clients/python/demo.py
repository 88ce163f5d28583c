#!/usr/bin/env python3
"""The two-node demo's engines: engine A publishes blocks on node A, engine
B probes and loads them from node A in batches, verifies every byte and
prints the throughput: first cold, then warm. The daemons are started and
stopped by scripts/demo.sh; this script only talks to their control sockets.

    demo.py --socket-a A.sock --socket-b B.sock [--blocks 256] [--block-len 1048576]
            [--kvpeerctl build/cli/kvpeerctl] [--region-dir DIR]

The first transfer is cold: engine B's region has never been written, so
every page it receives is allocated and faulted into the consumer daemon's
mapping on arrival, and node A's daemon maps engine A's pages for the first
time. The second moves the same blocks into the same (now warm) slots under a
new request. On a paravirtualized guest a first touch costs microseconds per
4 KiB page, so the two figures can differ many times (docs/performance.md,
"Cold pages and huge pages"). --region-dir puts both regions in files there
(e.g. a tmpfs mounted huge=always) instead of /dev/shm and a memfd.

With --kvpeerctl, both nodes' `kvpeerctl status` is printed while the
engines are still attached, so it shows them next to the peer session.

Exit status 0 when every block arrived intact, 1 otherwise.
"""

import argparse
import subprocess
import sys
import time

from kvpeer import Client
from kvpeer.simulator import DEFAULT_FINGERPRINT, DEFAULT_HASH_SEED, SimEngine, make_keys


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--socket-a", required=True, help="control socket of the producer node")
    ap.add_argument("--socket-b", required=True, help="control socket of the consumer node")
    ap.add_argument("--blocks", type=int, default=256)
    ap.add_argument("--block-len", type=int, default=1024 * 1024)
    ap.add_argument("--batch", type=int, default=32, help="blocks per load")
    ap.add_argument("--fingerprint", default=DEFAULT_FINGERPRINT)
    ap.add_argument("--hash-seed", default=DEFAULT_HASH_SEED)
    ap.add_argument("--kvpeerctl", help="kvpeerctl binary, to print both nodes' status at the end")
    ap.add_argument("--region-dir", help="put both engines' regions in files in this directory")
    return ap.parse_args()


def show_status(kvpeerctl, label, socket_path):
    """Prints `kvpeerctl status` of one node (the operator's view)."""
    print(f"\n== {label}: kvpeerctl --socket {socket_path} status", flush=True)
    subprocess.run([kvpeerctl, "--socket", socket_path, "status"], check=True)


def main():
    args = parse_args()
    with Client(args.socket_a) as c:
        peer = c.status()["listen"]
    total_mb = args.blocks * args.block_len / 1e6
    model = dict(fingerprint=args.fingerprint, hash_seed=args.hash_seed)

    where = dict(region_dir=args.region_dir) if args.region_dir else {}
    with SimEngine(args.socket_a, args.blocks, args.block_len, name="demo-engine-a", region="shm", **where,
                   **model) as a, \
            SimEngine(args.socket_b, args.blocks, args.block_len, name="demo-engine-b",
                      region="shm" if args.region_dir else "memfd", **where, **model) as b:
        keys = make_keys("kvpeer-demo", args.blocks)
        started = time.monotonic()
        a.fill_and_publish(keys, range(args.blocks))
        print(f"engine A on {a.node_id}: published {args.blocks} blocks of {args.block_len} bytes "
              f"({total_mb:.0f} MB) in {time.monotonic() - started:.2f} s")

        # Engine B fills its slots in reverse order, so a misplaced block shows.
        dest = list(reversed(range(args.blocks)))
        for n, label in enumerate(["cold", "warm"], start=1):
            if n > 1:
                b.region.clear()  # so the second transfer cannot pass on the first one's bytes
            report = b.fetch(peer, f"demo-request-{n}", keys, dest, batch=args.batch, timeout=300)
            b.client.finish(f"demo-request-{n}")
            print(f"engine B on {b.node_id}, {label}: {report.hits}/{report.keys} hits, {report.jobs_ok} loads ok, "
                  f"{report.jobs_failed} failed, {len(report.bad_blocks)} blocks with wrong bytes")
            print(f"{label}: moved {report.bytes_loaded / 1e6:.0f} MB in {report.seconds:.2f} s: "
                  f"{report.mb_per_s:.0f} MB/s (probe + load + poll, bytes verified afterwards)")
            if not report.ok:
                print(f"demo FAILED: reasons {report.reasons[:5]}, failed requests {report.failed_requests[:5]}",
                      file=sys.stderr)
                return 1
        print("every byte verified. The cold transfer paid for every page's first touch (engine B's fresh "
              "region allocated on arrival, both daemons' mappings faulted in); the warm one moved the same "
              "blocks into the same slots again, which is what a running engine sees.")
        if args.kvpeerctl:
            show_status(args.kvpeerctl, "node A", args.socket_a)
            show_status(args.kvpeerctl, "node B", args.socket_b)
    return 0


if __name__ == "__main__":
    sys.exit(main())
