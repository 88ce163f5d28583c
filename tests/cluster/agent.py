"""An engine inside a cluster host's namespace (started by cluster.py with
`ip netns exec`): a SimEngine (tests' Python client, stdlib only) driven by
one JSON command per line on stdin, one JSON answer per line on stdout.

Times in answers are time.monotonic() (CLOCK_MONOTONIC, shared by every
process on the machine), so the test compares them with its own clock.
"""

import argparse
import json
import os
import random
import sys
import time
import traceback

from kvpeer import KvpeerError, ProtocolError
from kvpeer.simulator import SimEngine, SimulatorError, make_keys


def shm_region(directory, group):
    """Region files made in `directory`, group `group` and mode 0660 when given (else mkstemp's 0600)."""
    import grp
    from kvpeer import client as kvclient
    orig = kvclient.Region.shm_file.__func__

    def shm_file(cls, num_blocks, block_len, directory=directory, offset=0, prefix="kvpeer-region-"):
        region = orig(cls, num_blocks, block_len, directory=directory, offset=offset, prefix=prefix)
        if group:
            os.fchown(region.fd, -1, grp.getgrnam(group).gr_gid)
            os.fchmod(region.fd, 0o660)
        return region
    kvclient.Region.shm_file = classmethod(shm_file)


def chunks(seq, size):
    return [seq[i: i + size] for i in range(0, len(seq), size)]


