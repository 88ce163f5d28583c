#!/usr/bin/env python3
"""The vLLM tier's own Python time per scheduler step (issue 24 item 5).

Two real kvpeerd daemons (KVPEER_BIN_DIR, as the tests), vLLM's modules
replaced by the tests' stand-in (clients/python/tests/vllm_stub). Node A's
engine publishes 512 blocks (a shared prompt prefix); node B's engine has 64
requests of 512 keys each, all probing A (`remote_kv_source`). Each step
makes the calls vLLM's tiering manager makes into the tier
(vllm/v1/kv_offload/tiering/manager.py at 7cfb97e: get_finished_jobs at the
step's first lookup, `lookup` per key after a primary miss,
serve_external_requests and on_schedule_end at the step's end, and
has_pending_work), and times only those calls:

  probing  steps until every key of every request is answered (the probes
           go out, `retry` answers are asked again);
  steady   every key answered; the requests wait to be scheduled, so vLLM
           asks all 32768 keys again each step (the per-key figure);
  rest     no request at all, blocks published (the per-step figure at rest).

Goals: <= 2 us per key per step (steady), <= 200 us per step at rest.
Repeated runs (fresh requests each, --runs), medians with their spread over
the runs: the machine is shared and noisy, so single figures mislead.

    KVPEER_BIN_DIR=build PYTHONPATH=tests/pylib:clients/python/tests:clients/python/tests/vllm_stub \
        python3 clients/python/bench_tier.py [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

from kvpeer_testing.harness import Daemon
from kvpeer.simulator import block_content, make_keys
from vllm.v1.kv_offload.base import LookupResult, ReqContext, ScheduleEndContext
from vllm_driver import Engine, VllmRegion, create_tier

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

REQUESTS = 64
KEYS = 512
ROW = 4096
GOAL_US_PER_KEY = 2.0
GOAL_US_AT_REST = 200.0


def spec(engine_id):
    config = SimpleNamespace(
        engine_id=engine_id, model=SimpleNamespace(name="bench/model", dtype="bfloat16"),
        cache=SimpleNamespace(tokens_per_hash=16, blocks_per_chunk=1),
        parallel=SimpleNamespace(tp_size=1, pp_size=1, pcp_size=1, dcp_size=1, is_parallelism_agnostic=False),
        groups=(SimpleNamespace(tokens_per_block=16, layer_names=("l0",)),), extra_config={})
    return SimpleNamespace(config=config, extra_config={})


def engine(daemon, name, blocks, regions):
    engine_id = f"{name}-{uuid.uuid4().hex[:8]}"
    region = VllmRegion(engine_id, blocks, ROW)
    regions.append(region)
    config = {"type": "KvpeerSecondaryTier", "module_path": "kvpeer.vllm", "socket": daemon.socket_path}
    return Engine(region, lambda view: create_tier(config, spec(engine_id), view))


class Clock:
    def __init__(self):
        self.spent = 0.0

    def __call__(self, fn, *args):
        started = time.perf_counter()
        value = fn(*args)
        self.spent += time.perf_counter() - started
        return value


def step(tier, contexts, keys, clock):
    """One scheduler step's calls into the tier; returns how many keys are
    not answered yet."""
    clock(lambda: list(tier.get_finished_jobs()))
    unanswered = 0
    lookup = tier.lookup
    started = time.perf_counter()
    for ctx in contexts:
        for key in keys:
            if lookup(key, ctx) is LookupResult.RETRY:
                unanswered += 1
    clock.spent += time.perf_counter() - started
    clock(tier.serve_external_requests, None)
    clock(tier.on_schedule_end, ScheduleEndContext(new_req_ids=(), preempted_req_ids=()))
    clock(tier.has_pending_work)
    return unanswered


def one_run(a_daemon, b, keys, run, steady_steps, rest_steps):
    tier = b.tier
    host, port = a_daemon.listen.rsplit(":", 1)
    contexts = []
    for i in range(REQUESTS):
        ctx = ReqContext(req_id=f"r{run}-{i}", kv_transfer_params={"remote_kv_source": {
            "kv_request_id": f"bench-{run}-{i}", "remote_host": host, "remote_port": int(port)}})
        tier.on_new_request(ctx)
        contexts.append(ctx)
    probing = []
    deadline = time.monotonic() + 60
    while True:
        clock = Clock()
        left = step(tier, contexts, keys, clock)
        probing.append(clock.spent)
        if left == 0:
            break
        if time.monotonic() > deadline:
            raise RuntimeError(f"probes not answered within 60 s ({left} keys left)")
        time.sleep(0.001)
    steady = []
    for _ in range(steady_steps):
        clock = Clock()
        if step(tier, contexts, keys, clock):
            raise RuntimeError("a key became unanswered")
        steady.append(clock.spent)
    for ctx in contexts:
        tier.on_request_finished(ctx)
    settle = time.monotonic() + 10
    while tier.has_pending_work() and time.monotonic() < settle:
        list(tier.get_finished_jobs())
        time.sleep(0.001)
    rest = []
    for _ in range(rest_steps):
        clock = Clock()
        step(tier, (), (), clock)
        rest.append(clock.spent)
    return {"probing_steps": len(probing), "probing_ms_per_step": statistics.median(probing) * 1e3,
            "probing_us_per_key": statistics.median(probing) * 1e6 / (REQUESTS * KEYS),
            "steady_ms_per_step": statistics.median(steady) * 1e3,
            "steady_us_per_key": statistics.median(steady) * 1e6 / (REQUESTS * KEYS),
            "rest_us_per_step": statistics.median(rest) * 1e6}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steady-steps", type=int, default=20)
    parser.add_argument("--rest-steps", type=int, default=2000)
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args()
    if args.runs < 1 or args.steady_steps < 1 or args.rest_steps < 1:
        parser.error("--runs, --steady-steps and --rest-steps must be at least 1")
    os.environ.pop("PYTHONHASHSEED", None)
    workdir = tempfile.mkdtemp(prefix="kvpeer-bench-tier-")
    daemons, regions, engines = [], [], []
    try:
        a_daemon = Daemon(workdir, "bench-a").start()
        daemons.append(a_daemon)
        b_daemon = Daemon(workdir, "bench-b").start()
        daemons.append(b_daemon)
        a = engine(a_daemon, "a", KEYS, regions)
        engines.append(a)
        b = engine(b_daemon, "b", 64, regions)
        engines.append(b)
        keys = make_keys("bench-prefix", KEYS)
        ctx = a.new_request("a-0")
        a.store(keys, ctx, lambda key: block_content(key, ROW))
        a.finish_request(ctx)
        a.run_until(lambda: a.tier.published_blocks == KEYS and not a.jobs, what="A's blocks published")
        runs = [one_run(a_daemon, b, keys, run, args.steady_steps, args.rest_steps) for run in range(args.runs)]
    finally:
        for e in engines:
            try:
                e.shutdown()
            except Exception:  # noqa: BLE001 - best effort at the end of a bench
                pass
        for r in regions:
            r.close()
        for d in daemons:
            d.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    def summary(name):
        values = [r[name] for r in runs]
        return {"median": statistics.median(values), "min": min(values), "max": max(values)}

    result = {name: summary(name) for name in runs[0]}
    result["shape"] = {"requests": REQUESTS, "keys_per_request": KEYS, "runs": args.runs,
                       "steady_steps_per_run": args.steady_steps, "rest_steps_per_run": args.rest_steps}
    result["goals"] = {"steady_us_per_key": GOAL_US_PER_KEY, "rest_us_per_step": GOAL_US_AT_REST}
    if args.json:
        print(json.dumps(result))
        return
    print(f"kvpeer vLLM tier, Python time per scheduler step: {REQUESTS} requests x {KEYS} keys, "
          f"{args.runs} runs (median of each run; median [min-max] over runs)")
    rows = (("probing steps", "probing_steps", "", None),
            ("probing, per step", "probing_ms_per_step", "ms", None),
            ("probing, per key", "probing_us_per_key", "us", GOAL_US_PER_KEY),
            ("steady, per step", "steady_ms_per_step", "ms", None),
            ("steady, per key", "steady_us_per_key", "us", GOAL_US_PER_KEY),
            ("at rest, per step", "rest_us_per_step", "us", GOAL_US_AT_REST))
    for label, name, unit, goal in rows:
        s = result[name]
        verdict = ""
        if goal is not None:
            verdict = f"  goal <= {goal:g} {unit}: " + ("met" if s["median"] <= goal else "MISSED")
        print(f"  {label:20s} {s['median']:9.3f} {unit:2s} [{s['min']:.3f}-{s['max']:.3f}]{verdict}")


if __name__ == "__main__":
    main()
