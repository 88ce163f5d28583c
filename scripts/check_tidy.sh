#!/usr/bin/env bash
# Runs clang-tidy with the checked-in .clang-tidy (function bodies of at most
# 80 lines) over the C++ sources of daemon/, session/, protocol/ and config/
# (issue 26, item 8). Needs a configured build directory for its
# compile_commands.json.
#
#   scripts/check_tidy.sh [BUILD_DIR]     # default: build
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_dir=${1:-build}
command -v clang-tidy >/dev/null || { echo "check_tidy.sh: clang-tidy is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
[ -f "$build_dir/compile_commands.json" ] || { echo "check_tidy.sh: $build_dir/compile_commands.json is missing (configure the build first)" >&2; exit 1; }
mapfile -t files < <(git ls-files 'daemon/*.cc' 'session/*.cc' 'protocol/*.cc' 'config/*.cc')
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Two at a time: CI has two cores. --quiet keeps the per-file summaries out.
if ! printf '%s\n' "${files[@]}" | xargs -P2 -n4 clang-tidy --quiet --extra-arg=-Wno-unknown-warning-option -p "$build_dir" >"$log" 2>&1; then
  grep -E 'warning:|error:' "$log" | sort -u >&2 || cat "$log" >&2
  echo "check_tidy.sh: clang-tidy found problems (above)" >&2
  exit 1
fi
echo "check_tidy.sh: ${#files[@]} files pass .clang-tidy"
