#!/usr/bin/env bash
# Builds the libFuzzer targets and runs each one for a bounded time.
#
#   scripts/fuzz.sh [SECONDS per target, default 60]
#   scripts/fuzz.sh --total SECONDS   # one wall-clock budget shared by all targets
#
# KVPEER_FUZZ_JOBS targets run at a time (default 2, one per core of CI);
# with --total each target gets SECONDS / ceil(targets / jobs).
#
# Target fuzz_NAME starts from a temporary copy of fuzz/corpus/NAME, so a run
# never adds files to the repository. fuzz/fuzz_NAME.dict, when present, is
# its dictionary, and fuzz/fuzz_NAME.options its extra libFuzzer flags (one
# per line, # comments). Logs go to BUILD/fuzz-logs/, crash
# reproducers to BUILD/fuzz-artifacts/NAME/ (BUILD is build-fuzz, or
# $KVPEER_FUZZ_BUILD_DIR). Prints each target's executions and their sum.
# Exits non-zero if any target crashed, leaked, timed out or ran out of memory.
set -euo pipefail

usage() {
  echo "usage: scripts/fuzz.sh [SECONDS per target] | --total SECONDS" >&2
  exit 2
}
seconds=60
total=
case "${1:-}" in
  "") ;;
  --total) total=${2:-}; [[ "$total" =~ ^[1-9][0-9]*$ ]] || usage ;;
  *) seconds=$1 ;;
esac
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || usage
jobs=${KVPEER_FUZZ_JOBS:-2}
[[ "$jobs" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: KVPEER_FUZZ_JOBS must be a positive integer" >&2; exit 2; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${KVPEER_FUZZ_BUILD_DIR:-$root/build-fuzz}
"$root/scripts/setup.sh" --build-dir "$build_dir" --fuzz

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$build_dir/fuzz-logs"

targets=()
for bin in "$build_dir"/fuzz/fuzz_*; do
  [ -f "$bin" ] && [ -x "$bin" ] && targets+=("$bin")
done
if [ ${#targets[@]} -eq 0 ]; then
  echo "fuzz.sh: no fuzz_* targets in $build_dir/fuzz" >&2
  exit 1
fi
if [ -n "$total" ]; then
  rounds=$(( (${#targets[@]} + jobs - 1) / jobs ))
  seconds=$(( total / rounds > 0 ? total / rounds : 1 ))
fi

# Runs one target; its outcome goes to $work/NAME.rc and its log.
run_target() {
  local bin=$1 name corpus seeds artifacts log rc=0
  name=$(basename "$bin")
  corpus="$work/$name"
  mkdir -p "$corpus"
  seeds="$root/fuzz/corpus/${name#fuzz_}"
  if [ -d "$seeds" ]; then cp -R "$seeds/." "$corpus/"; fi
  artifacts="$build_dir/fuzz-artifacts/$name"
  mkdir -p "$artifacts"
  log="$build_dir/fuzz-logs/$name.log"
  local extra=()
  if [ -f "$root/fuzz/$name.dict" ]; then extra+=("-dict=$root/fuzz/$name.dict"); fi
  if [ -f "$root/fuzz/$name.options" ]; then
    while read -r flag _; do
      [[ -z "$flag" || "$flag" == \#* ]] || extra+=("$flag")
    done <"$root/fuzz/$name.options"
  fi
  "$bin" -max_total_time="$seconds" -rss_limit_mb=4096 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "${extra[@]}" "$corpus" >"$log" 2>&1 || rc=$?
  echo "$rc" >"$work/$name.rc"
}

echo "fuzz.sh: ${#targets[@]} targets, ${seconds}s each, $jobs at a time"
for bin in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n || true; done
  echo "fuzz.sh: $(basename "$bin") for ${seconds}s"
  run_target "$bin" &
done
wait

failed=0
sum=0
for bin in "${targets[@]}"; do
  name=$(basename "$bin")
  log="$build_dir/fuzz-logs/$name.log"
  rc=$(cat "$work/$name.rc" 2>/dev/null || echo 1)
  execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
  sum=$(( sum + ${execs:-0} ))
  if [ "$rc" -eq 0 ]; then
    echo "fuzz.sh: $name: ${execs:-?} executions, no crash"
  else
    echo "fuzz.sh: $name: FAILED (exit $rc) after ${execs:-?} executions; log $log, reproducers in $build_dir/fuzz-artifacts/$name/" >&2
    tail -n 40 "$log" >&2
    failed=1
  fi
done
echo "fuzz.sh: $sum executions in total across ${#targets[@]} targets"
exit "$failed"
