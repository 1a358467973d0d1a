# shellcheck shell=bash
# Shared by the bench/*.sh scripts (sourced, not run):
# options, work directory, cleanup trap, fio runs, and the tarn and zfs-fuse
# stacks (private daemon, mirror of two sparse files, optionally a log
# device on tmpfs, cold cycle).
#
# The sourcing script sets, before calling these:
#   SIZE STACKS    defaults of --size and of the stacks (--only)
#   TPOOL ZPOOL    pool names;  TDS ZDS  the dataset measured (the pool
#                  itself or a child), mounted at $MNT
#   fiodir FIO_ENV directory of the *.fio jobs and their VAR=value env
# and defines:
#   script_option OPT [ARG]  its own options: sets them and returns how
#                  many arguments it took (0: not one of its own)
#   setup_dataset STACK      after pool creation: create $TDS/$ZDS if it is
#                  not the pool (returns non-zero after na_all)
#   run_set STACK COLDFN     the measurements on $MNT
#
# Stacks (run_stacks): tarn, zfs-fuse, the same two with a separate intent
# log (SLOG) — tarn+slog, zfs-fuse+slog: `mirror a b log SHM/slog.img`, a
# sparse $SLOG_SIZE file in a private directory under /dev/shm — btrfs
# (raid1 on two loop devices) and stack_NAME of the script for any other
# NAME. Within one run every tarn
# stack uses the same copy of the binary, built (or taken from $TARN) once.
#
# Interrupts: every long step (fio, file creation) runs as a background job
# that the script `wait`s for, export/import run under `timeout
# --foreground`, and daemons run in their own session, so a Ctrl-C (or a
# SIGINT/SIGTERM to the script) runs the cleanup at once, which destroys
# the pools before stopping the daemons.

ONLY=()
BASE=/var/tmp
STEP_TIMEOUT=1800   # a hung file system fails its row instead of the run
NAME=$(basename "$0" .sh)
TARN_BIN=${TARN:-$repo/target/release/tarn}
TARN_READY=         # 1: $TARN_BIN is our private copy; else why not
TARN_PID=
ZFS_PID=
SLOG_SIZE=1G        # each log device: a sparse file on tmpfs
SHM=                # /dev/shm/<name of $work>, made by make_slog
SLOG=               # the log device of the pool being measured, if any
BG_PID=
BG_WHAT=
CREATED_DIRS=()
STOPS=(tarn_stop zfs_stop btrfs_stop)   # run by cleanup; a script adds its own stacks'
work=
R=

log() { printf '[%s %s] %s\n' "$NAME" "$(date +%T)" "$*" >&2; }
usage() { sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit "${1:-0}"; }

# --size, --only, -h and WORKDIR; anything else starting with - goes to
# script_option.
parse_args() {
    local o n
    while [ $# -gt 0 ]; do
        case "$1" in
            --size) SIZE=$2; shift 2 ;;
            --size=*) SIZE=${1#*=}; shift ;;
            --only) IFS=, read -ra o <<<"$2"; ONLY+=("${o[@]}"); shift 2 ;;
            --only=*) IFS=, read -ra o <<<"${1#*=}"; ONLY+=("${o[@]}"); shift ;;
            -h|--help) usage 0 ;;
            -*) script_option "$@"; n=$?
                [ "$n" -gt 0 ] || { echo "unknown option $1" >&2; usage 2; }
                shift "$n" ;;
            *) BASE=$1; shift ;;
        esac
    done
}

# check_setup WHY: --only against STACKS, root (WHY: what root is for),
# the tools, --size → size_bytes.
check_setup() {
    local all="${STACKS[*]}" s t
    [ ${#ONLY[@]} -gt 0 ] && STACKS=("${ONLY[@]}")
    for s in "${STACKS[@]}"; do
        case " $all " in *" $s "*) ;; *) echo "unknown stack '$s' (${all// /, })" >&2; exit 2 ;; esac
    done
    [ "$(id -u)" = 0 ] || { echo "$NAME.sh must run as root ($1)" >&2; exit 2; }
    for t in fio python3 findmnt numfmt; do
        command -v "$t" >/dev/null || { echo "missing $t (apt-get install -y fio)" >&2; exit 2; }
    done
    size_bytes=$(numfmt --from=iec "${SIZE%[bB]}") || { echo "bad --size $SIZE" >&2; exit 2; }
}

