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
fiodir=$here/fio

SIZE=2G
RUNTIME=20
NFILES=20000
STEP_TIMEOUT=1800   # a hung file system fails its row instead of the run
ONLY=()
BASE=/var/tmp

usage() { sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --size) SIZE=$2; shift 2 ;;
        --size=*) SIZE=${1#*=}; shift ;;
        --runtime) RUNTIME=$2; shift 2 ;;
        --runtime=*) RUNTIME=${1#*=}; shift ;;
        --only) IFS=, read -ra o <<<"$2"; ONLY+=("${o[@]}"); shift 2 ;;
        --only=*) IFS=, read -ra o <<<"${1#*=}"; ONLY+=("${o[@]}"); shift ;;
        -h|--help) usage 0 ;;
        -*) echo "unknown option $1" >&2; usage 2 ;;
        *) BASE=$1; shift ;;
    esac
done
STACKS=(tarn zfs-fuse btrfs)
[ ${#ONLY[@]} -gt 0 ] && STACKS=("${ONLY[@]}")
for s in "${STACKS[@]}"; do
    case "$s" in tarn|zfs-fuse|btrfs) ;; *) echo "unknown stack '$s' (tarn, zfs-fuse, btrfs)" >&2; exit 2 ;; esac
done
[ "$(id -u)" = 0 ] || { echo "peers.sh must run as root (mount, losetup, drop_caches)" >&2; exit 2; }
for t in fio python3 findmnt numfmt; do
    command -v "$t" >/dev/null || { echo "missing $t (apt-get install -y fio)" >&2; exit 2; }
done

size_bytes=$(numfmt --from=iec "${SIZE%[bB]}") || { echo "bad --size $SIZE" >&2; exit 2; }
syncsize_bytes=$(( size_bytes < 256 * 1024 * 1024 ? size_bytes : 256 * 1024 * 1024 ))
# Each mirror side holds everything: the test file, the fsync file, the
# small files and copy-on-write slack. Sparse, so only what is written counts.
dev_bytes=$(( 2 * size_bytes + 2 * 1024 * 1024 * 1024 ))

mkdir -p "$BASE"
work=$(mktemp -d "$BASE/tarn-peers.XXXXXX")
results=$work/results
mkdir -p "$results"
log() { printf '[peers %s] %s\n' "$(date +%T)" "$*" >&2; }

# --------------------------------------------------------------- cleanup
TARN_PID=
ZFS_PID=
LOOPS=()
CREATED_DIRS=()
TPOOL=tarnpeers$$
ZPOOL=zfspeers$$
TARN_BIN=${TARN:-$repo/target/release/tarn}

