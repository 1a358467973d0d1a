#!/usr/bin/env bash
# Record-size benchmark (not a timed test): are small random writes into a
# large-recordsize file gathered into whole records, so that the file reads
# back at sequential speed?
#
# Claim (issue): async writes are gathered in RAM and written as whole
# records at txg commit, so writing SIZE with 16 KiB random writes into a
# recordsize=1M dataset leaves the file unfragmented: after export/import a
# sequential read of it runs as fast as one of the same file written
# sequentially with 1 MiB writes.
#
# For each stack, in one dataset POOL/rs (recordsize=1M, compression=off):
#   random      fio rw=randwrite bs=16k size=SIZE end_fsync=1 (new file,
#               random map: every 16 KiB block written exactly once)
#               → export/import + drop caches → cold fio rw=read bs=1M
#   sequential  fio rw=write bs=1M size=SIZE end_fsync=1 (new file)
#               → export/import + drop caches → cold fio rw=read bs=1M
# Table on stdout: write MB/s, cold sequential read MB/s and
# read(random-written) / read(sequentially-written); the claim holds when
# that ratio is ≥ 0.8.
#
#   tarn      mirror of two sparse files, real target/release/tarn daemon
#             (private TARN_RUN_DIR / TARN_SOCKET / TARN_CACHEFILE /
#             TARN_MOUNT_ROOT), FUSE mount
#   zfs-fuse  the real ZFS in user space (pool v23, recordsize ≤ 128K: if
#             1M is refused it runs with 128K, noted under the table)
#
# Usage (as root):
#   bench/recordsize.sh [--size SIZE] [--only STACK[,STACK]] [WORKDIR]
#
#   --size     size of each test file (fio syntax, default 512M)
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

SIZE=512M
RECORDSIZE=1M
STEP_TIMEOUT=1800   # a hung file system fails its row instead of the run
ONLY=()
BASE=/var/tmp

usage() { sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [ $# -gt 0 ]; do
    case "$1" in
        --size) SIZE=$2; shift 2 ;;
        --size=*) SIZE=${1#*=}; shift ;;
        --only) IFS=, read -ra o <<<"$2"; ONLY+=("${o[@]}"); shift 2 ;;
        --only=*) IFS=, read -ra o <<<"${1#*=}"; ONLY+=("${o[@]}"); shift ;;
        -h|--help) usage 0 ;;
        -*) echo "unknown option $1" >&2; usage 2 ;;
        *) BASE=$1; shift ;;
    esac
done
STACKS=(tarn zfs-fuse)
[ ${#ONLY[@]} -gt 0 ] && STACKS=("${ONLY[@]}")
for s in "${STACKS[@]}"; do
    case "$s" in tarn|zfs-fuse) ;; *) echo "unknown stack '$s' (tarn, zfs-fuse)" >&2; exit 2 ;; esac
done
[ "$(id -u)" = 0 ] || { echo "recordsize.sh must run as root (mount, drop_caches)" >&2; exit 2; }
for t in fio python3 findmnt numfmt; do
    command -v "$t" >/dev/null || { echo "missing $t (apt-get install -y fio)" >&2; exit 2; }
done

size_bytes=$(numfmt --from=iec "${SIZE%[bB]}") || { echo "bad --size $SIZE" >&2; exit 2; }
[ $(( size_bytes % (1024 * 1024) )) -eq 0 ] && [ "$size_bytes" -gt 0 ] ||
    { echo "--size must be a positive multiple of 1 MiB" >&2; exit 2; }
# Each mirror side holds both files plus copy-on-write slack. Sparse, so
# only what is written counts.
dev_bytes=$(( 2 * size_bytes + 2 * 1024 * 1024 * 1024 ))

mkdir -p "$BASE"
work=$(mktemp -d "$BASE/tarn-recordsize.XXXXXX")
results=$work/results
fiodir=$work/fio
mkdir -p "$results" "$fiodir"
log() { printf '[recordsize %s] %s\n' "$(date +%T)" "$*" >&2; }

# ------------------------------------------------------------ fio jobs
# One thread, queue depth 1, buffered, fio's default random data, like the
# jobs in bench/fio/. Env: DIR (dataset mountpoint), FILE, SIZE.
cat >"$fiodir/randwrite.fio" <<'EOF'
; 16 KiB random writes into a new file until SIZE is covered. fio's random
; map (norandommap=0, the default) visits every block exactly once, so the
; file ends up fully written, in random order. fsync at the end, inside the
; job's time.
[global]
ioengine=psync
direct=0
fallocate=none
numjobs=1

