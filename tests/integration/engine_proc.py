"""An engine in its own process, so a test can kill it with SIGKILL the way
an inference engine crashes: no unpublish, no finish, no orderly close.

    python3 engine_proc.py --socket S --block-len N --prefix P --count C \
        [--publish] [--probe PEER --kv ID] [--load PEER --kv ID --load-prefix Q]

It does what the flags ask in that order, prints one JSON line on stdout
({"ready": true, "pid": ..., ...}) and then sleeps until it is killed or its
stdin closes.
"""

import argparse
import json
import os
import sys

from kvpeer.simulator import SimEngine, make_keys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--block-len", type=int, required=True)
    ap.add_argument("--num-blocks", type=int, default=256)
    ap.add_argument("--name", default="engine-proc")
    ap.add_argument("--prefix", required=True, help="keys: make_keys(prefix, count)")
    ap.add_argument("--count", type=int, required=True)
    ap.add_argument("--publish", action="store_true", help="fill slots 0..count-1 and publish")
    ap.add_argument("--probe", metavar="PEER", help="probe the keys on PEER (they get pinned there)")
    ap.add_argument("--load", metavar="PEER", help="load --load-count keys of --load-prefix from PEER (PD)")
    ap.add_argument("--load-prefix", default="never-stored")
    ap.add_argument("--load-count", type=int, default=8)
    ap.add_argument("--kv", default="engine-proc-kv")
    args = ap.parse_args()

    engine = SimEngine(args.socket, args.num_blocks, args.block_len, name=args.name)
    keys = make_keys(args.prefix, args.count)
    out = {"ready": True, "pid": os.getpid()}
    if args.publish:
        out["published"] = engine.fill_and_publish(keys, range(args.count))
    if args.probe:
        out["answers"] = engine.probe(args.probe, args.kv, keys)
    if args.load:
        lkeys = make_keys(args.load_prefix, args.load_count)
        base = args.num_blocks - args.load_count
        out["load_job"] = engine.load(args.load, args.kv + "-load", lkeys, range(base, args.num_blocks))
    print(json.dumps(out), flush=True)
    sys.stdin.read()  # wait to be killed (or for the test to close our stdin)
    engine.close()


if __name__ == "__main__":
    main()
