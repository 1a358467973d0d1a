#!/usr/bin/env bash
# Peer benchmark (not a timed test): the same fio workload set on three
# stacks backed by files on the same disk, and a table of tarn/peer ratios.
#
#   tarn      mirror of two sparse files, real target/release/tarn daemon
#             (private TARN_RUN_DIR / TARN_SOCKET / TARN_CACHEFILE /
#             TARN_MOUNT_ROOT), FUSE mount
#   zfs-fuse  the real ZFS in user space (pool v23), mirror of two files
#   btrfs     raid1 (data and metadata) on two loop devices
#
# Usage (as root):
#   bench/peers.sh [--size SIZE] [--runtime SECONDS] [--only STACK[,STACK]]
#                  [WORKDIR]
#
#   --size     size of the test file (fio syntax, default 2G)
#   --runtime  time cap of the random and fsync jobs (default 20)
#   --only     tarn, zfs-fuse or btrfs (repeatable or comma-separated)
#   WORKDIR    where the backing files go (default /var/tmp); the script
#              works in a fresh subdirectory and removes it at the end
#   TARN=PATH  env: use this tarn binary instead of building one
#
# The rows (job files in bench/fio/, described in bench/README.md):
#   sequential write 1 MiB (MB/s) · sequential read 1 MiB, cold (MB/s) ·
#   random read 16 KiB, cold (IOPS) · random write 16 KiB (IOPS) ·
#   4 KiB write + fsync each (IOPS, p99 fsync latency) ·
#   create 20,000 4 KiB files (files/s).
# "Cold" = pool exported and imported again (btrfs: umount + mount) and
# `echo 3 > /proc/sys/vm/drop_caches` right before the job.
#
# Every pool, mount, loop device, daemon and file the script creates is
# removed on exit, also on failure or Ctrl-C.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"
fiodir=$here/fio

SIZE=2G
RUNTIME=20
NFILES=20000
STACKS=(tarn zfs-fuse btrfs)
script_option() {
    case "$1" in
        --runtime) RUNTIME=$2; return 2 ;;
        --runtime=*) RUNTIME=${1#*=}; return 1 ;;
    esac
    return 0
}
parse_args "$@"
check_setup "mount, losetup, drop_caches"
syncsize_bytes=$(( size_bytes < 256 * 1024 * 1024 ? size_bytes : 256 * 1024 * 1024 ))
# Each mirror side holds everything: the test file, the fsync file, the
# small files and copy-on-write slack. Sparse, so only what is written counts.
dev_bytes=$(( 2 * size_bytes + 2 * 1024 * 1024 * 1024 ))
FIO_ENV=(SIZE="$size_bytes" SYNCSIZE="$syncsize_bytes" RUNTIME="$RUNTIME")

