#!/usr/bin/env bash
# Memory benchmark (not a timed test): resident memory of the tarn daemon
# holding an idle, imported 24-device pool, and how it changes after data
# is written — the foundation issue's target is < 100 MiB RSS idle; then
# (issue 45) what comes back after a pool that wrote and read 2 GiB is
# exported (target ≤ 64 MiB), and what idle mounted datasets cost
# (1,000 of them: ≤ 1 GiB RSS, ≤ 300 threads, created at ≥ 50/s).
#
#   bench/memory.sh [device-size] [mounts]   (default 2G sparse files, 1000)
#
# Prints one markdown table. Uses a private daemon (TARN_RUN_DIR…) and
# cleans up after itself.
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-2G}
mounts=${2:-1000}
cargo build --release --bin tarn >/dev/null 2>&1
tarn=$PWD/target/release/tarn
work=$(mktemp -d /tmp/tarn-mem.XXXXXX)
export TARN_RUN_DIR=$work/run TARN_SOCKET=$work/run/tarn.sock TARN_CACHEFILE=$work/tarn.cache
export TARN_MOUNT_ROOT=$work/mnt
cleanup() {
    "$tarn" zpool destroy -f mem >/dev/null 2>&1 || true
    "$tarn" zpool destroy -f many >/dev/null 2>&1 || true
    pkill -f "$tarn daemon" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

rss_kib() {
    local pid
    pid=$(pgrep -f "$tarn daemon" | head -1)
    awk '/^VmRSS:/ {print $2}' "/proc/$pid/status"
}
threads() { ls "/proc/$(pgrep -f "$tarn daemon" | head -1)/task" | wc -l; }
row() { printf '| %s | %s | %.1f | %s |\n' "$1" "$2" "$(echo "$3 / 1024" | bc -l)" "${4:-}"; }

devs=()
for i in $(seq -w 1 24); do
    truncate -s "$size" "$work/d$i.img"
    devs+=("$work/d$i.img")
done
"$tarn" zpool list >/dev/null            # starts the daemon
base=$(rss_kib)
"$tarn" zpool create mem raidz2 "${devs[@]:0:8}" raidz2 "${devs[@]:8:8}" raidz2 "${devs[@]:16:8}"
created=$(rss_kib)
"$tarn" zpool export mem
"$tarn" zpool import -d "$work" mem
sleep 6                                     # one txg timeout: idle state
idle=$(rss_kib)
# Each mounted filesystem has its own FUSE session and worker threads.
for d in a b c d; do "$tarn" zfs create "mem/$d"; done
"$tarn" zpool export mem
"$tarn" zpool import -d "$work" mem
sleep 6
idle5=$(rss_kib)

# A pool that wrote and read 2 GiB, then exported: its caches go, and
# the memory goes back to the system.
"$tarn" zpool export mem
truncate -s 8G "$work/m1.img" "$work/m2.img"
"$tarn" zpool create many mirror "$work/m1.img" "$work/m2.img"
dd if=/dev/urandom of="$work/mnt/many/big" bs=1M count=2048 status=none
cat "$work/mnt/many/big" >/dev/null
busy=$(rss_kib)
"$tarn" zpool export many
sleep 1
exported=$(rss_kib); exported_threads=$(threads)
# Many idle mounted datasets.
"$tarn" zpool import -d "$work" many
rm -f "$work/mnt/many/big"
t0=$(date +%s.%N)
for i in $(seq 1 "$mounts"); do "$tarn" zfs create "many/d$i" || break; done
t1=$(date +%s.%N)
sleep 6
many=$(rss_kib); many_threads=$(threads)
rate=$(python3 -c "print(f'{$mounts / ($t1 - $t0):.0f}')")

echo "| state | pool | daemon RSS MiB | threads |"
echo "|---|---|---:|---:|"
row "daemon started, no pool" "-" "$base"
row "after create (root dataset mounted)" "3 × raidz2-8 of $size files" "$created"
row "idle after export/import (1 mount)" "3 × raidz2-8 of $size files" "$idle"
row "idle after export/import (5 mounts)" "+ 4 datasets" "$idle5"
row "after writing and reading 2 GiB" "+ a mirror of two 8G files" "$busy"
row "after exporting both pools" "none" "$exported" "$exported_threads"
row "$mounts idle mounted datasets (created at $rate/s)" "the mirror, re-imported" "$many" "$many_threads"
echo
echo "targets: idle < 100 MiB; after export ≤ 64 MiB; $mounts idle mounts ≤ 1 GiB and ≤ 300 threads, created at ≥ 50/s"