class Agent:
    def __init__(self, args):
        self.e = SimEngine(args.socket, args.num_blocks, args.block_len, name=args.name, region=args.region)
        self.name = args.name
        self.kv_seq = 0
        self.jobs = {}  # job -> (keys, slots, submitted)
        self.arrival = {}  # job -> when its result was polled (whoever polled: fetch, wait, soak)
        orig = self.e.poll_once

        def poll_once(wait_ms=0):
            before = set(self.e.results)
            r = orig(wait_ms=wait_ms)
            now = time.monotonic()
            for j in set(self.e.results) - before:
                self.arrival[j] = now
            return r
        self.e.poll_once = poll_once

    def kv(self, base):
        self.kv_seq += 1
        return f"{self.name}-{base}-{self.kv_seq}"

    def poll(self, wait_ms):
        self.e.poll_once(wait_ms=wait_ms)

    def wait(self, jobs, timeout):
        deadline = time.monotonic() + timeout
        while any(j not in self.e.results for j in jobs):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.poll(int(min(left, 0.5) * 1000))
        out = []
        for j in jobs:
            res = self.e.results.get(j)
            keys, slots, t0 = self.jobs[j]
            item = {"job": j, "submitted": t0, "result": res, "arrived": self.arrival.get(j)}
            if res is not None and res["success"]:
                item["bad_blocks"] = len(self.e.verify(keys, slots))
            out.append(item)
        return out

    # -- ops -----------------------------------------------------------------

    def op_publish(self, prefix, count, slot0=0, seal=False):
        keys = make_keys(prefix, count)
        return {"published": self.e.fill_and_publish(keys, range(slot0, slot0 + count), seal=seal)}

    def op_unpublish(self, prefix, count, wait=0.0):
        """Unpublishes; slots answered `pinned` are then awaited (a `released` event) for up to
        `wait` seconds: `still_pinned` lists those never released."""
        r = self.e.client.unpublish(make_keys(prefix, count))
        pinned = r.get("pinned", [])
        t0 = time.monotonic()
        still = []
        if pinned and wait > 0:
            try:
                self.e.wait_released(pinned, timeout=wait)
            except SimulatorError:
                still = sorted(set(pinned) - set(self.e.released))
        else:
            still = list(pinned)
        return {"released": r.get("released", []), "pinned": pinned, "still_pinned": still,
                "release_wait_s": time.monotonic() - t0}

    def op_supply(self, kv, prefix, count, slot0=0, batch=64):
        """Disaggregated producer: one store per batch, kv ids `<kv>/<n>` as SimEngine.fetch(pd=True) uses."""
        keys = make_keys(prefix, count)
        slots = list(range(slot0, slot0 + count))
        self.e.fill(keys, slots)
        jobs = []
        for n, (ks, bs) in enumerate(zip(chunks(keys, batch), chunks(slots, batch))):
            j = self.e.supply(f"{kv}/{n}", ks, bs, fill=False)
            self.jobs[j] = (ks, bs, time.monotonic())
            jobs.append(j)
        return {"jobs": jobs}

    def op_fetch(self, peer, prefix, count, slot0=0, pd=False, kv=None, batch=64, timeout=60.0):
        keys = make_keys(prefix, count)
        r = self.e.fetch(peer, kv or self.kv("fetch"), keys, range(slot0, slot0 + count), batch=batch, pd=pd,
                         timeout=timeout)
        return {"keys": r.keys, "hits": r.hits, "jobs_ok": r.jobs_ok, "jobs_failed": r.jobs_failed,
                "bad_blocks": len(r.bad_blocks), "bytes": r.bytes_loaded, "seconds": r.seconds,
                "reasons": r.reasons, "failed_requests": r.failed_requests}

    def op_load_start(self, peer, prefix, count, slot0=0, kv=None, probe=True):
        """Probes (pinning the hits) then submits one load of them; answers at once with its job."""
        keys = make_keys(prefix, count)
        slots = list(range(slot0, slot0 + count))
        kv = kv or self.kv("load")
        if probe:
            answers = self.e.probe(peer, kv, keys)
            if any(a != "hit" for a in answers):
                raise RuntimeError(f"probe answered {sorted(set(answers))}")
        t0 = time.monotonic()
        j = self.e.load(peer, kv, keys, slots)
        self.jobs[j] = (keys, slots, t0)
        return {"job": j, "submitted": t0, "kv": kv}

    def op_wait(self, jobs, timeout=60.0):
        return {"jobs": self.wait(jobs, timeout)}

    def op_finish(self, kv):
        try:
            self.e.client.finish(kv)
            return {"finished": True}
        except KvpeerError as err:
            return {"finished": False, "code": err.code}

    def op_lookups(self, peer, seconds, count=8):
        """Lookups of keys nobody published, one after another for `seconds`: their latencies."""
        keys = make_keys(f"{self.name}-absent", count)
        lat = []
        errors = 0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            t = time.monotonic()
            try:
                self.e.client.lookup(peer, self.kv("lk"), keys, wait_ms=5000)
                lat.append(time.monotonic() - t)
            except KvpeerError:
                errors += 1
        lat.sort()
        pct = (lambda q: lat[min(len(lat) - 1, int(q * len(lat)))] if lat else None)
        return {"n": len(lat), "errors": errors, "p50": pct(0.5), "p99": pct(0.99), "max": lat[-1] if lat else None}

    def op_soak(self, peers, seconds, count=16, slot0=0, seed=0, result_timeout=60.0, pace_ms=0):
        """For `seconds`: pick a random peer, probe `count` of its keys (prefix `pub-<peer>`), load the
        hits into slots slot0.., verify every byte. Counts everything; a result that does not come
        within `result_timeout` is lost; a second result raises (SimulatorError)."""
        rng = random.Random(seed)
        c = {"requests": 0, "loads_ok": 0, "loads_failed": 0, "lookup_failed": 0, "lookup_retry": 0, "lost": 0,
             "bad_blocks": 0, "bytes": 0, "duplicates": 0, "reasons": {}}
        end = time.monotonic() + seconds
        slots = list(range(slot0, slot0 + count))
        while time.monotonic() < end:
            peer = rng.choice(peers)
            keys = make_keys(f"pub-{peer}", count)
            kv = self.kv("soak")
            c["requests"] += 1
            try:
                answers = self.e.client.lookup(peer, kv, keys, wait_ms=3000)
            except KvpeerError as err:
                c["lookup_failed"] += 1
                c["reasons"][err.code] = c["reasons"].get(err.code, 0) + 1
                time.sleep(0.05)
                continue
            hit = [i for i, a in enumerate(answers) if a == "hit"]
            if "retry" in answers or len(hit) != count:
                c["lookup_retry"] += 1
                self.op_finish(kv)
                time.sleep(0.05)
                continue
            j = self.e.load(peer, kv, keys, slots)
            self.jobs[j] = (keys, slots, time.monotonic())
            try:
                res = self.e.wait_jobs([j], timeout=result_timeout)[j]
            except SimulatorError as err:
                if "second result" in str(err):
                    c["duplicates"] += 1
                    raise
                c["lost"] += 1
                break  # the slots may still be written: stop here
            if res["success"]:
                c["loads_ok"] += 1
                c["bytes"] += count * self.e.block_len
                c["bad_blocks"] += len(self.e.verify(keys, slots))
            else:
                c["loads_failed"] += 1
                reason = str(res.get("reason"))[:60]
                c["reasons"][reason] = c["reasons"].get(reason, 0) + 1
            self.op_finish(kv)
            time.sleep(pace_ms / 1000)
        # Anything delivered late would be a second result: one last poll.
        self.e.poll_once(wait_ms=200)
        return c

    def op_status(self):
        return {"results": len(self.e.results), "failed_requests": self.e.failed_requests}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--socket", required=True)
    ap.add_argument("--block-len", type=int, required=True)
    ap.add_argument("--num-blocks", type=int, required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--region", default="memfd", choices=["memfd", "shm"])
    ap.add_argument("--shm-dir", default="/dev/shm", help="where a --region shm file is made")
    ap.add_argument("--shm-group", help="give the region file this group, mode 0660 (deployment.md)")
    args = ap.parse_args()
    shm_region(args.shm_dir, args.shm_group)
    out = sys.stdout
    try:
        agent = Agent(args)
    except Exception as err:  # noqa: BLE001 (reported to the test)
        out.write(json.dumps({"ok": False, "error": f"{type(err).__name__}: {err}"}) + "\n")
        out.flush()
        return 1
    out.write(json.dumps({"ok": True, "pid": os.getpid(), "uid": os.getuid(),
                          "region": getattr(agent.e.region, "path", None)}) + "\n")
    out.flush()
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd.pop("op")
        try:
            r = getattr(agent, f"op_{op}")(**cmd)
            r["ok"] = True
        except (KvpeerError, ProtocolError, SimulatorError, RuntimeError, OSError) as err:
            r = {"ok": False, "error": f"{type(err).__name__}: {err}", "trace": traceback.format_exc()[-800:]}
        out.write(json.dumps(r) + "\n")
        out.flush()
    agent.e.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
