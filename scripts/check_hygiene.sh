#!/usr/bin/env bash
# The hygiene gates of issue 26, item 8, in one command (scripts/test.sh runs
# it first, before anything is built):
#   * C++ formatted by the checked-in .clang-format (scripts/check_format.sh),
#   * no C++ or Python file over 600 lines (scripts/check_sizes.sh),
#   * Python clean under flake8 (.flake8),
#   * no function body over 80 lines in daemon/, session/, protocol/, config/
#     (clang-tidy's readability-function-size, scripts/check_tidy.sh).
# Needs a configured build directory for clang-tidy (default: build).
#
#   scripts/check_hygiene.sh [BUILD_DIR]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
build_dir=${1:-build}
failed=()
scripts/check_format.sh || failed+=(clang-format)
scripts/check_sizes.sh || failed+=(file-size)
command -v flake8 >/dev/null || { echo "check_hygiene.sh: flake8 is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
if flake8; then echo "check_hygiene.sh: flake8 finds nothing"; else failed+=(flake8); fi
scripts/check_tidy.sh "$build_dir" || failed+=(clang-tidy)
if [ ${#failed[@]} -gt 0 ]; then
  echo "check_hygiene.sh: failed: ${failed[*]}" >&2
  exit 1
fi
