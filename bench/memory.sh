#!/usr/bin/env bash
# Memory benchmark (not a timed test): resident memory of the tarn daemon
# holding an idle, imported 24-device pool, and how it changes after data
# is written — the foundation issue's target is < 100 MiB RSS idle.
#
#   bench/memory.sh [device-size]      (default 2G sparse files)
#
# Prints one markdown table. Uses a private daemon (TARN_RUN_DIR…) and
# cleans up after itself.
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-2G}
cargo build --release --bin tarn >/dev/null 2>&1
tarn=$PWD/target/release/tarn
work=$(mktemp -d /tmp/tarn-mem.XXXXXX)
export TARN_RUN_DIR=$work/run TARN_SOCKET=$work/run/tarn.sock TARN_CACHEFILE=$work/tarn.cache
cleanup() {
    "$tarn" zpool destroy -f mem >/dev/null 2>&1 || true
    pkill -f "$tarn daemon" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

rss_kib() {
    local pid
    pid=$(pgrep -f "$tarn daemon" | head -1)
    awk '/^VmRSS:/ {print $2}' "/proc/$pid/status"
}
row() { printf '| %s | %s | %.1f |\n' "$1" "$2" "$(echo "$3 / 1024" | bc -l)"; }

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

echo "| state | pool | daemon RSS MiB |"
echo "|---|---|---:|"
row "daemon started, no pool" "-" "$base"
row "after create (root dataset mounted)" "3 × raidz2-8 of $size files" "$created"
row "idle after export/import (1 mount)" "3 × raidz2-8 of $size files" "$idle"
row "idle after export/import (5 mounts)" "+ 4 datasets" "$idle5"
echo
echo "target: idle < 100 MiB"