[randwrite]
filename=${DIR}/${FILE}
rw=randwrite
bs=16k
size=${SIZE}
end_fsync=1
EOF
cat >"$fiodir/seqwrite.fio" <<'EOF'
; The baseline: the same file written sequentially with 1 MiB writes.
[global]
ioengine=psync
direct=0
fallocate=none
numjobs=1

[seqwrite]
filename=${DIR}/${FILE}
rw=write
bs=1M
size=${SIZE}
end_fsync=1
EOF
cat >"$fiodir/seqread.fio" <<'EOF'
; Sequential read, 1 MiB, of FILE; run cold (after export/import and
; drop_caches).
[global]
ioengine=psync
direct=0
fallocate=none
numjobs=1

[seqread]
filename=${DIR}/${FILE}
rw=read
bs=1M
size=${SIZE}
EOF

# --------------------------------------------------------------- cleanup
TARN_PID=
ZFS_PID=
FIO_PID=
CREATED_DIRS=()
TPOOL=tarnrs$$
ZPOOL=zfsrs$$
DS=rs
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
    if [ -n "${TARN_TOPLEVEL_MNT:-}" ]; then
        umount_under "$TARN_TOPLEVEL_MNT"
        umount -l "$TARN_TOPLEVEL_MNT" 2>/dev/null; rmdir "$TARN_TOPLEVEL_MNT" 2>/dev/null
    fi
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
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    [ -n "$FIO_PID" ] && { log "stopping fio"; stop_pid "$FIO_PID"; }
    tarn_stop; zfs_stop
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

# run_fio STACK JOB FILE → R="MB/s bytes" of the job. fio runs as a
# background job of this shell (in timeout's own process group) and is
# waited for with `wait`, so Ctrl-C reaches this shell's trap at once
# (bash would not run the trap after a foreground fio that caught SIGINT
# itself), and cleanup stops it by its pid.
R=
run_fio() {
    local stack=$1 job=$2 file=$3 out=$work/$1.$2.$3.json rc
    R=
    DIR=$MNT FILE=$file SIZE=$size_bytes \
        timeout -k 10 "$STEP_TIMEOUT" fio --output-format=json --output="$out" "$fiodir/$job.fio" >/dev/null 2>"$out.err" &
    FIO_PID=$!
    wait "$FIO_PID"; rc=$?
    FIO_PID=
    if [ "$rc" -ne 0 ]; then
        log "$stack: fio $job $file failed (exit $rc): $(tail -3 "$out.err" | tr '\n' ' ')"
        return 1
    fi
    R=$(python3 - "$out" "$job" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
job = next(j for j in doc["jobs"] if j["jobname"] == sys.argv[2])
if job["error"]:
    sys.exit(f"fio job error {job['error']}")
d = job["write"] if job["write"]["io_bytes"] else job["read"]
print(f'{d["bw_bytes"] / 1e6:.1f} {d["io_bytes"]}')
EOF
) || { log "$stack: fio $job $file: no result in $out"; return 1; }
}

# What stat(2) says about FILE: the file's data block size (st_blksize,
# which ZFS and tarn report as the file's record size) and allocated bytes.
file_blocks() {
    local s=$1 key=$2 f=$MNT/$3 st
    st=$(stat -c '%s %o %b %B' "$f" 2>/dev/null) || return 0
    put "$s" "$key" "$st"
}

