#!/usr/bin/env bash
# Static checks of the systemd units (systemd/kvpeerd.service and
# systemd/kvpeerd@.service):
#   1. `systemd-analyze verify` on each unit: any output is a failure;
#   2. `systemd-analyze security --offline=yes`: exposure at most 2.0 each;
#   3. the two units' settings are the same apart from Description, ExecStart
#      and comments (one hardening, two units);
#   4. the sysusers.d file creates the user and groups the units run as
#      (the supplementary ones with the user as a member).
#
#   scripts/systemd-check.sh [BUILD_DIR]
#
# The units are checked as installed, in a temporary root that also holds
# this machine's own units (verify resolves sysinit.target & co. there).
# With BUILD_DIR (a built tree), the root is `cmake --install BUILD_DIR
# --prefix /usr`, so verify also proves that ExecStart names the installed
# kvpeerd. Without it (scripts/test.sh, before anything is built), the units
# are copied to where packaging/install.cmake puts them and an empty
# executable stands in for each ExecStart binary; tests/install checks that
# path against the real install.
set -euo pipefail

root_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-}
max_exposure=2.0
units=(kvpeerd.service kvpeerd@.service)

echo "== systemd units (verify, security --offline, exposure <= $max_exposure)"
for tool in systemd-analyze systemd-sysusers; do
  command -v "$tool" >/dev/null || { echo "systemd-check: $tool not found (Debian package systemd)" >&2; exit 1; }
done

tmp=$(mktemp -d /tmp/kvpeer-systemd-check.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
sysroot=$tmp/root
unit_dir=$sysroot/usr/lib/systemd/system
mkdir -p "$unit_dir"

if [ -n "$build" ]; then
  if ! DESTDIR=$sysroot cmake --install "$build" --prefix /usr >"$tmp/install.log" 2>&1; then
    cat "$tmp/install.log" >&2
    echo "systemd-check: cmake --install $build failed" >&2
    exit 1
  fi
else
  for unit in "${units[@]}"; do
    install -m 0644 "$root_dir/systemd/$unit" "$unit_dir/$unit"
    exec_path=$(sed -n 's/^ExecStart=\([^ ]*\).*/\1/p' "$unit_dir/$unit")
    mkdir -p "$sysroot$(dirname "$exec_path")"
    install -m 0755 /dev/null "$sysroot$exec_path"
  done
  mkdir -p "$sysroot/usr/lib/sysusers.d"
  install -m 0644 "$root_dir/systemd/kvpeer.sysusers.conf" "$sysroot/usr/lib/sysusers.d/kvpeer.conf"
fi
# ExecReload's /bin/kill is the system's (procps), not ours: the root gets
# the machine's, as a Debian system has it.
mkdir -p "$sysroot/bin"
install -m 0755 /bin/kill "$sysroot/bin/kill"
# The machine's units (targets the ours depend on), never replacing ours.
for dir in /usr/lib/systemd/system /lib/systemd/system; do
  if [ -d "$dir" ]; then cp -rn "$dir/." "$unit_dir/"; fi
done

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

for unit in "${units[@]}"; do
  path=$unit_dir/$unit
  [ -f "$path" ] || { fail "$unit is not installed under /usr/lib/systemd/system"; continue; }

  # 1. verify: silence is the only pass (unknown keys are warnings, exit 0).
  output=$(cd "$tmp" && systemd-analyze verify --root="$sysroot" "$path" 2>&1) || true
  if [ -n "$output" ]; then
    fail "systemd-analyze verify $unit:"
    printf '%s\n' "$output" >&2
  fi

  # 2. security: the overall exposure, 0.0 (best) .. 10.0.
  report=$(cd "$tmp" && systemd-analyze security --offline=yes --root="$sysroot" "$path" 2>&1) || true
  exposure=$(printf '%s\n' "$report" | sed -n 's/.*Overall exposure level for [^ ]*: \([0-9][0-9.]*\) .*/\1/p')
  if [ -z "$exposure" ]; then
    fail "systemd-analyze security $unit: no exposure level in its output:"
    printf '%s\n' "$report" >&2
  elif awk -v e="$exposure" -v max="$max_exposure" 'BEGIN { exit !(e > max) }'; then
    fail "$unit: exposure $exposure > $max_exposure; the items at fault:"
    printf '%s\n' "$report" | grep '✗' >&2
  else
    echo "$unit: verify clean, exposure $exposure"
  fi
done

# 3. One hardening for both units.
settings() { grep -v -e '^#' -e '^$' -e '^Description=' -e '^ExecStart=' "$root_dir/systemd/$1"; }
if ! diff <(settings kvpeerd.service) <(settings kvpeerd@.service) >"$tmp/units.diff"; then
  fail "kvpeerd.service and kvpeerd@.service differ beyond Description and ExecStart:"
  cat "$tmp/units.diff" >&2
fi

# 4. The user and group the units name exist after sysusers.d runs.
mkdir -p "$sysroot/etc"
if ! systemd-sysusers --root="$sysroot" "$sysroot/usr/lib/sysusers.d/kvpeer.conf" >"$tmp/sysusers.log" 2>&1; then
  fail "systemd-sysusers kvpeer.conf failed: $(cat "$tmp/sysusers.log")"
fi
for unit in "${units[@]}"; do
  user=$(sed -n 's/^User=//p' "$root_dir/systemd/$unit")
  group=$(sed -n 's/^Group=//p' "$root_dir/systemd/$unit")
  grep -q "^$user:" "$sysroot/etc/passwd" 2>/dev/null || fail "$unit: User=$user is not created by kvpeer.sysusers.conf"
  grep -q "^$group:" "$sysroot/etc/group" 2>/dev/null || fail "$unit: Group=$group is not created by kvpeer.sysusers.conf"
  for extra in $(sed -n 's/^SupplementaryGroups=//p' "$root_dir/systemd/$unit"); do
    grep -q "^$extra:.*\b$user\b" "$sysroot/etc/group" 2>/dev/null ||
      fail "$unit: SupplementaryGroups=$extra is not created with member $user by kvpeer.sysusers.conf"
  done
done

if [ "$failures" -ne 0 ]; then
  echo "systemd-check: $failures failure(s)" >&2
  exit 1
fi
echo "systemd-check: OK"
