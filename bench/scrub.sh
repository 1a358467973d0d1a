#!/usr/bin/env bash
# Scrub benchmark (not a timed test): how close does a scrub come to the
# sequential read speed of the disks it reads?
#
# Target (issue 5): the scrub of a pool filled with 1 MiB records runs at
# ≥ 80 % of the raw sequential read bandwidth of its backing files,
# measured in the same run; zfs-fuse's scrub of the same data beside it.
#
# For each stack, in one dataset POOL/data (recordsize=1M — zfs-fuse, pool
# v23: 128K —, compression off):
#   fill   fio rw=write bs=1M size=SIZE end_fsync=1 (random data)
#   cold   export/import + drop caches
#   raw    the data extents of both backing files (SEEK_DATA/SEEK_HOLE)
#          read O_DIRECT in 4 MiB reads, two readers per file, both files
#          at once: MB/s
#   scrub  zpool scrub, waited for: MB/s = bytes read from the devices
#          (2 × SIZE: both mirror sides of the file's data; metadata is
#          not counted) ÷ wall time
# Table on stdout: raw MB/s, scrub MB/s, scrub ÷ raw.
#
#   tarn      mirror of two sparse files, real target/release/tarn daemon
#             (private TARN_RUN_DIR / TARN_SOCKET / TARN_CACHEFILE /
#             TARN_MOUNT_ROOT), FUSE mount
#   zfs-fuse  the real ZFS in user space (pool v23), mirror of two files
#
# Usage (as root):
#   bench/scrub.sh [--size SIZE] [--only STACK[,STACK]] [WORKDIR]
#
#   --size     data written before the scrub (fio syntax, default 2G)
#   --only     tarn or zfs-fuse (repeatable or comma-separated)
#   WORKDIR    where the backing files go (default /var/tmp); the script
#              works in a fresh subdirectory and removes it at the end
#   TARN=PATH  env: use this tarn binary instead of building one
#
# Every pool, mount, daemon and file the script creates is removed on exit,
# also on failure or Ctrl-C.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"

SIZE=2G
RECORDSIZE=1M
STACKS=(tarn zfs-fuse)
script_option() { return 0; }
parse_args "$@"
check_setup "mount, drop_caches"
need_whole_mib
dev_bytes=$(( size_bytes + 2 * 1024 * 1024 * 1024 ))
FIO_ENV=(SIZE="$size_bytes")

TPOOL=tarnscrub$$
ZPOOL=zfsscrub$$
DS=data
TDS=$TPOOL/$DS
ZDS=$ZPOOL/$DS
make_work tarn-scrub

fiodir=$work/fio
mkdir -p "$fiodir"
fill_job

# raw_read DIR: the data extents of every file in DIR, O_DIRECT, 4 MiB
# reads, two threads per file → "MB/s bytes".
raw_read() {
    python3 - "$1" <<'EOF'
import mmap, os, sys, threading, time
# Each file's data extents in 4 MiB reads, READERS threads per file taking
# chunks in turn (queue depth READERS per file, as a scrub keeps several
# reads in flight).
CHUNK, READERS = 4 << 20, 2
files = [os.path.join(sys.argv[1], f) for f in sorted(os.listdir(sys.argv[1]))]
def chunks(path):
    fd = os.open(path, os.O_RDONLY)
    end, at, out = os.lseek(fd, 0, os.SEEK_END), 0, []
    while at < end:
        try:
            at = os.lseek(fd, at, os.SEEK_DATA)
        except OSError:
            break
        stop = os.lseek(fd, at, os.SEEK_HOLE)
        at -= at % CHUNK
        while at < stop:
            out.append(at)
            at += CHUNK
    os.close(fd)
    return out
total = []
def read(path, offsets):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    buf, n = mmap.mmap(-1, CHUNK), 0
    for at in offsets:
        n += max(os.preadv(fd, [buf], at), 0)
    os.close(fd)
    total.append(n)
work = [(p, c[i::READERS]) for p in files for c in [chunks(p)] for i in range(READERS)]
t0 = time.monotonic()
ts = [threading.Thread(target=read, args=w) for w in work]
for t in ts: t.start()
for t in ts: t.join()
dt = time.monotonic() - t0
print(f"{sum(total) / dt / 1e6:.1f} {sum(total)}")
EOF
}