# Write FILE with JOB, go cold, read it back sequentially.
run_pattern() {
    local s=$1 cold=$2 key=$3 job=$4 file=$5 r bytes
    log "$s: $key: fio $job of $file ($SIZE)"
    run_fio "$s" "$job" "$file" || return 1
    r=$R
    bytes=${r#* }
    [ "$bytes" = "$size_bytes" ] || log "$s: $key: fio wrote $bytes bytes, expected $size_bytes"
    put "$s" "${key}_write" "${r%% *}"
    $cold || { log "$s: cold cycle failed"; return 1; }
    log "$s: $key: sequential read 1 MiB of $file, cold"
    run_fio "$s" seqread "$file" || return 1
    r=$R
    put "$s" "${key}_read" "${r%% *}"
    file_blocks "$s" "${key}_stat" "$file"
}
run_set() {
    local s=$1 cold=$2 ok=0
    run_pattern "$s" "$cold" random randwrite rand || ok=1
    run_pattern "$s" "$cold" sequential seqwrite seq || ok=1
    return $ok
}

# ------------------------------------------------------------------ tarn
tarn_mountpoint() {    # where the daemon mounted dataset $1, if it did
    local ds=$1 mp c
    mp=$("$TARN_BIN" zfs get -H -o value mountpoint "$ds" 2>/dev/null)
    for c in "$TARN_MOUNT_ROOT/$ds" "$TARN_MOUNT_ROOT$mp" "$mp" "/$ds"; do
        [ -n "$c" ] && [ "$c" != "$TARN_MOUNT_ROOT" ] || continue
        case "$(findmnt -n -M "$c" -o FSTYPE 2>/dev/null)" in
            fuse*) echo "$c"; return 0 ;;
        esac
    done
    return 1
}
tarn_wait_mounted() {  # dataset → MNT
    local i
    for i in $(seq 100); do
        MNT=$(tarn_mountpoint "$1") && return 0
        sleep 0.2
    done
    return 1
}
# Export/import run under `timeout --foreground`, in this shell's process
# group: a Ctrl-C kills the command, timeout dies of the same signal, and
# bash then runs the INT trap (it skips the trap when a foreground child
# survives SIGINT, which a command in timeout's own process group would).
tarn_cold() {
    timeout --foreground 300 "$TARN_BIN" zpool export "$TPOOL" >/dev/null || return 1
    drop_caches
    timeout --foreground 300 "$TARN_BIN" zpool import -d "$work/tarn/vdevs" "$TPOOL" >/dev/null || return 1
    tarn_wait_mounted "$TPOOL/$DS" || return 1
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
    # own session: a Ctrl-C on the terminal goes to this script, whose
    # cleanup then destroys the pool and stops the daemon in that order
    setsid "$TARN_BIN" daemon --foreground >"$work/tarn/daemon.out" 2>&1 &
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
    if ! err=$("$TARN_BIN" zfs create -o recordsize=$RECORDSIZE -o compression=off "$TPOOL/$DS" 2>&1); then
        na_all $s "zfs create -o recordsize=$RECORDSIZE failed: $err"; tarn_stop; return
    fi
    if ! tarn_wait_mounted "$TPOOL/$DS"; then
        na_all $s "dataset created but not mounted (FUSE mounting not there yet?)"; tarn_stop; return
    fi
    put $s config "$("$TARN_BIN" --version 2>/dev/null | head -1); ashift 12; $("$TARN_BIN" zfs get -H -o property,value recordsize,compression,atime "$TPOOL/$DS" 2>/dev/null | tr '\t\n' '= ' | sed 's/ $//')"
    put $s recordsize "$(numfmt --from=iec "$RECORDSIZE")"
    log "tarn: dataset $TPOOL/$DS mounted at $MNT"
    if ! run_set $s tarn_cold; then
        put $s reason "a step failed (see log above)"
        log "tarn: daemon output (last lines):"; tail -20 "$work/tarn/daemon.out" >&2
    fi
    tarn_stop
}

# -------------------------------------------------------------- zfs-fuse
zfs_cold() {
    timeout --foreground 300 zpool export "$ZPOOL" >/dev/null || return 1
    drop_caches
    timeout --foreground 300 zpool import -o cachefile=none -d "$work/zfs/vdevs" "$ZPOOL" >/dev/null || return 1
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
    # own session, as the tarn daemon (see stack_tarn)
    setsid zfs-fuse --no-daemon --no-kstat-mount >"$work/zfs/daemon.out" 2>&1 &
    ZFS_PID=$!
    local i
    for i in $(seq 100); do zpool list >/dev/null 2>&1 && break; kill -0 "$ZFS_PID" 2>/dev/null || break; sleep 0.1; done
    zpool list >/dev/null 2>&1 || { na_all $s "zfs-fuse did not start: $(tail -2 "$work/zfs/daemon.out")"; zfs_stop; return; }
    truncate -s "$dev_bytes" "$work/zfs/vdevs/a.img" "$work/zfs/vdevs/b.img"
    local err
    if ! err=$(zpool create -o ashift=12 -o cachefile=none -m "$work/zfs/mnt" "$ZPOOL" mirror \
            "$work/zfs/vdevs/a.img" "$work/zfs/vdevs/b.img" 2>&1); then
        na_all $s "zpool create failed: $err"; zfs_stop; return
    fi
    local rs=$RECORDSIZE
    if ! err=$(zfs create -o recordsize=$rs -o compression=off "$ZPOOL/$DS" 2>&1); then
        # pool v23: recordsize ≤ 128K
        log "zfs-fuse: recordsize=$rs refused ($(tr '\n' ' ' <<<"$err")); using 128K"
        rs=128K
        put $s note "recordsize=$RECORDSIZE refused by zfs-fuse (pool v23 maximum is 128K): ran with recordsize=128K"
        if ! err=$(zfs create -o recordsize=$rs -o compression=off "$ZPOOL/$DS" 2>&1); then
            na_all $s "zfs create failed: $err"; zfs_stop; return
        fi
    fi
    MNT=$work/zfs/mnt/$DS
    for i in $(seq 100); do [ "$(findmnt -n -M "$MNT" -o FSTYPE 2>/dev/null)" = fuse.zfs ] && break; sleep 0.1; done
    [ "$(findmnt -n -M "$MNT" -o FSTYPE 2>/dev/null)" = fuse.zfs ] || { na_all $s "dataset $ZPOOL/$DS not mounted at $MNT"; zfs_stop; return; }
    put $s config "zfs-fuse pool v$(zpool get version "$ZPOOL" 2>/dev/null | awk 'NR == 2 {print $3}'); ashift 12; $(zfs get -H -o property,value recordsize,compression,atime "$ZPOOL/$DS" | tr '\t\n' '= ' | sed 's/ $//')"
    put $s recordsize "$(numfmt --from=iec "$rs")"
    log "zfs-fuse: dataset $ZPOOL/$DS mounted at $MNT"
    run_set $s zfs_cold || put $s reason "a step failed (see log above)"
    zfs_stop
}