umount_under() {   # every mount below $1, deepest first
    local m
    findmnt -rn -o TARGET | awk -v p="$1/" 'index($0 "/", p) == 1' | sort -r |
        while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
}
stop_pid() {       # stop one process we started: TERM, then KILL after 15 s
    local pid=$1 i
    [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 0
    kill "$pid" 2>/dev/null
    for i in $(seq 150); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
}
tarn_stop() {
    if [ -n "$TARN_PID" ]; then
        timeout 60 "$TARN_BIN" zpool destroy -f "$TPOOL" >/dev/null 2>&1 || true
        # the daemon we started, and one a client may have auto-started in
        # our private run dir (its pid is in our lock file)
        local lockpid
        lockpid=$(head -1 "$work/tarn/run/tarn.lock" 2>/dev/null | tr -dc 0-9)
        stop_pid "$TARN_PID"
        [ -n "$lockpid" ] && [ "$lockpid" != "$TARN_PID" ] &&
            grep -qa "$work/tarn" "/proc/$lockpid/environ" 2>/dev/null && stop_pid "$lockpid"
        TARN_PID=
    fi
    umount_under "$work/tarn"
    [ -n "${TARN_TOPLEVEL_MNT:-}" ] && { umount -l "$TARN_TOPLEVEL_MNT" 2>/dev/null; rmdir "$TARN_TOPLEVEL_MNT" 2>/dev/null; }
    TARN_TOPLEVEL_MNT=
}
zfs_stop() {
    if [ -n "$ZFS_PID" ]; then
        timeout 60 zpool destroy -f "$ZPOOL" >/dev/null 2>&1 || true
        stop_pid "$ZFS_PID"
        ZFS_PID=
    fi
    umount_under "$work/zfs"
}
btrfs_stop() {
    umount_under "$work/btrfs"
    local l
    [ ${#LOOPS[@]} -gt 0 ] && btrfs device scan --forget "${LOOPS[@]}" >/dev/null 2>&1
    for l in "${LOOPS[@]}"; do losetup -d "$l" 2>/dev/null || true; done
    LOOPS=()
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    tarn_stop; zfs_stop; btrfs_stop
    umount_under "$work"
    rm -rf --one-file-system "$work"
    local d
    for d in "${CREATED_DIRS[@]}"; do rm -rf --one-file-system "$d"; done
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --------------------------------------------------------------- helpers
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
put() { printf '%s\n' "$3" >"$results/$1.$2"; }            # stack key value
na_all() {                                                  # stack reason
    log "$1: n/a — $2"
    put "$1" reason "$2"
}

# fio JOBFILE JOBNAME → prints "bw_MBps iops p50_us p99_us" of JOBNAME
run_fio() {
    local stack=$1 job=$2 name=$3 out=$work/$1.$2.json
    if ! DIR=$MNT SIZE=$size_bytes SYNCSIZE=$syncsize_bytes RUNTIME=$RUNTIME \
        timeout --foreground -k 10 "$STEP_TIMEOUT" fio --output-format=json --output="$out" "$fiodir/$job.fio" >/dev/null 2>"$out.err"; then
        log "$stack: fio $job failed: $(tail -3 "$out.err" | tr '\n' ' ')"
        return 1
    fi
    python3 - "$out" "$name" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
job = next(j for j in doc["jobs"] if j["jobname"] == sys.argv[2])
if job["error"]:
    sys.exit(f"fio job error {job['error']}")
d = job["write"] if job["write"]["io_bytes"] else job["read"]
pct = job["sync"]["lat_ns"].get("percentile", {}) if job["sync"]["total_ios"] else {}
us = lambda k: pct[k] / 1000 if k in pct else float("nan")
print(f'{d["bw_bytes"] / 1e6:.1f} {d["iops"]:.0f} {us("50.000000"):.0f} {us("99.000000"):.0f}')
EOF
}

# 20,000 files of 4 KiB in one new directory: open(O_CREAT|O_EXCL), write,
# close each, then syncfs + fsync(dir) so the run ends with everything
# handed to (and, for the FUSE daemons, committed by) the file system.
create_files() {
    timeout --foreground -k 10 "$STEP_TIMEOUT" python3 - "$MNT/files" "$NFILES" <<'EOF'
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
}

# The whole workload set on the stack mounted at $MNT; cold_$stack makes
# the next read cold.
run_set() {
    local s=$1 cold=$2 r
    log "$s: sequential write 1 MiB ($SIZE)"
    r=$(run_fio "$s" seqwrite seqwrite) || return 1
    put "$s" seqwrite "$(cut -d' ' -f1 <<<"$r")"
    $cold || { log "$s: cold cycle failed"; return 1; }
    log "$s: sequential read 1 MiB, cold"
    r=$(run_fio "$s" seqread seqread) && put "$s" seqread "$(cut -d' ' -f1 <<<"$r")"
    $cold || { log "$s: cold cycle failed"; return 1; }
    log "$s: random read 16 KiB, cold (≤ ${RUNTIME}s)"
    r=$(run_fio "$s" randread randread) && put "$s" randread "$(cut -d' ' -f2 <<<"$r")"
    log "$s: random write 16 KiB (≤ ${RUNTIME}s)"
    r=$(run_fio "$s" randwrite randwrite) && put "$s" randwrite "$(cut -d' ' -f2 <<<"$r")"
    log "$s: 4 KiB write + fsync each (${RUNTIME}s)"
    if r=$(run_fio "$s" fsync4k fsync4k); then
        put "$s" fsync_iops "$(cut -d' ' -f2 <<<"$r")"
        put "$s" fsync_p50 "$(cut -d' ' -f3 <<<"$r")"
        put "$s" fsync_p99 "$(cut -d' ' -f4 <<<"$r")"
    fi
    log "$s: create $NFILES files of 4 KiB"
    r=$(create_files) && put "$s" create "$r" || log "$s: file creation failed"
    return 0
}

# ------------------------------------------------------------------ tarn
tarn_mountpoint() {    # where the daemon mounted $TPOOL, if it did
    local mp c
    mp=$("$TARN_BIN" zfs get -H -o value mountpoint "$TPOOL" 2>/dev/null)
    for c in "$TARN_MOUNT_ROOT/$TPOOL" "$TARN_MOUNT_ROOT$mp" "$mp" "/$TPOOL"; do
        [ -n "$c" ] && [ "$c" != "$TARN_MOUNT_ROOT" ] || continue
        case "$(findmnt -n -M "$c" -o FSTYPE 2>/dev/null)" in
            fuse*) echo "$c"; return 0 ;;
        esac
    done
    return 1
}
tarn_wait_mounted() {
    local i
    for i in $(seq 100); do
        MNT=$(tarn_mountpoint) && return 0
        sleep 0.2
    done
    return 1
}
tarn_cold() {
    timeout 300 "$TARN_BIN" zpool export "$TPOOL" >/dev/null || return 1
    drop_caches
    timeout 300 "$TARN_BIN" zpool import -d "$work/tarn/vdevs" "$TPOOL" >/dev/null || return 1
    tarn_wait_mounted || return 1
    drop_caches
}
stack_tarn() {
    local s=tarn
    if [ -z "${TARN:-}" ]; then
        log "tarn: cargo build --release --bin tarn"
        if ! (cd "$repo" && cargo build --release --bin tarn) >"$work/build.log" 2>&1; then
            tail -5 "$work/build.log" >&2
            na_all $s "cargo build failed"; return
        fi
    fi
    [ -x "$TARN_BIN" ] || { na_all $s "no binary at $TARN_BIN"; return; }
    mkdir -p "$work/tarn/vdevs" "$work/tarn/root"
    mkdir -m 0700 "$work/tarn/run"
    export TARN_RUN_DIR=$work/tarn/run TARN_SOCKET=$work/tarn/run/tarn.sock
    export TARN_CACHEFILE=$work/tarn/tarn.cache TARN_MOUNT_ROOT=$work/tarn/root
    "$TARN_BIN" daemon --foreground >"$work/tarn/daemon.out" 2>&1 &
    TARN_PID=$!
    local i
    for i in $(seq 100); do [ -S "$TARN_SOCKET" ] && break; kill -0 "$TARN_PID" 2>/dev/null || break; sleep 0.1; done
    if ! "$TARN_BIN" zpool list >/dev/null 2>&1; then
        na_all $s "daemon did not start: $(tail -2 "$work/tarn/daemon.out" | tr '\n' ' ')"; tarn_stop; return
    fi
    truncate -s "$dev_bytes" "$work/tarn/vdevs/a.img" "$work/tarn/vdevs/b.img"
    local err
    if ! err=$("$TARN_BIN" zpool create -o ashift=12 "$TPOOL" mirror \
            "$work/tarn/vdevs/a.img" "$work/tarn/vdevs/b.img" 2>&1); then
        na_all $s "zpool create failed: $err"; tarn_stop; return
    fi
    [ -d "/$TPOOL" ] && TARN_TOPLEVEL_MNT=/$TPOOL   # if TARN_MOUNT_ROOT was ignored
    if ! tarn_wait_mounted; then
        na_all $s "pool created but not mounted (FUSE mounting not there yet?)"; tarn_stop; return
    fi
    put $s config "$("$TARN_BIN" --version 2>/dev/null | head -1); ashift 12; $("$TARN_BIN" zfs get -H -o property,value recordsize,compression,atime "$TPOOL" 2>/dev/null | tr '\t\n' '= ' | sed 's/ $//')"
    log "tarn: pool $TPOOL mounted at $MNT"
    if ! run_set $s tarn_cold; then
        put $s reason "a step failed (see log above)"
        log "tarn: daemon output (last lines):"; tail -20 "$work/tarn/daemon.out" >&2
    fi
    tarn_stop
}

# -------------------------------------------------------------- zfs-fuse
zfs_cold() {
    timeout 300 zpool export "$ZPOOL" >/dev/null || return 1
    drop_caches
    timeout 300 zpool import -o cachefile=none -d "$work/zfs/vdevs" "$ZPOOL" >/dev/null || return 1
    local i
    for i in $(seq 100); do
        [ "$(findmnt -n -M "$MNT" -o FSTYPE 2>/dev/null)" = fuse.zfs ] && { drop_caches; return 0; }
        sleep 0.1
    done
    return 1
}
stack_zfs() {
    local s=zfs-fuse d
    command -v zfs-fuse >/dev/null || { na_all $s "zfs-fuse not installed (apt-get install -y zfs-fuse)"; return; }
    if pgrep -x zfs-fuse >/dev/null; then
        na_all $s "another zfs-fuse daemon is running (it has one fixed socket); not touching it"; return
    fi
    for d in /var/run/zfs /var/lock/zfs; do
        [ -d "$d" ] || { mkdir -p "$d"; CREATED_DIRS+=("$d"); }
    done
    mkdir -p "$work/zfs/vdevs" "$work/zfs/mnt"
    # Package defaults from /etc/zfs/zfsrc apply (Debian: ARC max 100 MiB,
    # prefetch off, FUSE attr/entry timeouts 3600 s).
    zfs-fuse --no-daemon --no-kstat-mount >"$work/zfs/daemon.out" 2>&1 &
    ZFS_PID=$!
    local i
    for i in $(seq 100); do zpool list >/dev/null 2>&1 && break; kill -0 "$ZFS_PID" 2>/dev/null || break; sleep 0.1; done
    zpool list >/dev/null 2>&1 || { na_all $s "zfs-fuse did not start: $(tail -2 "$work/zfs/daemon.out")"; zfs_stop; return; }
    truncate -s "$dev_bytes" "$work/zfs/vdevs/a.img" "$work/zfs/vdevs/b.img"
    MNT=$work/zfs/mnt
    local err
    if ! err=$(zpool create -o ashift=12 -o cachefile=none -m "$MNT" "$ZPOOL" mirror \
            "$work/zfs/vdevs/a.img" "$work/zfs/vdevs/b.img" 2>&1); then
        na_all $s "zpool create failed: $err"; zfs_stop; return
    fi
    put $s config "zfs-fuse pool v$(zpool get version "$ZPOOL" 2>/dev/null | awk 'NR == 2 {print $3}'); ashift 12; $(zfs get -H -o property,value recordsize,compression,atime "$ZPOOL" | tr '\t\n' '= ' | sed 's/ $//')"
    log "zfs-fuse: pool $ZPOOL mounted at $MNT"
    run_set $s zfs_cold || put $s reason "a step failed (see log above)"
    zfs_stop
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
for s in "${STACKS[@]}"; do
    case "$s" in
        tarn) stack_tarn ;;
        zfs-fuse) stack_zfs ;;
        btrfs) stack_btrfs ;;
    esac
done

# ---------------------------------------------------------------- table
python3 - "$results" "$SIZE" "$RUNTIME" "$NFILES" "$(fio --version)" "$(uname -r)" <<'EOF'
import math, os, sys
res, size, runtime, nfiles, fiov, kernel = sys.argv[1:7]
stacks = ["tarn", "zfs-fuse", "btrfs"]

def get(stack, key):
    p = os.path.join(res, f"{stack}.{key}")
    if not os.path.exists(p):
        return None
    v = open(p).read().strip()
    try:
        f = float(v)
        return None if math.isnan(f) else f
    except ValueError:
        return v

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