# scrub_time STACK CMD...: wall time of CMD (a scrub that waits until
# the scrub is done) → R=seconds.
scrub_time() {
    local s=$1 t0 t1 i
    shift
    t0=$(date +%s.%N)
    "$@" || { log "$s: scrub failed"; return 1; }
    t1=$(date +%s.%N)
    R=$(python3 -c "print(f'{$t1 - $t0:.3f}')")
}
zfs_scrub_wait() {
    zpool scrub "$ZPOOL" || return 1
    local i
    for i in $(seq 36000); do
        zpool status "$ZPOOL" | grep -q "scrub in progress" || return 0
        sleep 0.1
    done
    return 1
}

run_set() {
    local s=$1 cold=$2 vdevs raw secs
    vdevs=$work/zfs/vdevs
    [ "$s" = tarn ] && vdevs=$work/tarn/vdevs
    log "$s: fill: fio write 1 MiB of $SIZE"
    run_fio "$s" fill data || return 1
    put "$s" fill "${R%% *}"
    $cold || { log "$s: cold cycle failed"; return 1; }
    log "$s: raw sequential read of the backing files' data"
    drop_caches
    raw=$(raw_read "$vdevs") || return 1
    put "$s" raw "${raw%% *}"
    put "$s" raw_bytes "${raw##* }"
    drop_caches
    log "$s: scrub"
    if [ "$s" = tarn ]; then
        scrub_time "$s" "$TARN_BIN" zpool scrub -w "$TPOOL" || return 1
    else
        scrub_time "$s" zfs_scrub_wait || return 1
    fi
    secs=$R
    put "$s" scrub_secs "$secs"
    put "$s" scrub "$(python3 -c "print(f'{2 * $size_bytes / $secs / 1e6:.1f}')")"
    if [ "$s" = tarn ]; then
        put "$s" scan "$("$TARN_BIN" zpool status "$TPOOL" | grep 'scan:' | sed 's/^ *//')"
    else
        put "$s" scan "$(zpool status "$ZPOOL" | grep -A1 'scrub:\|scan:' | tr '\n' ' ' | sed 's/  */ /g')"
    fi
}

setup_dataset() { setup_rs_dataset "$1"; }

log "work dir $work; $SIZE of data, recordsize $RECORDSIZE, stacks: ${STACKS[*]}"
run_stacks

table "$results" "$SIZE" "$(uname -r)" <<'EOF'
res, size, kernel = sys.argv[1:4]
stacks = ["tarn", "zfs-fuse"]
TARGET = 0.8

def fmt(v):
    return "n/a" if not isinstance(v, float) else (f"{v:.1f}" if v < 100 else f"{v:,.0f}")

print(f"kernel {kernel}; {size} written with fio (1 MiB sequential writes, random data) "
      "into a dataset with recordsize 1M (zfs-fuse: see notes), compression off; "
      "each stack a mirror of two sparse files on the same disk. raw = the data extents of "
      "both backing files read O_DIRECT, 4 MiB reads, two readers per file, both files at once. scrub MB/s = 2 × data "
      "(both mirror sides) ÷ wall time of the scrub, cold. MB/s = 10^6 bytes/s.\n")
print("| stack | fill MB/s | raw read MB/s | scrub MB/s | scrub time s | scrub ÷ raw |")
print("|---|---:|---:|---:|---:|---:|")
for s in stacks:
    raw, scrub = get(s, "raw"), get(s, "scrub")
    r = scrub / raw if isinstance(raw, float) and isinstance(scrub, float) and raw else None
    rr = "n/a" if r is None else f"**{r:.2f}**"
    print(f"| {s} | {fmt(get(s, 'fill'))} | {fmt(raw)} | {fmt(scrub)} | {fmt(get(s, 'scrub_secs'))} | {rr} |")
t, z = get("tarn", "scrub"), get("zfs-fuse", "scrub")
print()
if isinstance(t, float) and isinstance(z, float) and z:
    print(f"- tarn scrub ÷ zfs-fuse scrub: {t / z:.2f}×")
raw, scrub = get("tarn", "raw"), get("tarn", "scrub")
if isinstance(raw, float) and isinstance(scrub, float) and raw:
    r = scrub / raw
    verdict = "met" if r >= TARGET else "**not met**"
    print(f"- target (tarn scrub ≥ {TARGET} × raw read): {verdict} ({r:.2f})")
print()
print("Notes:")
for s in stacks:
    scan, why, note = get(s, "scan"), get(s, "reason"), get(s, "note")
    line = f"- {s}: " + (scan if isinstance(scan, str) else "not run")
    if isinstance(note, str):
        line += f"; {note}"
    if isinstance(why, str):
        line += f" — n/a: {why}"
    print(line)
EOF
