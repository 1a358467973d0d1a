#!/usr/bin/env bash
# Replication benchmark (not a timed test): `zfs send | zfs receive` of a
# dataset into a second pool, full and incremental, for tarn, zfs-fuse's
# own send/receive, and `rsync -a --delete` between two directories of
# the same disk (what an admin would use instead), in one run.
#
# Targets (issue 43):
#   - full send|receive ≥ 3 × zfs-fuse and ≥ rsync;
#   - incremental (1 % of the files changed) ≥ 10 × faster than rsync
#     (which must walk every file) and ≥ 3 × zfs-fuse;
#   - the stream's throughput (`zfs send > /dev/null`, cold) ≥ 50 % of the
#     disk's sequential read.
#
# For each stack:
#   fill         FILES files totalling SIZE (1,000 a directory) in the
#                source (tarn, zfs-fuse: POOL/src, compression off; rsync:
#                a directory), then sync and a pause for the txgs
#   full         tarn/zfs-fuse: snapshot @full, then the wall time of
#                `zfs send POOL/src@full | zfs receive POOL2/copy` (a
#                second pool, a mirror of two more sparse files on the same
#                disk); rsync: `rsync -a --delete src/ dst/`
#   stream       tarn/zfs-fuse: `zfs send POOL/src@full > /dev/null`
#                after dropping the page cache: stream bytes per second
#   change       1 % of the files (every 100th) rewritten whole, sync
#   incremental  tarn/zfs-fuse: snapshot @inc, `zfs send -i @full
#                POOL/src@inc | zfs receive POOL2/copy`; rsync again
#   disk         `dd` of the first source device file after dropping the
#                page cache: the disk's sequential read, for the stream row
# and, as the stack `disk`, the bounds of this disk (no file system):
#   floor/full   fio reading a SIZE file while two more jobs write SIZE
#                each (what a send | receive into a mirror on the same
#                disk must at least do), direct I/O 16 deep, fsync at end
#   floor/inc    two dd writing tarn's incremental stream size each,
#                conv=fsync (a mirror's writes of the changed data)
# Every copy is checked (`diff -r` of a sample of 200 files against the
# source) so a fast wrong answer cannot win.
# Table on stdout.
#
# Usage (as root):
#   bench/replication.sh [--size SIZE] [--files N] [--rounds N] [--only STACK] [WORKDIR]
#
#   --size    data of the fill (default 4G)
#   --files   files of the fill (default 50000)
#   --rounds  every stack this many times, in turn (default 1): the table
#             shows medians, the log every round
#   --only    tarn, zfs-fuse, rsync or disk (repeatable or comma-separated)
#   WORKDIR   where the backing files go (default /var/tmp)
#   TARN=PATH env: use this tarn binary instead of building one
#
# Every pool, mount, daemon and file the script creates is removed on exit,
# also on failure or Ctrl-C.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"

SIZE=4G
FILES=50000
ROUNDS=1
STACKS=(tarn zfs-fuse rsync disk)
script_option() {
    case "$1" in
        --files) FILES=$2; return 2 ;;
        --files=*) FILES=${1#*=}; return 1 ;;
        --rounds) ROUNDS=$2; return 2 ;;
        --rounds=*) ROUNDS=${1#*=}; return 1 ;;
    esac
    return 0
}
parse_args "$@"
check_setup "mount, drop_caches"
command -v rsync >/dev/null || { echo "missing rsync (apt-get install -y rsync)" >&2; exit 2; }
# Each mirror side holds the fill, with room for metadata and the change.
dev_bytes=$(( size_bytes + 2 * 1024 * 1024 * 1024 ))
check_space $(( 4 * dev_bytes ))

TPOOL=tarnrepl$$
ZPOOL=zfsrepl$$
TDS=$TPOOL/src
ZDS=$ZPOOL/src
make_work tarn-replication
fiodir=$here/fio
FIO_ENV=()
STOPS+=(rsync_stop)

mnt_of() {   # STACK DATASET → its mountpoint
    if [ "$1" = tarn ]; then tarn_mountpoint "$2"; else echo "$work/zfs/mnt${2#"$ZPOOL"}"; fi
}