# The pools' root datasets are what is measured.
TPOOL=tarnpeers$$
ZPOOL=zfspeers$$
TDS=$TPOOL
ZDS=$ZPOOL
setup_dataset() { :; }
LOOPS=()
btrfs_stop() {
    umount_under "$work/btrfs"
    local l
    [ ${#LOOPS[@]} -gt 0 ] && btrfs device scan --forget "${LOOPS[@]}" >/dev/null 2>&1
    for l in "${LOOPS[@]}"; do losetup -d "$l" 2>/dev/null || true; done
    LOOPS=()
}
STOPS+=(btrfs_stop)
make_work tarn-peers

# 20,000 files of 4 KiB in one new directory: open(O_CREAT|O_EXCL), write,
# close each, then syncfs + fsync(dir) so the run ends with everything
# handed to (and, for the FUSE daemons, committed by) the file system.
# STACK → R=files/s
create_files() {
    local out=$work/$1.create
    R=
    run_bg "file creation" "$out" "" \
        timeout -k 10 "$STEP_TIMEOUT" python3 - "$MNT/files" "$NFILES" <<'EOF' || return 1
import ctypes, os, sys, time
d, n = sys.argv[1], int(sys.argv[2])
libc = ctypes.CDLL(None, use_errno=True)
buf = os.urandom(4096)
t0 = time.monotonic()
os.mkdir(d)
for i in range(n):
    fd = os.open(f"{d}/f{i:06d}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, buf)
    os.close(fd)
dfd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
if libc.syncfs(dfd) != 0:
    raise OSError(ctypes.get_errno(), "syncfs")
os.fsync(dfd)
os.close(dfd)
print(f"{n / (time.monotonic() - t0):.0f}")
EOF
    R=$(cat "$out")
}

# The whole workload set on the stack mounted at $MNT; COLDFN makes the
# next read cold. run_fio sets R="MB/s IOPS p50_us p99_us bytes".
run_set() {
    local s=$1 cold=$2 iops p50 p99
    log "$s: sequential write 1 MiB ($SIZE)"
    run_fio "$s" seqwrite || return 1
    put "$s" seqwrite "${R%% *}"
    $cold || { log "$s: cold cycle failed"; return 1; }
    log "$s: sequential read 1 MiB, cold"
    run_fio "$s" seqread && put "$s" seqread "${R%% *}"
    $cold || { log "$s: cold cycle failed"; return 1; }
    log "$s: random read 16 KiB, cold (≤ ${RUNTIME}s)"
    run_fio "$s" randread && { read -r _ iops _ <<<"$R"; put "$s" randread "$iops"; }
    log "$s: random write 16 KiB (≤ ${RUNTIME}s)"
    run_fio "$s" randwrite && { read -r _ iops _ <<<"$R"; put "$s" randwrite "$iops"; }
    log "$s: 4 KiB write + fsync each (${RUNTIME}s)"
    if run_fio "$s" fsync4k; then
        read -r _ iops p50 p99 _ <<<"$R"
        put "$s" fsync_iops "$iops"
        put "$s" fsync_p50 "$p50"
        put "$s" fsync_p99 "$p99"
    fi
    log "$s: create $NFILES files of 4 KiB"
    create_files "$s" && put "$s" create "$R" || log "$s: file creation failed"
    return 0
}

# ----------------------------------------------------------------- btrfs
btrfs_cold() {
    umount "$MNT" || return 1
    drop_caches
    mount -o "device=${LOOPS[1]}" "${LOOPS[0]}" "$MNT" || return 1
    drop_caches
}
stack_btrfs() {
    local s=btrfs l f
    command -v mkfs.btrfs >/dev/null || { na_all $s "btrfs-progs not installed"; return; }
    mkdir -p "$work/btrfs/mnt"
    for f in a b; do
        truncate -s "$dev_bytes" "$work/btrfs/$f.img"
        l=$(losetup -f --show "$work/btrfs/$f.img") || { na_all $s "losetup failed"; btrfs_stop; return; }
        LOOPS+=("$l")
    done
    if ! mkfs.btrfs -q -f -d raid1 -m raid1 "${LOOPS[@]}" >"$work/btrfs/mkfs.out" 2>&1; then
        na_all $s "mkfs.btrfs failed: $(tail -2 "$work/btrfs/mkfs.out")"; btrfs_stop; return
    fi
    MNT=$work/btrfs/mnt
    mount -o "device=${LOOPS[1]}" "${LOOPS[0]}" "$MNT" || { na_all $s "mount failed"; btrfs_stop; return; }
    put $s config "$(mkfs.btrfs --version | head -1); raid1/raid1 on ${LOOPS[*]}; $(findmnt -n -M "$MNT" -o OPTIONS)"
    log "btrfs: ${LOOPS[*]} mounted at $MNT"
    run_set $s btrfs_cold || put $s reason "a step failed (see log above)"
    btrfs_stop
}

# ------------------------------------------------------------------ run
log "work dir $work; file ${SIZE} ($size_bytes bytes), fsync file $syncsize_bytes bytes, runtime cap ${RUNTIME}s, stacks: ${STACKS[*]}"
run_stacks

# ---------------------------------------------------------------- table
table "$results" "$SIZE" "$RUNTIME" "$NFILES" "$(fio --version)" "$(uname -r)" <<'EOF'
res, size, runtime, nfiles, fiov, kernel = sys.argv[1:7]
stacks = ["tarn", "zfs-fuse", "btrfs"]

# key, label, higher is better, needs btrfs ratio (≥ 0.8×)
rows = [
    ("seqwrite", "sequential write 1 MiB, MB/s", True, True),
    ("seqread", "sequential read 1 MiB after export/import (cold), MB/s", True, True),
    ("randread", "random read 16 KiB, cold, IOPS", True, False),
    ("randwrite", "random write 16 KiB, IOPS", True, False),
    ("fsync_iops", "4 KiB write + fsync each, IOPS", True, False),
    ("fsync_p99", "fsync p99 latency, µs (lower is better)", False, False),
    ("create", f"create {int(nfiles):,} 4 KiB files, files/s", True, False),
]

def fmt(v):
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    return f"{v:.1f}" if v < 100 else f"{v:,.0f}"

def ratio(a, b):
    if not isinstance(a, float) or not isinstance(b, float) or b == 0:
        return None
    return a / b

print(f"fio {fiov.replace('fio-', '')}, kernel {kernel}, file {size}, random/fsync jobs capped at {runtime} s; "
      "each stack backed by two sparse files on the same disk.\n")
print("| workload | tarn | zfs-fuse | btrfs | tarn/zfs-fuse | tarn/btrfs | target (issue) |")
print("|---|---:|---:|---:|---:|---:|---|")
for key, label, higher, vs_btrfs in rows:
    t, z, b = (get(s, key) for s in stacks)
    rz, rb = ratio(t, z), ratio(t, b)
    if higher:
        target = "≥ 2× zfs-fuse" + (", ≥ 0.8× btrfs" if vs_btrfs else "")
        ok = [rz >= 2 if rz is not None else None]
        if vs_btrfs:
            ok.append(rb >= 0.8 if rb is not None else None)
    else:
        target = "≤ 0.5× zfs-fuse"
        ok = [rz <= 0.5 if rz is not None else None]
    verdict = "n/a" if None in ok else ("met" if all(ok) else "**not met**")
    r = lambda x: "n/a" if x is None else f"{x:.2f}×"
    print(f"| {label} | {fmt(t)} | {fmt(z)} | {fmt(b)} | {r(rz)} | {r(rb)} | {target}: {verdict} |")

print()
for s in stacks:
    c, why = get(s, "config"), get(s, "reason")
    p50 = get(s, "fsync_p50")
    line = f"- {s}: " + (c if isinstance(c, str) else "not run")
    if isinstance(p50, float):
        line += f"; fsync p50 {p50:,.0f} µs"
    if isinstance(why, str):
        line += f" — n/a: {why}"
    print(line)
EOF
