"""A consumer engine in its own process, driven by JSON lines on stdin, so a
test can SIGSTOP/SIGCONT or SIGKILL it between steps.

    python3 fault_engine.py --socket S --block-len N [--num-blocks M] [--name X]

Commands (one JSON object a line; each answered by one JSON line on stdout):
  {"cmd": "submit", "peer": P, "kv": K, "prefix": F, "count": C, "base": B, "batch": N}
      probe make_keys(F, C) on P (request K), load the hits into slots B..,
      answer {"jobs": [...], "hits": h}
  {"cmd": "collect", "timeout": T}
      wait for every submitted job's result, verify the bytes of each
      successful one, answer {"ok": n, "failed": n, "bad_blocks": [...],
      "reasons": [...], "results": n}; a job answered twice makes the
      simulator raise, reported as {"error": ...}
End of stdin closes the engine and exits.
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
    ap.add_argument("--name", default="fault-engine")
    args = ap.parse_args()
    engine = SimEngine(args.socket, args.num_blocks, args.block_len, name=args.name)
    jobs = {}  # job id -> (keys, slots)
    print(json.dumps({"ready": True, "pid": os.getpid()}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        try:
            if cmd["cmd"] == "submit":
                keys = make_keys(cmd["prefix"], cmd["count"])
                base, batch = cmd.get("base", 0), cmd.get("batch", 16)
                submitted, hits = [], 0
                for i in range(0, len(keys), batch):
                    ks = keys[i:i + batch]
                    slots = list(range(base + i, base + i + len(ks)))
                    answers = engine.probe(cmd["peer"], cmd["kv"], ks)
                    hk = [k for k, a in zip(ks, answers) if a == "hit"]
                    hs = [s for s, a in zip(slots, answers) if a == "hit"]
                    hits += len(hk)
                    if hk:
                        job = engine.load(cmd["peer"], cmd["kv"], hk, hs)
                        jobs[job] = (hk, hs)
                        submitted.append(job)
                out = {"jobs": submitted, "hits": hits}
            elif cmd["cmd"] == "collect":
                results = engine.wait_jobs(list(jobs), timeout=cmd.get("timeout", 30))
                out = {"ok": 0, "failed": 0, "bad_blocks": [], "reasons": [], "results": len(results)}
                for job, res in results.items():
                    if res["success"]:
                        out["ok"] += 1
                        out["bad_blocks"] += engine.verify(*jobs[job])
                    else:
                        out["failed"] += 1
                        out["reasons"].append(res.get("reason"))
                engine.poll_once(wait_ms=200)  # a duplicate result would raise here
            else:
                out = {"error": f"unknown cmd {cmd['cmd']!r}"}
        except Exception as e:  # reported to the test, which fails on it
            out = {"error": repr(e)}
        print(json.dumps(out), flush=True)
    engine.close()


if __name__ == "__main__":
    main()
