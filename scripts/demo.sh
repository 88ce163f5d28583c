#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the two-node demo.
#
# Two kvpeerd daemons on 127.0.0.1 (port 0: the kernel picks free ports),
# control sockets in a temp dir. Engine A publishes 256 blocks of 1 MiB on
# node A; engine B probes node A, loads them in batches, verifies every byte
# and prints the throughput, then both nodes' `kvpeerctl status` while the
# engines are attached (clients/python/demo.py). Finally a clean stop:
# SIGTERM, each daemon must exit 0.
#
#   scripts/demo.sh            # DEMO_BLOCKS=256 DEMO_BLOCK_LEN=1048576 by default
#   DEMO_REGION_DIR=/mnt/huge scripts/demo.sh   # both regions as files there (e.g. a tmpfs
#                                               # mounted huge=always: docs/performance.md)
#
# It moves the blocks twice: cold (engine B's region never written, both
# daemons' mappings untouched) and warm (the same slots again), and prints both.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh" --build-dir "$root/build"

kvpeerd="$root/build/daemon/kvpeerd"
kvpeerctl="$root/build/cli/kvpeerctl"
blocks=${DEMO_BLOCKS:-256}
block_len=${DEMO_BLOCK_LEN:-1048576}
model=(--block-len "$block_len" --config-fingerprint kvpeer-demo-model --hash-seed kvpeer-demo-seed)

work=$(mktemp -d /tmp/kvpeer-demo.XXXXXX)
declare -A pids=()

show_logs() {
  for name in "${!pids[@]}"; do
    echo "---- $name log (last 40 lines) ----" >&2
    tail -n 40 "$work/$name.log" >&2 || true
  done
}

cleanup() {
  local status=$?
  for name in "${!pids[@]}"; do
    kill -TERM "${pids[$name]}" 2>/dev/null || true
  done
  for name in "${!pids[@]}"; do
    wait "${pids[$name]}" 2>/dev/null || true
  done
  [ "$status" -eq 0 ] || show_logs
  rm -rf "$work"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start_node NAME: starts a daemon and waits until its control socket answers.
start_node() {
  local name=$1 sock="$work/$1.sock"
  "$kvpeerd" --listen 127.0.0.1:0 --socket "$sock" "${model[@]}" >"$work/$name.log" 2>&1 &
  pids[$name]=$!
  for _ in $(seq 1 200); do
    if "$kvpeerctl" --socket "$sock" --json status >/dev/null 2>&1; then
      return 0
    fi
    if ! kill -0 "${pids[$name]}" 2>/dev/null; then
      echo "demo: $name exited before it was ready" >&2
      return 1
    fi
    sleep 0.05
  done
  echo "demo: $name did not answer on $sock within 10 s" >&2
  return 1
}

# stop_node NAME: SIGTERM, wait, and require exit status 0.
stop_node() {
  local name=$1 pid=${pids[$1]} rc=0
  kill -TERM "$pid"
  wait "$pid" || rc=$?
  unset "pids[$name]"
  if [ "$rc" -ne 0 ]; then
    echo "demo: $name exited with status $rc after SIGTERM" >&2
    tail -n 40 "$work/$name.log" >&2 || true
    return 1
  fi
  echo "$name stopped cleanly (exit 0)"
}

start_node node-a
start_node node-b
echo "== two nodes up (sockets in $work)"

PYTHONDONTWRITEBYTECODE=1 python3 "$root/clients/python/demo.py" --socket-a "$work/node-a.sock" --socket-b "$work/node-b.sock" \
  --blocks "$blocks" --block-len "$block_len" --fingerprint kvpeer-demo-model --hash-seed kvpeer-demo-seed \
  --kvpeerctl "$kvpeerctl" ${DEMO_REGION_DIR:+--region-dir "$DEMO_REGION_DIR"}
echo

stop_node node-b
stop_node node-a
echo "== demo done"
