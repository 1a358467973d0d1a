#!/usr/bin/env bash
# Request-path scaling benchmark (not a timed test; issue 48): does a
# dataset serve more requests with more threads?
#
#   1. in process, no FUSE: `tarn-bench threads` (reads of one shared
#      cached file, writes and write+fsync of a file per thread, 1, 2, 4
#      and 8 threads, with the lock wait per request and the CPUs busy);
#   2. through a FUSE mount: O_DIRECT 4 KiB random reads of one shared,
#      cached 256 MiB file and random writes of a 256 MiB file per thread
#      (bench/c/iobench.c, as ../shared/devcheck/io-scaling.sh), at
#      recordsize=4K and 128K, for each thread count, beside the same on
#      the file system holding the pool's files.
#
# The targets: 2 threads never fewer IOPS than 1 (≥ 0.95×); in process,
# 2 threads' reads ≥ 1.8× one thread's with lock wait under 5 %; on 16
# CPUs reads at 16 threads ≥ 8× one thread.
#
# Usage (as root):
#   bench/scaling.sh [--threads "1 2 4"] [--secs S] [WORKDIR]
#
#   --threads  thread counts (default: 1 2, and nproc when larger)
#   --secs     seconds per row (default 5)
#   WORKDIR    where the pool's files go (default /var/tmp)
#   TARN=PATH  env: use this tarn binary instead of building one
#
# The pool, mount, daemon and files are removed on exit.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
threads="1 2"; [ "$(nproc)" -gt 2 ] && threads="1 2 $(nproc)"
secs=5; dir=/var/tmp
while [ $# -gt 0 ]; do
    case $1 in
        --threads) threads=$2; shift 2 ;;
        --secs) secs=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) dir=$1; shift ;;
    esac
done
[ "$(id -u)" = 0 ] || { echo "scaling.sh: run as root (FUSE mounts)" >&2; exit 2; }
work=$(mktemp -d "$dir/tarn-scaling.XXXXXX")
bin=${TARN:-}
if [ -z "$bin" ]; then
    (cd "$repo" && cargo build --release -p tarn -p tarn-bench >&2) || exit 1
    bin=$repo/target/release/tarn
fi
gcc -O2 -pthread -o "$work/iobench" "$here/c/iobench.c" || exit 1
export TARN_RUN_DIR=$work/run TARN_SOCKET=$work/run/tarn.sock
export TARN_CACHEFILE=$work/tarn.cache TARN_MOUNT_ROOT=$work/root
mkdir -p "$work/root" "$work/raw" && mkdir -m 0700 "$work/run"
pid=
cleanup() {
    "$bin" zpool destroy -f scaling >/dev/null 2>&1
    [ -n "$pid" ] && { kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }
    rm -rf --one-file-system "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "## $(date -u +%F) · $(nproc) CPUs · $(uname -r) · $("$bin" --version | head -1)"
echo
echo "### In process (tarn-bench threads)"
echo
"$repo/target/release/tarn-bench" threads --dir "$work/bench" 2>&1 | tail -n +3
rm -rf "$work/bench"

setsid "$bin" daemon --foreground >"$work/daemon.out" 2>&1 &
pid=$!
for _ in $(seq 100); do [ -S "$TARN_SOCKET" ] && break; sleep 0.1; done
truncate -s 8G "$work/a.img" "$work/b.img"
"$bin" zpool create -o ashift=12 scaling mirror "$work/a.img" "$work/b.img" || exit 1
io() { IOB_DIRECT=1 IOB_MB=256 "$work/iobench" "$@" | sed -n 's/.*iops=//p'; }
echo
echo "### Through FUSE, 4 KiB O_DIRECT (iobench), IOPS"
echo
echo "| request | recordsize | threads | tarn | × 1 thread | disk beneath | × 1 thread |"
echo "|---|---|---:|---:|---:|---:|---:|"
IOB_MB=256 "$work/iobench" "$work/raw" randread 1 1 4096 >/dev/null
for rs in 4K 128K; do
    "$bin" zfs create -o recordsize=$rs scaling/rs$rs || exit 1
    mnt=$work/root/scaling/rs$rs
    for _ in $(seq 50); do mountpoint -q "$mnt" && break; sleep 0.1; done
    io "$mnt" randread 2 3 4096 >/dev/null   # make the file, warm the cache
    for m in randread randwrite; do
        t1=; d1=
        for j in $threads; do
            t=$(io "$mnt" $m $j "$secs" 4096); d=$(io "$work/raw" $m $j "$secs" 4096)
            t1=${t1:-$t}; d1=${d1:-$d}
            printf '| %s | %s | %s | %s | %.2f | %s | %.2f |\n' $m $rs $j "$t" \
                "$(echo "$t / $t1" | bc -l)" "$d" "$(echo "$d / $d1" | bc -l)"
        done
    done
done
echo
echo "daemon: $(grep -E 'VmRSS|Threads' /proc/$pid/status | tr -s '\t ' ' ' | tr '\n' ' ')"
