#!/usr/bin/env bash
# Builds (once per machine) the Debian 12 root that the systemd-container
# hosts of tests/cluster boot with systemd-nspawn, and prints its path.
#
#   tests/cluster/make_root.sh [CACHE_DIR]   (default /var/cache/kvpeer-test)
#
# The root is made with debootstrap in a temporary directory beside the
# cache and renamed into place only when complete, so a crashed or
# concurrent run never leaves a half-made root behind under the final name.
# Its packages: systemd and dbus (to boot), python3 (the engine inside the
# container uses the stdlib Python client) and kvpeerd's shared libraries,
# so that `apt-get install ./kvpeer_*.deb` inside the container needs no
# network. Bump ROOT_VERSION when the package list changes.
set -euo pipefail

cache=${1:-/var/cache/kvpeer-test}
ROOT_VERSION=1
root="$cache/bookworm-v$ROOT_VERSION"
if [ -f "$root/.kvpeer-root-complete" ]; then
  echo "$root"
  exit 0
fi
command -v debootstrap >/dev/null || { echo "make_root.sh: debootstrap is not installed" >&2; exit 3; }
mkdir -p "$cache"
# Partial roots of crashed runs (older than an hour: a concurrent run may be making one).
find "$cache" -maxdepth 1 -name 'tmp-root.*' -mmin +60 -exec rm -rf {} + 2>/dev/null || true
tmp=$(mktemp -d "$cache/tmp-root.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
include=systemd,systemd-sysv,dbus,python3,libboost-json1.81.0,libspdlog1.10,libfmt9,libsystemd0,libxxhash0,libssl3,procps
debootstrap --variant=minbase --include="$include" bookworm "$tmp/root" >"$tmp/debootstrap.log" 2>&1 || {
  tail -30 "$tmp/debootstrap.log" >&2
  echo "make_root.sh: debootstrap failed" >&2
  exit 1
}
# No getty on the console, a fixed hostname; apt never reaches out from tests.
rm -f "$tmp/root/etc/systemd/system/getty.target.wants/"* 2>/dev/null || true
ln -sf /dev/null "$tmp/root/etc/systemd/system/console-getty.service"
ln -sf /dev/null "$tmp/root/etc/systemd/system/systemd-networkd-wait-online.service"
ln -sf /dev/null "$tmp/root/etc/systemd/system/apt-daily.timer"
ln -sf /dev/null "$tmp/root/etc/systemd/system/apt-daily-upgrade.timer"
apt-get -o RootDir="$tmp/root" clean 2>/dev/null || rm -rf "$tmp/root/var/cache/apt/archives/"*.deb
touch "$tmp/root/.kvpeer-root-complete"
if mv -T "$tmp/root" "$root" 2>/dev/null; then
  :
elif [ -f "$root/.kvpeer-root-complete" ]; then
  :  # another run finished first; ours is dropped with $tmp
else
  echo "make_root.sh: could not move the root into $root" >&2
  exit 1
fi
echo "$root"