# check_space BYTES: exits unless $BASE's file system has BYTES free (what
# one stack's sparse devices can fill). A disk that fills up mid-run fails
# whichever stack is running with I/O errors (btrfs goes read-only), and
# its rows then look like that stack's fault.
check_space() {
    local d=$BASE avail
    while [ ! -d "$d" ]; do d=$(dirname "$d"); done   # $BASE may not exist yet
    avail=$(df -B1 --output=avail "$d" | tail -n 1 | tr -d ' ')
    if [ "${avail:-0}" -lt "$1" ]; then
        echo "$NAME.sh: $BASE has $(numfmt --to=iec "${avail:-0}") free, a stack's devices may take $(numfmt --to=iec "$1"): free some space or give another directory" >&2
        exit 2
    fi
}

# make_work PREFIX: a fresh $BASE/PREFIX.XXXXXX as $work (with $results),
# removed with everything in it by the exit trap.
make_work() {
    mkdir -p "$BASE"
    work=$(mktemp -d "$BASE/$1.XXXXXX") || exit 2
    results=$work/results
    mkdir -p "$results"
    trap cleanup EXIT
    trap 'exit 130' INT TERM
}

# --------------------------------------------------------------- cleanup
umount_under() {   # every mount below $1, deepest first
    local m
    [ -n "$1" ] || return 0
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
    drop_slog tarn
    umount_under "$work/tarn"
    # The devices go at once: the next stack needs the disk space.
    if [ -n "$work" ]; then rm -rf --one-file-system "$work/tarn/vdevs"; fi
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
    drop_slog zfs
    umount_under "$work/zfs"
    if [ -n "$work" ]; then rm -rf --one-file-system "$work/zfs/vdevs"; fi
}
cleanup() {
    local rc=$? f d
    trap - EXIT INT TERM
    [ -n "$BG_PID" ] && { log "stopping $BG_WHAT"; stop_pid "$BG_PID"; }
    for f in "${STOPS[@]}"; do "$f"; done
    if [ -n "$work" ]; then
        umount_under "$work"
        rm -rf --one-file-system "$work"
    fi
    for d in "${CREATED_DIRS[@]}" ${SHM:+"$SHM"}; do rm -rf --one-file-system "$d"; done
    exit "$rc"
}