# ------------------------------------------------------------------ run
log "work dir $work; files of ${SIZE} ($size_bytes bytes), recordsize $RECORDSIZE, stacks: ${STACKS[*]}"
for s in "${STACKS[@]}"; do
    case "$s" in
        tarn) stack_tarn ;;
        zfs-fuse) stack_zfs ;;
    esac
done

# ---------------------------------------------------------------- table
python3 - "$results" "$SIZE" "$RECORDSIZE" "$(fio --version)" "$(uname -r)" <<'EOF'
import math, os, sys
res, size, rs, fiov, kernel = sys.argv[1:6]
stacks = ["tarn", "zfs-fuse"]
THRESHOLD = 0.8

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

def fmt(v):
    if not isinstance(v, float):
        return "n/a"
    return f"{v:.1f}" if v < 100 else f"{v:,.0f}"

def ratio(s):
    a, b = get(s, "random_read"), get(s, "sequential_read")
    if not isinstance(a, float) or not isinstance(b, float) or b == 0:
        return None
    return a / b

print(f"fio {fiov.replace('fio-', '')}, kernel {kernel}, each file {size}, dataset recordsize {rs} "
      "(zfs-fuse: see notes), compression off; one thread, queue depth 1, buffered; "
      "each stack a mirror of two sparse files on the same disk. "
      "Cold = export/import + drop_caches. MB/s = 10^6 bytes/s.\n")
hdr = "| write pattern (new file) |"
sep = "|---|"
for s in stacks:
    hdr += f" {s} write MB/s | {s} cold seq read MB/s | {s} read ÷ read(sequentially written) |"
    sep += "---:|---:|---:|"
print(hdr)
print(sep)
rows = [("random", "16 KiB random writes (every block once), end fsync"),
        ("sequential", "1 MiB sequential writes, end fsync (baseline)")]
for key, label in rows:
    line = f"| {label} |"
    for s in stacks:
        r = ratio(s)
        if key == "sequential":
            rr = "1.00 (baseline)" if r is not None else "n/a"
        else:
            rr = "n/a" if r is None else f"**{r:.2f}**"
        line += f" {fmt(get(s, key + '_write'))} | {fmt(get(s, key + '_read'))} | {rr} |"
    print(line)

print()
for s in stacks:
    r = ratio(s)
    if r is None:
        v = "n/a"
    elif r >= THRESHOLD:
        v = f"holds (ratio {r:.2f} ≥ {THRESHOLD})"
    else:
        v = f"**does not hold** (ratio {r:.2f} < {THRESHOLD})"
    print(f"- {s}: claim (random-written file reads back at ≥ {THRESHOLD}× sequential-written speed): {v}")

print()
print("Notes:")
for s in stacks:
    c, why, note = get(s, "config"), get(s, "reason"), get(s, "note")
    line = f"- {s}: " + (c if isinstance(c, str) else "not run")
    if isinstance(note, str):
        line += f"; {note}"
    if isinstance(why, str):
        line += f" — n/a: {why}"
    print(line)
    for key, label in (("random", "random-written"), ("sequential", "sequentially written")):
        st = get(s, key + "_stat")
        if not isinstance(st, str):
            continue
        fsize, blksize, nblk, unit = (int(x) for x in st.split())
        blocks = -(-fsize // blksize) if blksize else 0
        warn = ""
        want = get(s, "recordsize")
        if isinstance(want, float) and blksize != want:
            warn = f" — **not the dataset's recordsize ({int(want) // 1024} KiB)**"
        print(f"  - {label} file (stat after the cold read): {fsize / 2**20:,.0f} MiB, "
              f"st_blksize {blksize // 1024} KiB → {blocks:,} blocks of {blksize // 1024} KiB{warn}; "
              f"{nblk * unit / 2**20:,.1f} MiB allocated (st_blocks; one mirror side)")
EOF
