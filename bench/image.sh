#!/usr/bin/env bash
# VM-image benchmark (not a timed test): random 4 KiB buffered writes into
# a large sparse file, the way a VM disk image or a database file is used,
# through a real FUSE mount on a mirror of two sparse files.
#
#   bench/image.sh [--seconds N] [--image-size SIZE]   (defaults 10, 32G)
#   TARN=PATH bench/image.sh                            (use this binary)
#
# The file is made with `truncate` (as `qemu-img create -f raw` does), then
# written at random 4 KiB-aligned offsets for N seconds and fsynced once.
# Prints one markdown table: writes/s, the fsync, the daemon's peak
# resident memory, pool space used and what the backing files hold.
# What it watches for: dirty data that is not bounded by the daemon's
# dirty_data_max (memory far above it), and records stored in tiny blocks
# (space used far above the data written).
#
# Uses a private daemon (TARN_RUN_DIR, TARN_SOCKET, TARN_CACHEFILE,
# TARN_MOUNT_ROOT) and removes everything it made on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=10
image=32G
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) seconds=$2; shift 2 ;;
        --image-size) image=$2; shift 2 ;;
        *) echo "usage: bench/image.sh [--seconds N] [--image-size SIZE]" >&2; exit 2 ;;
    esac
done
[[ $seconds =~ ^[1-9][0-9]*$ ]] || { echo "bad --seconds $seconds: a whole number of seconds" >&2; exit 2; }
[[ $image =~ ^[1-9][0-9]*[KMGTkmgt]?$ ]] || { echo "bad --image-size $image: a size such as 32G or 4096M" >&2; exit 2; }
if [ -z "${TARN:-}" ]; then
    cargo build --release --bin tarn >/dev/null 2>&1
    TARN=$PWD/target/release/tarn
fi
work=$(mktemp -d /var/tmp/tarn-image.XXXXXX)
export TARN_RUN_DIR=$work/run TARN_SOCKET=$work/run/tarn.sock
export TARN_CACHEFILE=$work/tarn.cache TARN_MOUNT_ROOT=$work/root
daemon=
cleanup() {
    if [ -n "$daemon" ]; then
        timeout 120 "$TARN" zpool destroy -f img >/dev/null 2>&1 || true
        kill "$daemon" 2>/dev/null || true
        wait "$daemon" 2>/dev/null || true
    fi
    # A client run after the daemon stopped may have started another.
    pkill -f "daemon --foreground --socket $TARN_SOCKET" 2>/dev/null || true
    umount -l "$work/root/img" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/run" "$work/root"
setsid "$TARN" daemon --foreground --socket "$TARN_SOCKET" >"$work/daemon.out" 2>&1 &
daemon=$!
for _ in $(seq 100); do [ -S "$TARN_SOCKET" ] && break; sleep 0.1; done
truncate -s 48G "$work/a.img" "$work/b.img"
"$TARN" zpool create -o ashift=12 img mirror "$work/a.img" "$work/b.img"
mnt=$work/root/img
for _ in $(seq 100); do mountpoint -q "$mnt" && break; sleep 0.1; done
mountpoint -q "$mnt" || { echo "img not mounted at $mnt" >&2; tail -5 "$work/daemon.out" >&2; exit 1; }

read -r writes wps fsync_s peak < <(python3 - "$mnt/image" "$daemon" "$seconds" "$image" <<'EOF'
import os, random, sys, threading, time
path, pid, secs, size = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
size = int(size[:-1]) * units[size[-1].upper()] if size[-1].upper() in units else int(size)
peak, done = 0, False
def rss():
    with open(f"/proc/{pid}/status") as f:
        return next(int(l.split()[1]) for l in f if l.startswith("VmRSS:"))
def watch():
    global peak
    while not done:
        peak = max(peak, rss())
        time.sleep(0.1)
w = threading.Thread(target=watch)
w.start()
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(fd, size)
buf = os.urandom(4096)
rng = random.Random(1)
n, t0 = 0, time.monotonic()
while time.monotonic() - t0 < secs:
    os.pwrite(fd, buf, rng.randrange(size // 4096) * 4096)
    n += 1
t1 = time.monotonic()
os.fsync(fd)
t2 = time.monotonic()
os.close(fd)
done = True
w.join()
print(n, round(n / (t1 - t0)), round(t2 - t1, 1), peak // 1024)
EOF
)
used=$("$TARN" zfs get -H -o value used img)
held=$(du -h "$work/a.img" | cut -f1)

echo "| random 4 KiB writes into a $image sparse file, ${seconds} s | value |"
echo "|---|---:|"
echo "| writes | $writes ($wps/s) |"
echo "| fsync at the end | $fsync_s s |"
echo "| daemon peak RSS | $peak MiB |"
echo "| pool used (written: $(( writes * 4 / 1024 )) MiB at most) | $used |"
echo "| one mirror file holds | $held |"