# --------------------------------------------------------------- helpers
drop_caches() { sync; echo 3 >/proc/sys/vm/drop_caches; }
# quiesce: before a stack's first measured job, waits (up to 30 s) until
# the disk under $work has done no reads, writes or discards for half a
# second, after a sync. Without it a stack's first job also pays for
# what the host still writes out from before it (bench/README.md has the
# measurements: a build just before, unsynced writes).
quiesce() {
    local dev stat last cur i t0=$SECONDS
    drop_caches
    dev=$(readlink -f "$(findmnt -n -T "$work" -o SOURCE)" 2>/dev/null) || return 0
    stat=/sys/class/block/${dev##*/}/stat
    [ -r "$stat" ] || return 0
    last=$(awk '{ print $1, $5, $12 }' "$stat")
    for i in $(seq 60); do
        sleep 0.5
        cur=$(awk '{ print $1, $5, $12 }' "$stat")
        if [ "$cur" = "$last" ]; then
            log "disk quiet after $(( SECONDS - t0 )) s"; return 0
        fi
        last=$cur
    done
    log "the disk under $work was still busy after 30 s; measuring anyway"
}
# make_slog DIR: SLOG=$SHM/DIR/slog.img, a new sparse file of SLOG_SIZE on
# tmpfs, alone in its directory (what `zpool import -d` scans). $SHM is
# named after $work and removed by cleanup; drop_slog DIR (run by the
# stack's stop function, after the pool is destroyed) frees the memory at
# once.
make_slog() {
    if [ -z "$SHM" ]; then
        SHM=/dev/shm/${work##*/}
        mkdir -m 0700 "$SHM" || { SHM=; return 1; }
    fi
    SLOG=$SHM/$1/slog.img
    mkdir -p "$SHM/$1" && truncate -s "$SLOG_SIZE" "$SLOG"
}
drop_slog() {   # DIR: if the current log device is $SHM/DIR's
    [ -n "$SLOG" ] && [ "${SLOG%/*}" = "$SHM/$1" ] || return 0
    rm -rf --one-file-system "${SLOG%/*}"
    SLOG=
}
slog_config() { [ -z "$SLOG" ] || echo "; log device $SLOG ($SLOG_SIZE sparse file on tmpfs)"; }
put() { printf '%s\n' "$3" >"$results/$1.$2"; }            # stack key value
na_all() {                                                  # stack reason
    log "$1: n/a — $2"
    put "$1" reason "$2"
}

# run_bg WHAT OUT ERR CMD...: CMD with stdout to file OUT and stderr to
# file ERR ("": the script's own; stdin is the caller's) as a background job
# of this shell, waited for with `wait`, so a Ctrl-C reaches this shell's
# trap at once (bash would not run the trap while a foreground child that
# caught SIGINT itself is still running), and cleanup stops it by its pid.
# CMD should be `timeout ...`, which passes the TERM on. (OUT and ERR are
# not redirections of run_bg itself: the trap would run inside them.)
run_bg() {
    local out=$2 err=$3 rc
    BG_WHAT=$1; shift 3
    (
        [ -z "$out" ] || exec >"$out"
        [ -z "$err" ] || exec 2>"$err"
        exec "$@"
    ) <&0 &
    BG_PID=$!
    wait "$BG_PID"; rc=$?
    BG_PID=
    return "$rc"
}

# run_fio STACK JOB [FILE [VAR=value...]] → R="MB/s IOPS p50_us p99_us
# bytes" of the job $fiodir/JOB.fio (job section JOB; with group_reporting
# the sum of its threads), run on $MNT with env DIR, FILE, FIO_ENV and the
# VAR=values; p50/p99 are of fio's sync latency, or for a job without
# syncs of its writes' (else reads') completion latency.
run_fio() {
    local stack=$1 job=$2 file=${3:-} out rc what tag
    shift 2; [ $# -gt 0 ] && shift
    what="$job${file:+ $file}${*:+ $*}"
    tag=$(IFS=.; echo "$*")
    out=$work/$stack.$job${file:+.$file}${tag:+.$tag}.json
    R=
    run_bg fio /dev/null "$out.err" env DIR="$MNT" FILE="$file" "${FIO_ENV[@]}" "$@" \
        timeout -k 10 "$STEP_TIMEOUT" fio --output-format=json --output="$out" "$fiodir/$job.fio"
    rc=$?
    if [ "$rc" -ne 0 ]; then
        log "$stack: fio $what failed (exit $rc): $(tail -3 "$out.err" | tr '\n' ' ')"
        return 1
    fi
    R=$(python3 - "$out" "$job" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
job = next(j for j in doc["jobs"] if j["jobname"] == sys.argv[2])
if job["error"]:
    sys.exit(f"fio job error {job['error']}")
d = job["write"] if job["write"]["io_bytes"] else job["read"]
# fsync latency if the job syncs, else the whole latency if the job asked
# for its percentiles (lat_percentiles), else the completion latency.
lat = d.get("lat_ns", {})
pct = (job["sync"]["lat_ns"] if job["sync"]["total_ios"]
       else lat if "percentile" in lat else d["clat_ns"]).get("percentile", {})
us = lambda k: pct[k] / 1000 if k in pct else float("nan")
print(f'{d["bw_bytes"] / 1e6:.1f} {d["iops"]:.0f} {us("50.000000"):.0f} {us("99.000000"):.0f} {d["io_bytes"]}')
EOF
) || { log "$stack: fio $what: no result in $out"; return 1; }
}

# z STACK zfs|zpool ARGS...: the command on stack STACK's zfs(8) (tarn's
# binary for tarn, the system's for zfs-fuse); pool_of STACK: its pool.
z() {   # STACK zfs|zpool ARGS...
    local s=$1; shift
    if [ "$s" = tarn ]; then "$TARN_BIN" "$@"; else "$@"; fi
}
pool_of() { [ "$1" = tarn ] && echo "$TPOOL" || echo "$ZPOOL"; }

# fill DIR FILES BYTES: FILES files of BYTES/FILES bytes each of random
# data in DIR (1,000 a directory: d0000/f000 …), as a background job.
fill() {   # DIR FILES BYTES
    run_bg fill /dev/null "$work/fill.err" timeout -k 10 "$STEP_TIMEOUT" python3 - "$@" <<'EOF'
import os, sys
root, files, total = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
each = total // files
buf = os.urandom(1 << 20)
for i in range(files):
    d = os.path.join(root, f"d{i // 1000:04}")
    if i % 1000 == 0:
        os.makedirs(d, exist_ok=True)
    fd = os.open(os.path.join(d, f"f{i % 1000:03}"), os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    left, at = each, (i * 4096) % len(buf)
    while left > 0:
        n = min(left, len(buf) - at)
        os.write(fd, buf[at:at + n])
        left -= n
        at = 0
    os.close(fd)
EOF
}

# need_whole_mib: SIZE must be a positive multiple of 1 MiB (the file
# benchmarks write it in 1 MiB records).
need_whole_mib() {
    [ $(( size_bytes % (1024 * 1024) )) -eq 0 ] && [ "$size_bytes" -gt 0 ] ||
        { echo "--size must be a positive multiple of 1 MiB" >&2; exit 2; }
}

# setup_rs_dataset STACK: creates $TDS/$ZDS with recordsize=$RECORDSIZE
# and compression off. zfs-fuse (pool v23) refuses recordsize above 128K:
# it then gets 128K, noted for the table (`note`). Stores the record size
# used (`recordsize`); returns non-zero after na_all.
setup_rs_dataset() {
    local s=$1 rs=$RECORDSIZE err
    local zfs=(zfs) ds=$ZDS
    [ "$s" = tarn ] && { zfs=("$TARN_BIN" zfs); ds=$TDS; }
    if ! err=$("${zfs[@]}" create -o recordsize=$rs -o compression=off "$ds" 2>&1); then
        if [ "$s" = tarn ]; then
            na_all $s "zfs create -o recordsize=$rs failed: $err"; return 1
        fi
        log "zfs-fuse: recordsize=$rs refused ($(tr '\n' ' ' <<<"$err")); using 128K"
        rs=128K
        put $s note "recordsize=$RECORDSIZE refused by zfs-fuse (pool v23 maximum is 128K): ran with recordsize=128K"
        if ! err=$("${zfs[@]}" create -o recordsize=$rs -o compression=off "$ds" 2>&1); then
            na_all $s "zfs create failed: $err"; return 1
        fi
    fi
    put $s recordsize "$(numfmt --from=iec "$rs")"
}

# fill_job: $fiodir/fill.fio, job [fill]: a new file FILE of SIZE in DIR,
# 1 MiB sequential writes of fio's random data, fsync at the end (what
# the scrub and resilver benchmarks fill a pool with).
fill_job() {
    cat >"$fiodir/fill.fio" <<'EOF'
[global]
ioengine=psync
direct=0
fallocate=none
numjobs=1

[fill]
filename=${DIR}/${FILE}
rw=write
bs=1M
size=${SIZE}
end_fsync=1
EOF
}

# table RESULTS ARGS... <<'EOF' (python): the script on stdin, run with
# argv[1:] = RESULTS ARGS... after imports (math, os, statistics, sys) and
# get(stack, key): what put stored (a float, a string or None), read from
# `res`, which the script sets from argv[1]. A script that runs its stacks
# in rounds puts each round's results in `res`/round1, round2, ...:
# values(stack, key) lists them in round order, and get() is then the
# median of the numbers (or the first string).
table() {
    { cat <<'EOF'
import math, os, statistics, sys

def values(stack, key):
    dirs = [res] + [os.path.join(res, d) for d in sorted(
        (d for d in os.listdir(res) if d.startswith("round") and d[5:].isdigit()),
        key=lambda d: int(d[5:]))]
    out = []
    for d in dirs:
        p = os.path.join(d, f"{stack}.{key}")
        if not os.path.exists(p):
            continue
        v = open(p).read().strip()
        try:
            f = float(v)
            out.append(None if math.isnan(f) else f)
        except ValueError:
            out.append(v)
    return out

def get(stack, key):
    vals = values(stack, key)
    nums = [v for v in vals if isinstance(v, float)]
    if nums:
        return statistics.median(nums)
    strs = [v for v in vals if isinstance(v, str)]
    return strs[0] if strs else None

EOF
      cat; } | python3 - "$@"
}

# ----------------------------------------------------------------- btrfs
# stack_btrfs: raid1 (data and metadata) on two loop devices over sparse
# files of $dev_bytes; cold = umount + mount.
LOOPS=()
btrfs_stop() {
    umount_under "$work/btrfs"
    local l
    [ ${#LOOPS[@]} -gt 0 ] && btrfs device scan --forget "${LOOPS[@]}" >/dev/null 2>&1
    for l in "${LOOPS[@]}"; do losetup -d "$l" 2>/dev/null || true; done
    LOOPS=()
    if [ -n "$work" ]; then rm -rf --one-file-system "$work/btrfs"; fi
}
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
tarn_wait_mounted() {  # $TDS mounted → MNT
    local i
    for i in $(seq 100); do
        MNT=$(tarn_mountpoint "$TDS") && return 0
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
    timeout --foreground 300 "$TARN_BIN" zpool import -d "$work/tarn/vdevs" ${SLOG:+-d "${SLOG%/*}"} "$TPOOL" >/dev/null || return 1
    tarn_wait_mounted || return 1
    drop_caches
}
what_ds() { [ "$1" = "$2" ] && echo pool || echo dataset; }   # DS POOL
# Once per run: cargo build (unless $TARN is given), then a private copy
# $work/tarn.bin becomes TARN_BIN, so that every tarn stack of the run
# measures the same binary even if the tree is rebuilt meanwhile. Fails
# with the reason in TARN_READY.
tarn_prepare() {
    if [ -z "$TARN_READY" ]; then
        if [ -z "${TARN:-}" ]; then
            log "tarn: cargo build --release --bin tarn"
            if ! (cd "$repo" && cargo build --release --bin tarn) >"$work/build.log" 2>&1; then
                tail -5 "$work/build.log" >&2
                TARN_READY="cargo build failed"; return 1
            fi
        fi
        if [ -x "$TARN_BIN" ] && cp "$TARN_BIN" "$work/tarn.bin"; then
            TARN_BIN=$work/tarn.bin TARN_READY=1
        else
            TARN_READY="no binary at $TARN_BIN"
        fi
    fi
    [ "$TARN_READY" = 1 ]
}
# tarn_daemon_start: a private daemon on a fresh $work/tarn (vdevs/,
# root/ for the mounts, run/), the TARN_* variables exported, TARN_PID
# set; fails if it does not answer (its output: $work/tarn/daemon.out).
tarn_daemon_start() {
    local i
    rm -rf --one-file-system "$work/tarn"   # an earlier tarn stack's
    mkdir -p "$work/tarn/vdevs" "$work/tarn/root"
    mkdir -m 0700 "$work/tarn/run"
    export TARN_RUN_DIR=$work/tarn/run TARN_SOCKET=$work/tarn/run/tarn.sock
    export TARN_CACHEFILE=$work/tarn/tarn.cache TARN_MOUNT_ROOT=$work/tarn/root
    # own session: a Ctrl-C on the terminal goes to this script, whose
    # cleanup then destroys the pool and stops the daemon in that order
    setsid "$TARN_BIN" daemon --foreground >"$work/tarn/daemon.out" 2>&1 &
    TARN_PID=$!
    for i in $(seq 100); do [ -S "$TARN_SOCKET" ] && break; kill -0 "$TARN_PID" 2>/dev/null || break; sleep 0.1; done
    "$TARN_BIN" zpool list >/dev/null 2>&1
}
stack_tarn() {   # [STACK [slog [nosync]]]: STACK names the results (default tarn)
    local s=${1:-tarn} slog=${2:-} nosync=${3:-} err what
    what=$(what_ds "$TDS" "$TPOOL")
    tarn_prepare || { na_all $s "$TARN_READY"; return; }
    if [ -n "$slog" ] && ! make_slog tarn; then
        na_all $s "cannot make a log device in /dev/shm"; drop_slog tarn; return
    fi
    if ! tarn_daemon_start; then
        na_all $s "daemon did not start: $(tail -2 "$work/tarn/daemon.out" | tr '\n' ' ')"; tarn_stop; return
    fi
    truncate -s "$dev_bytes" "$work/tarn/vdevs/a.img" "$work/tarn/vdevs/b.img"
    if ! err=$("$TARN_BIN" zpool create -o ashift=12 "$TPOOL" mirror \
            "$work/tarn/vdevs/a.img" "$work/tarn/vdevs/b.img" ${SLOG:+log "$SLOG"} 2>&1); then
        na_all $s "zpool create failed: $err"; tarn_stop; return
    fi
    [ -d "/$TPOOL" ] && TARN_TOPLEVEL_MNT=/$TPOOL   # if TARN_MOUNT_ROOT was ignored
    setup_dataset $s || { tarn_stop; return; }
    if [ -n "$nosync" ] && ! err=$("$TARN_BIN" zfs set sync=disabled "$TDS" 2>&1); then
        na_all $s "zfs set sync=disabled failed: $err"; tarn_stop; return
    fi
    if ! tarn_wait_mounted; then
        na_all $s "$what created but not mounted (FUSE mounting not there yet?)"; tarn_stop; return
    fi
    put $s config "$("$TARN_BIN" --version 2>/dev/null | head -1); ashift 12; $("$TARN_BIN" zfs get -H -o property,value recordsize,compression,atime,sync "$TDS" 2>/dev/null | tr '\t\n' '= ' | sed 's/ $//')$(slog_config)"
    log "$s: $what $TDS mounted at $MNT"
    if ! run_set $s tarn_cold; then
        put $s reason "a step failed (see log above)"
        log "$s: daemon output (last lines):"; tail -20 "$work/tarn/daemon.out" >&2
    fi
    tarn_stop
}

# -------------------------------------------------------------- zfs-fuse
zfs_wait_mounted() {   # $MNT is a zfs-fuse mount (within 10 s)
    local i
    for i in $(seq 100); do
        [ "$(findmnt -n -M "$MNT" -o FSTYPE 2>/dev/null)" = fuse.zfs ] && return 0
        sleep 0.1
    done
    return 1
}
zfs_cold() {
    timeout --foreground 300 zpool export "$ZPOOL" >/dev/null || return 1
    drop_caches
    timeout --foreground 300 zpool import -o cachefile=none -d "$work/zfs/vdevs" ${SLOG:+-d "${SLOG%/*}"} "$ZPOOL" >/dev/null || return 1
    zfs_wait_mounted || return 1
    drop_caches
}
stack_zfs() {   # [STACK [slog]]: STACK names the results (default zfs-fuse)
    local s=${1:-zfs-fuse} slog=${2:-} d i err what
    what=$(what_ds "$ZDS" "$ZPOOL")
    command -v zfs-fuse >/dev/null || { na_all $s "zfs-fuse not installed (apt-get install -y zfs-fuse)"; return; }
    if pgrep -x zfs-fuse >/dev/null; then
        na_all $s "another zfs-fuse daemon is running (it has one fixed socket); not touching it"; return
    fi
    for d in /var/run/zfs /var/lock/zfs; do
        [ -d "$d" ] || { mkdir -p "$d"; CREATED_DIRS+=("$d"); }
    done
    rm -rf --one-file-system "$work/zfs"   # an earlier zfs-fuse stack's
    mkdir -p "$work/zfs/vdevs" "$work/zfs/mnt"
    if [ -n "$slog" ] && ! make_slog zfs; then
        na_all $s "cannot make a log device in /dev/shm"; drop_slog zfs; return
    fi
    # Package defaults from /etc/zfs/zfsrc apply (Debian: ARC max 100 MiB,
    # prefetch off, FUSE attr/entry timeouts 3600 s).
    # own session, as the tarn daemon (see stack_tarn)
    setsid zfs-fuse --no-daemon --no-kstat-mount >"$work/zfs/daemon.out" 2>&1 &
    ZFS_PID=$!
    for i in $(seq 100); do zpool list >/dev/null 2>&1 && break; kill -0 "$ZFS_PID" 2>/dev/null || break; sleep 0.1; done
    zpool list >/dev/null 2>&1 || { na_all $s "zfs-fuse did not start: $(tail -2 "$work/zfs/daemon.out")"; zfs_stop; return; }
    truncate -s "$dev_bytes" "$work/zfs/vdevs/a.img" "$work/zfs/vdevs/b.img"
    if ! err=$(zpool create -o ashift=12 -o cachefile=none -m "$work/zfs/mnt" "$ZPOOL" mirror \
            "$work/zfs/vdevs/a.img" "$work/zfs/vdevs/b.img" ${SLOG:+log "$SLOG"} 2>&1); then
        na_all $s "zpool create failed: $err"; zfs_stop; return
    fi
    setup_dataset $s || { zfs_stop; return; }
    MNT=$work/zfs/mnt${ZDS#"$ZPOOL"}
    zfs_wait_mounted || { na_all $s "$what $ZDS not mounted at $MNT"; zfs_stop; return; }
    put $s config "zfs-fuse pool v$(zpool get version "$ZPOOL" 2>/dev/null | awk 'NR == 2 {print $3}'); ashift 12; $(zfs get -H -o property,value recordsize,compression,atime "$ZDS" | tr '\t\n' '= ' | sed 's/ $//')$(slog_config)"
    log "$s: $what $ZDS mounted at $MNT"
    run_set $s zfs_cold || put $s reason "a step failed (see log above)"
    zfs_stop
}

# run_rounds N: run_stacks N times; with more than one, each round's
# results go to $results/roundK (what table's values() reads).
run_rounds() {
    local n=$1 round base=$results
    for round in $(seq "$n"); do
        if [ "$n" -gt 1 ]; then
            results=$base/round$round
            mkdir -p "$results"
            log "round $round of $n"
        fi
        run_stacks
    done
    results=$base
}

run_stacks() {   # STACKS in order: stack_tarn, stack_zfs, stack_NAME
    local s
    for s in "${STACKS[@]}"; do
        case "$s" in
            tarn) stack_tarn ;;
            tarn+slog) stack_tarn "$s" slog ;;
            tarn+nosync) stack_tarn "$s" "" nosync ;;
            zfs-fuse) stack_zfs ;;
            zfs-fuse+slog) stack_zfs "$s" slog ;;
            *) "stack_$s" ;;
        esac
    done
}