# seconds CMD...: wall time of CMD (a shell string) → R (seconds).
seconds() {
    local t0 t1
    t0=$(date +%s%N)
    run_bg "$1" "$work/last.out" "$work/last.err" timeout -k 10 "$STEP_TIMEOUT" bash -c "$1" ||
        { log "failed: $1 — $(tail -3 "$work/last.err" | tr '\n' ' ')"; return 1; }
    t1=$(date +%s%N)
    R=$(( (t1 - t0) / 1000 ))e-6
}

settle() { sync; sleep 6; }


change() {   # DIR FILES: every 100th file rewritten whole with new bytes
    run_bg change /dev/null "$work/change.err" timeout -k 10 "$STEP_TIMEOUT" python3 - "$@" <<'EOF'
import os, sys
root, files = sys.argv[1], int(sys.argv[2])
for i in range(0, files, 100):
    p = os.path.join(root, f"d{i // 1000:04}", f"f{i % 1000:03}")
    size = os.path.getsize(p)
    with open(p, "r+b") as f:
        f.write(os.urandom(min(size, 1 << 20)) * (size // (1 << 20)) + os.urandom(size % (1 << 20)))
EOF
}

check_copy() {   # SRC DST: 200 files of the fill compared
    local i p
    for i in $(seq 0 $(( FILES / 200 > 0 ? FILES / 200 : 1 )) $(( FILES - 1 ))); do
        p=$(printf 'd%04d/f%03d' $(( i / 1000 )) $(( i % 1000 )))
        cmp -s "$1/$p" "$2/$p" || { log "copy differs: $p"; return 1; }
    done
}

disk_read() {   # FILE → R: MB/s of a cold sequential read
    drop_caches
    seconds "dd if='$1' of=/dev/null bs=1M status=none" || return 1
    R=$(python3 -c "import os,sys; print(os.path.getsize(sys.argv[1]) / float(sys.argv[2]) / 1e6)" "$1" "$R")
}

second_pool() {   # STACK → creates POOL2 on two more sparse files
    local s=$1 dir
    if [ "$s" = tarn ]; then
        dir=$work/tarn/vdevs
        truncate -s "$dev_bytes" "$dir/c.img" "$dir/d.img"
        "$TARN_BIN" zpool create -o ashift=12 -O compression=off -O atime=off "${TPOOL}d" \
            mirror "$dir/c.img" "$dir/d.img"
    else
        dir=$work/zfs/vdevs
        truncate -s "$dev_bytes" "$dir/c.img" "$dir/d.img"
        zpool create -o ashift=12 -o cachefile=none -O compression=off -O atime=off \
            -m "$work/zfs/mnt2" "${ZPOOL}d" mirror "$dir/c.img" "$dir/d.img"
    fi
}

run_set() {
    local s=$1 pool src dst msrc mdst vdev
    pool=$(pool_of "$s"); src=$pool/src; dst=${pool}d/copy
    msrc=$(mnt_of "$s" "$src") || { log "$s: $src not mounted"; return 1; }
    second_pool "$s" >"$work/pool2.out" 2>&1 || { log "$s: second pool: $(cat "$work/pool2.out")"; return 1; }
    log "$s: filling $src with $FILES files, $SIZE"
    local t0; t0=$(date +%s%N)
    fill "$msrc" "$FILES" "$size_bytes" || return 1
    put $s fill_s "$(( ($(date +%s%N) - t0) / 1000 ))e-6"
    settle
    z "$s" zfs snapshot "$src@full" || return 1
    quiesce
    local zc; zc=$([ "$s" = tarn ] && echo "'$TARN_BIN' " || echo "")
    seconds "${zc}zfs send $src@full | ${zc}zfs receive $dst" || return 1
    put $s full "$R"
    log "$s: full send | receive: $R s"
    if [ "$s" = tarn ]; then
        put $s stream_bytes "$("$TARN_BIN" zfs send -nP "$src@full" | awk '/^size/ {print $2}')"
    fi
    mdst=$(mnt_of "$s" "$dst") || { log "$s: $dst not mounted"; return 1; }
    [ "$s" = tarn ] || mdst=$work/zfs/mnt2/copy
    check_copy "$msrc" "$mdst" || return 1
    drop_caches
    seconds "${zc}zfs send $src@full | wc -c" || return 1
    put $s stream_s "$R"
    put $s stream_b "$(tr -d ' ' <"$work/last.out")"
    log "$s: send > /dev/null: $R s, $(cat "$results/$s.stream_b") bytes"
    change "$msrc" "$FILES" || return 1
    settle
    z "$s" zfs snapshot "$src@inc" || return 1
    quiesce
    # The send alone first (its stream thrown away), from a cold cache.
    seconds "${zc}zfs send -i @full $src@inc | wc -c" || return 1
    put $s inc_send "$R"
    put $s inc_bytes "$(tr -d ' ' <"$work/last.out")"
    quiesce
    seconds "${zc}zfs send -i @full $src@inc | ${zc}zfs receive $dst" || return 1
    put $s inc "$R"
    log "$s: incremental send | receive: $R s (the send alone $(cat "$results/$s.inc_send") s)"
    check_copy "$msrc" "$mdst" || return 1
    vdev=$([ "$s" = tarn ] && echo "$work/tarn/vdevs/a.img" || echo "$work/zfs/vdevs/a.img")
    disk_read "$vdev" && put $s disk "$R"
    z "$s" zpool destroy -f "${pool}d" >/dev/null 2>&1
    return 0
}

setup_dataset() {
    local s=$1 err
    if ! err=$(z "$s" zfs create -o compression=off -o atime=off "$( [ "$s" = tarn ] && echo "$TDS" || echo "$ZDS")" 2>&1); then
        na_all $s "zfs create failed: $err"; return 1
    fi
}

# --------------------------------------------------------------- rsync
rsync_stop() { [ -n "$work" ] && rm -rf --one-file-system "$work/rsync"; }
stack_rsync() {
    local s=rsync src dst
    mkdir -p "$work/rsync/src" "$work/rsync/dst"
    src=$work/rsync/src dst=$work/rsync/dst
    put $s config "rsync $(rsync --version | awk 'NR == 1 {print $3}'); $(findmnt -n -T "$work" -o FSTYPE) directories on the same disk"
    log "$s: filling $src with $FILES files, $SIZE"
    local t0; t0=$(date +%s%N)
    fill "$src" "$FILES" "$size_bytes" || { put $s reason "fill failed"; rsync_stop; return; }
    put $s fill_s "$(( ($(date +%s%N) - t0) / 1000 ))e-6"
    settle; quiesce
    seconds "rsync -a --delete '$src/' '$dst/'" || { put $s reason "rsync failed"; rsync_stop; return; }
    put $s full "$R"
    log "$s: full: $R s"
    check_copy "$src" "$dst" || put $s reason "copy differs"
    change "$src" "$FILES"
    settle; quiesce
    seconds "rsync -a --delete '$src/' '$dst/'" || { put $s reason "rsync failed"; rsync_stop; return; }
    put $s inc "$R"
    log "$s: incremental: $R s"
    check_copy "$src" "$dst" || put $s reason "copy differs"
    rsync_stop
}

# ---------------------------------------------------------------- disk
stack_disk() {
    local s=disk d=$work/disk mib inc
    mkdir -p "$d"
    mib=$(( size_bytes / 1024 / 1024 ))
    put $s config "fio and dd on $(findmnt -n -T "$work" -o FSTYPE) of the same disk, 1 MiB blocks"
    dd if=/dev/urandom of="$d/src" bs=1M count="$mib" conv=fsync status=none ||
        { put $s reason "dd failed"; rm -rf "$d"; return; }
    quiesce
    # fio: one job reading the file, two writing as much, 1 MiB direct
    # I/O 16 deep each: as fast as this disk does the I/O of a send |
    # receive into a mirror.
    seconds "fio --output=/dev/null --ioengine=libaio --direct=1 --bs=1M --iodepth=16 --end_fsync=1 --name=r --rw=read --filename='$d/src' --size=${mib}M --name=w1 --rw=write --filename='$d/w1' --size=${mib}M --name=w2 --rw=write --filename='$d/w2' --size=${mib}M" ||
        { put $s reason "fio failed"; rm -rf "$d"; return; }
    put $s floor_full "$R"
    log "$s: read $SIZE while writing it twice: $R s"
    rm -f "$d/w1" "$d/w2"
    inc=$(cat "$results/tarn.inc_bytes" 2>/dev/null || echo $(( size_bytes / 100 )))
    quiesce
    seconds "head -c $inc /dev/zero | dd of='$d/w1' bs=1M iflag=fullblock conv=fsync status=none & head -c $inc /dev/zero | dd of='$d/w2' bs=1M iflag=fullblock conv=fsync status=none & wait" ||
        { put $s reason "dd failed"; rm -rf "$d"; return; }
    put $s floor_inc "$R"
    log "$s: write $inc bytes twice: $R s"
    rm -rf "$d"
}

# ------------------------------------------------------------------ run
log "work dir $work; fill $FILES files / $SIZE, stacks: ${STACKS[*]}, $ROUNDS round(s)"
run_rounds "$ROUNDS"

# ---------------------------------------------------------------- table
table "$results" "$SIZE" "$FILES" "$(uname -r)" <<'EOF'
res, size, files, kernel = sys.argv[1:5]
stacks = ["tarn", "zfs-fuse", "rsync"]
all_stacks = stacks + ["disk"]

def s_(v):
    return f"{v:,.2f} s" if isinstance(v, float) else "n/a"
def mbs(b, t):
    return f"{b / t / 1e6:,.0f} MB/s" if isinstance(b, float) and isinstance(t, float) and t else "n/a"

rows = [
    (f"fill: {int(files):,} files / {size}", lambda s: s_(get(s, "fill_s")), "—"),
    ("full: send | receive (rsync: rsync -a)", lambda s: s_(get(s, "full")), "≥ 3× zfs-fuse, ≥ rsync"),
    ("incremental, 1 % of the files changed", lambda s: s_(get(s, "inc")), "≥ 10× rsync, ≥ 3× zfs-fuse"),
    ("… the incremental send alone (to wc -c, cold)", lambda s: s_(get(s, "inc_send")), "—"),
    ("… its stream", lambda s: f"{get(s, 'inc_bytes') / 1e6:,.1f} MB" if isinstance(get(s, "inc_bytes"), float) else "n/a", "—"),
    ("stream: send > /dev/null, cold", lambda s: mbs(get(s, "stream_b"), get(s, "stream_s")), "≥ 50 % of disk"),
    ("disk: sequential read of a device file, cold", lambda s: f"{get(s, 'disk'):,.0f} MB/s" if isinstance(get(s, "disk"), float) else "n/a", "—"),
]
fl_full, fl_inc = get("disk", "floor_full"), get("disk", "floor_inc")
print(f"Kernel {kernel}; tarn and zfs-fuse: two pools, each a mirror of two sparse files on the same disk, "
      f"compression off, atime off; rsync: two directories of that disk.\n")
print("| measurement | " + " | ".join(stacks) + " | target |")
print("|---|" + "---:|" * len(stacks) + "---|")
for name, f, target in rows:
    print(f"| {name} | " + " | ".join(f(s) for s in stacks) + f" | {target} |")
def ratio(a, b):
    return f"{a / b:.1f}×" if isinstance(a, float) and isinstance(b, float) and b else "n/a"
ft, fz, fr = get("tarn", "full"), get("zfs-fuse", "full"), get("rsync", "full")
it, iz, ir = get("tarn", "inc"), get("zfs-fuse", "inc"), get("rsync", "inc")
print(f"\nfull: tarn is {ratio(fz, ft)} faster than zfs-fuse and {ratio(fr, ft)} faster than rsync; "
      f"incremental: {ratio(iz, it)} faster than zfs-fuse and {ratio(ir, it)} faster than rsync.")
if isinstance(fl_full, float):
    print(f"\nThe disk alone: reading {size} while writing it twice (fio, direct, 16 deep) takes {fl_full:.2f} s "
          f"(tarn's full send | receive: {ratio(ft, fl_full) if ft else 'n/a'} of that); writing the "
          f"incremental's bytes twice (dd, conv=fsync) takes {fl_inc:.2f} s (tarn's incremental: {ratio(it, fl_inc) if it else 'n/a'} of that).")
sb, st, d = get("tarn", "stream_b"), get("tarn", "stream_s"), get("tarn", "disk")
if all(isinstance(v, float) for v in (sb, st, d)) and st and d:
    print(f"tarn's stream runs at {sb / st / 1e6 / d * 100:.0f} % of the disk's sequential read.")
for s in all_stacks:
    r = get(s, "reason")
    if r:
        print(f"\n{s}: {r}")
    c = get(s, "config")
    if c:
        print(f"\n{s}: {c}")
EOF
