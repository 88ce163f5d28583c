#!/usr/bin/env bash
# Checks that every C++ file git tracks is formatted by the checked-in
# .clang-format (issue 26, item 8). With --fix, formats them instead.
#
#   scripts/check_format.sh          # fails, listing the files that differ
#   scripts/check_format.sh --fix    # rewrites them in place
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
command -v clang-format >/dev/null || { echo "check_format.sh: clang-format is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.cc' '*.h')
if [ "${1:-}" = "--fix" ]; then
  clang-format -i "${files[@]}"
  exit 0
fi
bad=()
for f in "${files[@]}"; do
  if ! clang-format --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [ ${#bad[@]} -gt 0 ]; then
  echo "check_format.sh: ${#bad[@]} file(s) differ from .clang-format (run scripts/check_format.sh --fix):" >&2
  printf '  %s\n' "${bad[@]}" >&2
  exit 1
fi
echo "check_format.sh: ${#files[@]} C++ files match .clang-format"
