#!/usr/bin/env bash
# Peer benchmark (not a timed test): the same fio workload sets on tarn and
# its peers, backed by files on the same disk, and tables of tarn/peer
# ratios.
#
#   disk           no file system of ours: the backing files' file system
#                  written directly, the ceiling under the rows (a mirror's
#                  two files written at once; durable direct writes)
#   tarn           mirror of two sparse files, real target/release/tarn
#                  daemon (private TARN_RUN_DIR / TARN_SOCKET /
#                  TARN_CACHEFILE / TARN_MOUNT_ROOT), FUSE mount
#   tarn+slog      the same plus a log device: a sparse file in /dev/shm
#   tarn+nosync    tarn with sync=disabled: an fsync makes nothing durable,
#                  so its sync rows are what tarn's FUSE and data path do
#                  with no intent log at all, the ceiling of the CPUs under
#                  the tarn rows (sync-write set only)
#   zfs-fuse       the real ZFS in user space (pool v23), mirror of two files
#   zfs-fuse+slog  the same plus a log device in /dev/shm
#   btrfs          raid1 (data and metadata) on two loop devices
#
# Usage (as root):
#   bench/peers.sh [--sync | --no-sync] [--size SIZE] [--runtime SECONDS]
#                  [--rounds N] [--only STACK[,STACK]] [WORKDIR]
#
#   --sync     only the sync-write set (issue 4)
#   --no-sync  only the first set (issue 3); default: both
#   --size     size of the test file (fio syntax, default 2G); the
#              sync-write files are min(SIZE, 256M) in all
#   --runtime  time cap of the random and fsync jobs, length of each
#              sync-write job (default 20)
#   --rounds   run every stack N times, the stacks taking turns (tarn,
#              zfs-fuse, btrfs, tarn, ...), each time on a fresh pool or
#              file system (default 1). Each cell is then the median of
#              the N values, and the notes list them all: on a shared
#              virtual disk one run of one stack can be off by a third.
#   --only     disk, tarn, tarn+slog, tarn+nosync, zfs-fuse, zfs-fuse+slog
#              or btrfs (repeatable or comma-separated); the +slog and
#              +nosync stacks run only the sync-write set
#   WORKDIR    where the backing files go (default /var/tmp); the script
#              works in a fresh subdirectory and removes it at the end
#   TARN=PATH  env: use this tarn binary instead of building one
#
# The rows (job files in bench/fio/, described in bench/README.md):
#   first set: sequential write 1 MiB (MB/s) · sequential read 1 MiB, cold
#   (MB/s) · random read 16 KiB, cold (IOPS) · random write 16 KiB (IOPS) ·
#   4 KiB write + fsync each (IOPS, p99 fsync latency) · create 20,000
#   4 KiB files (files/s).
#   sync-write set: 4 KiB and 16 KiB random writes with an fsync after
#   each, 1 job and 8 jobs (each its own file): IOPS, p50 and p99 fsync
#   latency, RUNTIME seconds each, and how busy the CPUs were.
#   disk: sequential write = two new files of SIZE written at once with
#   direct 1 MiB writes, MB/s ÷ 2 (what a two-way mirror must write); sync
#   rows = pairs of direct O_DSYNC writes of BS to two files at once, one
#   pair at a time per job (what a mirror's intent-log block costs: without
#   a SLOG, no 1-job row can beat it), IOPS = pairs per second.
# "Cold" = pool exported and imported again (btrfs: umount + mount) and
# `echo 3 > /proc/sys/vm/drop_caches` right before the job.
# Each stack starts on a quiet host: sync, drop_caches, and the disk idle
# for half a second (`quiesce`).
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
ROUNDS=1
NFILES=20000
STACKS=(disk tarn tarn+slog tarn+nosync zfs-fuse zfs-fuse+slog btrfs)
SETS=(base sync)     # base: the issue-3 rows; sync: the sync-write set
SYNC_BS=(4k 16k)
SYNC_JOBS=(1 8)
script_option() {
    case "$1" in
        --rounds) ROUNDS=$2; return 2 ;;
        --rounds=*) ROUNDS=${1#*=}; return 1 ;;
        --runtime) RUNTIME=$2; return 2 ;;
        --runtime=*) RUNTIME=${1#*=}; return 1 ;;
        --sync) SETS=(sync); return 1 ;;
        --no-sync) SETS=(base); return 1 ;;
    esac
    return 0
}
parse_args "$@"
check_setup "mount, losetup, drop_caches"
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "bad --rounds $ROUNDS: a whole number, 1 or more" >&2; exit 2; }
has_set() { case " ${SETS[*]} " in *" $1 "*) return 0 ;; esac; return 1; }
sync_only() { [[ $1 == *+slog || $1 == *+nosync ]]; }   # STACK: only sync-write rows
if ! has_set sync; then   # the +slog and +nosync stacks only have sync-write rows
    kept=()
    for s in "${STACKS[@]}"; do sync_only "$s" || kept+=("$s"); done
    [ ${#kept[@]} -eq ${#STACKS[@]} ] || log "--no-sync: leaving out the +slog and +nosync stacks"
    STACKS=("${kept[@]}")
    [ ${#STACKS[@]} -gt 0 ] || { echo "nothing to run" >&2; exit 2; }
fi
syncsize_bytes=$(( size_bytes < 256 * 1024 * 1024 ? size_bytes : 256 * 1024 * 1024 ))
# Each mirror side holds everything: the test file, the fsync files, the
# small files and copy-on-write slack. Sparse, so only what is written counts.
dev_bytes=$(( 2 * size_bytes + 2 * 1024 * 1024 * 1024 ))
check_space $(( 2 * dev_bytes ))
FIO_ENV=(SIZE="$size_bytes" RUNTIME="$RUNTIME")

# The pools' root datasets are what is measured.
TPOOL=tarnpeers$$
ZPOOL=zfspeers$$
TDS=$TPOOL
ZDS=$ZPOOL
setup_dataset() { :; }
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

# CPU time of the whole machine, sampled every half second into a file
# while a job runs (the first line of /proc/stat with a timestamp), so the
# share of it that was busy can be taken over the job's measured part.
# With DAEMON (a tarn daemon's pid), each sample also carries the CPU time
# of its keep-awake thread (`fuser-awake`), which spins in otherwise idle
# time after each request: busy by design, not demand.
CPU_PID=
cpu_sample_start() {   # FILE [DAEMON]
    # One process for the whole job, starting none per sample: the shell
    # loop this replaces ran `cat` on every daemon thread's comm, `date`,
    # `head` and `awk` twice a second, and on two CPUs those ~80 processes
    # a second took the tarn+SLOG 16 KiB x 8 row from a p99 of 4.0-4.7 ms
    # to 6.0-7.4 ms and ~12 % of its IOPS (3 alternating pairs).
    python3 - "$1" "${2:-}" <<'EOF' &
import os, sys, time
out = open(sys.argv[1], "w", buffering=1)
daemon = sys.argv[2]
awake_stat = None

def find_awake():
    """The stat file of the daemon's keep-awake thread, if it has one."""
    base = f"/proc/{daemon}/task"
    try:
        tids = os.listdir(base)
    except OSError:
        return None
    for t in tids:
        try:
            with open(f"{base}/{t}/comm") as f:
                if f.read().strip() == "fuser-awake":
                    return f"{base}/{t}/stat"
        except OSError:
            pass
    return None

while True:
    awake = 0
    if daemon:
        awake_stat = awake_stat or find_awake()
        if awake_stat:
            try:
                with open(awake_stat) as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                awake = int(fields[11]) + int(fields[12])  # utime + stime
            except (OSError, IndexError, ValueError):
                awake_stat = None
    with open("/proc/stat") as f:
        line = f.readline().rstrip("\n")
    out.write(f"{time.time():.9f} {line} awake {awake}\n")
    time.sleep(0.5)
EOF
    CPU_PID=$!
}
cpu_sample_stop() {
    [ -n "$CPU_PID" ] || return 0
    kill "$CPU_PID" 2>/dev/null; wait "$CPU_PID" 2>/dev/null
    CPU_PID=
}
STOPS+=(cpu_sample_stop)
# cpu_busy FILE SECONDS → "BUSY AWAKE": percent of all CPUs' time busy
# (user, nice, system, irq, softirq; not idle, iowait or time stolen by the
# host) over the last SECONDS of the samples, and the percent of it that
# was the keep-awake thread's (0 without one); nan nan without samples.
cpu_busy() {
    python3 - "$1" "$2" <<'EOF'
import sys
rows = []
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) >= 10 and f[1] == "cpu" and f[-2] == "awake":
        rows.append((float(f[0]), [int(x) for x in f[2:10]], int(f[-1])))
if len(rows) < 2:
    print("nan nan")
    sys.exit()
end = rows[-1][0]
start = next((r for r in rows if r[0] >= end - float(sys.argv[2]) + 1), rows[0])
d = [b - a for a, b in zip(start[1], rows[-1][1])]
total = sum(d)
busy = d[0] + d[1] + d[2] + d[5] + d[6]   # user nice system irq softirq
awake = max(rows[-1][2] - start[2], 0)  # same unit (USER_HZ ticks)
print(f"{100 * busy / total:.0f} {100 * awake / total:.0f}" if total else "nan nan")
EOF
}

# Random writes of BS with an fsync after each, NJOBS jobs, each on its own
# file, syncsize_bytes in all, for RUNTIME s (bench/fio/syncwrite.fio) →
# results sync.BS.NJOBS.{iops,p50,p99,cpu}; done once per stack (the issue-3
# fsync row is the 4k × 1 one of the sync-write set). JOB (default
# syncwrite): the disk stack's dsyncwrite.
sync_job() {
    local s=$1 bs=$2 n=$3 job=${4:-syncwrite} k=sync.$2.$3 iops p50 p99 rc busy awake
    [ -e "$results/$s.$k.iops" ] && return 0
    log "$s: $bs random write + fsync each, $n job(s) (${RUNTIME}s)"
    cpu_sample_start "$work/$s.$k.cpu" "$([[ $s == tarn* ]] && echo "$TARN_PID")"
    run_fio "$s" "$job" "" BS="$bs" NJOBS="$n" FILESIZE=$(( syncsize_bytes / n ))
    rc=$?
    cpu_sample_stop
    [ "$rc" -eq 0 ] || return 1
    read -r _ iops p50 p99 _ <<<"$R"
    # dsyncwrite: fio counts writes, two per mirrored log block.
    [ "$job" = dsyncwrite ] && iops=$(( iops / 2 ))
    put "$s" "$k.iops" "$iops"
    put "$s" "$k.p50" "$p50"
    put "$s" "$k.p99" "$p99"
    read -r busy awake <<<"$(cpu_busy "$work/$s.$k.cpu" "$RUNTIME")"
    put "$s" "$k.cpu" "$busy"
    put "$s" "$k.awake" "$awake"
}

# The workload sets on the stack mounted at $MNT; COLDFN makes the next
# read cold. The +slog and +nosync stacks run only the sync-write set.
run_set() {
    local s=$1 cold=$2 bs n
    quiesce
    if has_set base && ! sync_only "$s"; then
        base_set "$s" "$cold" || return 1
    fi
    if has_set sync; then
        for bs in "${SYNC_BS[@]}"; do
            for n in "${SYNC_JOBS[@]}"; do sync_job "$s" "$bs" "$n"; done
        done
    fi
    return 0
}

# The issue-3 rows. run_fio sets R="MB/s IOPS p50_us p99_us bytes".
base_set() {
    local s=$1 cold=$2 iops
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
    sync_job "$s" 4k 1
    log "$s: create $NFILES files of 4 KiB"
    create_files "$s" && put "$s" create "$R" || log "$s: file creation failed"
    return 0
}

# ------------------------------------------------------------------ disk
# The disk itself, no file system of ours: files in a directory of the work
# directory, on the file system that holds every stack's backing files.
# The ceiling under the rows (bench/fio/mirrorwrite.fio, dsyncwrite.fio).
stack_disk() {
    local s=disk bs n
    MNT=$work/disk
    mkdir -p "$MNT"
    put $s config "$(findmnt -n -T "$MNT" -o FSTYPE,SOURCE | tr -s ' ') (the backing files' file system), direct writes"
    quiesce
    if has_set base; then
        log "$s: two new files of $SIZE written at once, direct 1 MiB (a mirror's writes)"
        run_fio $s mirrorwrite && put $s seqwrite "$(awk '{ printf "%.1f", $1 / 2 }' <<<"$R")"
        rm -f "$MNT"/mirror.*
        # The ceiling of issue 3's 4 KiB write + fsync row.
        sync_job $s 4k 1 dsyncwrite
        rm -f "$MNT"/dsync.*
    fi
    if has_set sync; then
        for bs in "${SYNC_BS[@]}"; do
            for n in "${SYNC_JOBS[@]}"; do
                sync_job $s "$bs" "$n" dsyncwrite
                rm -f "$MNT"/dsync.*
            done
        done
    fi
    rm -rf "$MNT"
}

# ------------------------------------------------------------------ run
log "work dir $work; sets: ${SETS[*]}; file ${SIZE} ($size_bytes bytes), fsync files $syncsize_bytes bytes in all, runtime cap ${RUNTIME}s, stacks: ${STACKS[*]}, rounds: $ROUNDS"
all_results=$results
for round in $(seq "$ROUNDS"); do
    results=$all_results/round$round
    mkdir -p "$results"
    [ "$ROUNDS" -eq 1 ] || log "round $round of $ROUNDS"
    run_stacks
done
results=$all_results

# ---------------------------------------------------------------- table
table "$results" "$SIZE" "$RUNTIME" "$NFILES" "$(fio --version)" "$(uname -r)" \
    "${SETS[*]}" "${STACKS[*]}" "$SLOG_SIZE" "$syncsize_bytes" "$ROUNDS" <<'EOF'
res, size, runtime, nfiles, fiov, kernel, sets, ran, slog_size, syncsize, rounds = sys.argv[1:12]
sets, ran, syncsize, rounds = sets.split(), ran.split(), int(syncsize), int(rounds)

def fmt(v):
    if v is None:
        return "n/a"
    if isinstance(v, str):
        return v
    return f"{v:.1f}" if v < 100 else f"{v:,.0f}"

def pct(v):
    return f"{v:.0f}" if isinstance(v, float) else fmt(v)

def ratio(a, b):
    if not isinstance(a, float) or not isinstance(b, float) or b == 0:
        return None
    return a / b

def r(x):
    return "n/a" if x is None else f"{x:.2f}×"

def verdict(ok):   # ok: list of True/False/None (not measured)
    ok = [o for o in ok if o is not None]
    return "n/a" if not ok else ("met" if all(ok) else "**not met**")

print(f"fio {fiov.replace('fio-', '')}, kernel {kernel}, file {size}, random/fsync jobs capped at {runtime} s; "
      "each stack backed by two sparse files on the same disk"
      + (f"; each cell the median of {rounds} rounds, the stacks taking turns (every value in the notes)"
         if rounds > 1 else "") + ".\n")
keys = []   # (key, label) of every number in the tables, for the notes

# ---------------------------------------------------------------- issue 3
if "base" in sets:
    stacks = ["tarn", "zfs-fuse", "btrfs"]
    # the rows the disk stack has a ceiling (or, for a latency, a floor) for
    disk_rows = {"seqwrite", "sync.4k.1.iops", "sync.4k.1.p99"}
    # key, label, higher is better, needs btrfs ratio (≥ 0.8×)
    rows = [
        ("seqwrite", "sequential write 1 MiB, MB/s", True, True),
        ("seqread", "sequential read 1 MiB after export/import (cold), MB/s", True, True),
        ("randread", "random read 16 KiB, cold, IOPS", True, False),
        ("randwrite", "random write 16 KiB, IOPS", True, False),
        ("sync.4k.1.iops", "4 KiB write + fsync each, IOPS", True, False),
        ("sync.4k.1.p99", "fsync p99 latency, µs (lower is better)", False, False),
        ("create", f"create {int(nfiles):,} 4 KiB files, files/s", True, False),
    ]
    print("| workload | tarn | zfs-fuse | btrfs | disk | tarn/zfs-fuse | tarn/btrfs | target (issue 3) |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    for key, label, higher, vs_btrfs in rows:
        keys.append((key, label))
        t, z, b = (get(s, key) for s in stacks)
        d = get("disk", key)
        rz, rb = ratio(t, z), ratio(t, b)
        if higher:
            target = "≥ 2× zfs-fuse" + (", ≥ 0.8× btrfs" if vs_btrfs else "")
            ok = [rz >= 2 if rz is not None else None]
            if vs_btrfs:
                ok.append(rb >= 0.8 if rb is not None else None)
        else:
            target = "≤ 0.5× zfs-fuse"
            ok = [rz <= 0.5 if rz is not None else None]
        v = "n/a" if None in ok else ("met" if all(ok) else "**not met**")
        if key in disk_rows and isinstance(z, float) and isinstance(d, float):
            if higher and 2 * z > d:
                v += f" (2× zfs-fuse = {fmt(2 * z)}: above the disk's ceiling)"
            elif not higher and z / 2 < d:
                v += f" (0.5× zfs-fuse = {fmt(z / 2)}: below the disk's own p99)"
        print(f"| {label} | {fmt(t)} | {fmt(z)} | {fmt(b)} | {fmt(d) if key in disk_rows else ''} "
              f"| {r(rz)} | {r(rb)} | {target}: {v} |")
    print()

# ---------------------------------------------------------------- issue 4
if "sync" in sets:
    stacks = ["tarn", "tarn+slog", "tarn+nosync", "zfs-fuse", "zfs-fuse+slog", "btrfs", "disk"]
    print(f"Sync writes: random writes with an fsync after each (fio fsync=1), queue depth 1 per job, "
          f"{runtime} s each; 8 jobs = 8 threads each on its own file, IOPS summed, latency over all "
          f"fsyncs; files {syncsize // 2**20} MiB in all. SLOG = log device on a {slog_size} file in /dev/shm. "
          "disk = pairs of direct O_DSYNC writes of the same size, both sides of a mirror at once, on the "
          "backing files' file system, one pair per fsync (IOPS: pairs per second; latency: the "
          "writes'). CPU busy = share of both CPUs' time over the measured part "
          "(not idle, iowait or stolen by the host); for tarn, in brackets, the part of it that was "
          "its keep-awake thread spinning in otherwise idle time. tarn, sync=disabled = the tarn stack "
          "with fsync making nothing durable: what tarn's FUSE and data path do with no intent log, "
          "the most any tarn row can reach on these CPUs.\n")
    print("| sync writes | tarn | tarn+SLOG | tarn, sync=disabled | zfs-fuse | zfs-fuse+SLOG | btrfs | disk "
          "| tarn/zfs-fuse | tarn/zfs-fuse, both SLOG | target (issue 4) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")

    def row(label, vals, rz, rzs, target):
        print(f"| {label} | " + " | ".join(vals) + f" | {rz} | {rzs} | {target} |")

    for bs, bl in (("4k", "4 KiB"), ("16k", "16 KiB")):
        for n in (1, 8):
            jobs = "1 job" if n == 1 else f"{n} jobs"
            k = f"sync.{bs}.{n}"
            for m, what in (("iops", "IOPS"), ("p50", "fsync p50 µs"), ("p99", "fsync p99 µs"),
                            ("cpu", "CPU busy %")):
                keys.append((f"{k}.{m}", f"{bl}, {jobs}, {what}"))
                v = {s: get(s, f"{k}.{m}") for s in stacks}
                rz, rzs = ratio(v["tarn"], v["zfs-fuse"]), ratio(v["tarn+slog"], v["zfs-fuse+slog"])
                if m == "iops":
                    target = "≥ 3× zfs-fuse, same setup: " + verdict(
                        [x >= 3 if x is not None else None for x in (rz, rzs)])
                    z, d = v["zfs-fuse"], v["disk"]
                    if n == 1 and isinstance(z, float) and isinstance(d, float) and 3 * z > d:
                        target += f" (without SLOG, 3× zfs-fuse = {fmt(3 * z)}: above the disk's ceiling)"
                elif m == "p99":
                    q = ratio(v["tarn+slog"], v["tarn"])
                    target = (f"tarn+SLOG ≤ 0.5× tarn ({r(q)}): "
                              + verdict([q <= 0.5 if q is not None else None]))
                    # Half tarn's p99 against tarn's with no log at all.
                    t, free = v["tarn"], v["tarn+nosync"]
                    if (q is not None and q > 0.5 and isinstance(t, float)
                            and isinstance(free, float) and free > 0.5 * t):
                        target += (f" (0.5× tarn = {fmt(0.5 * t)} µs; tarn with sync=disabled, "
                                   f"whose fsync writes nothing, has {fmt(free)}: below what "
                                   "these CPUs give with no log at all)")
                else:
                    target = ""
                if m == "cpu":   # a share, not a result: no ratios
                    aw = {s: get(s, f"{k}.awake") for s in stacks}
                    cells = [pct(v[s]) + (f" ({pct(aw[s])} keep-awake)"
                                          if isinstance(aw[s], float) and aw[s] >= 0.5 else "")
                             for s in stacks]
                    row(f"{bl}, {jobs}, {what}", cells, "", "", target)
                else:
                    row(f"{bl}, {jobs}, {what}", [fmt(v[s]) for s in stacks], r(rz), r(rzs), target)
        sc = {s: ratio(get(s, f"sync.{bs}.8.iops"), get(s, f"sync.{bs}.1.iops")) for s in stacks}
        target = ("tarn and tarn+SLOG ≥ 4×: "
                  + verdict([sc[s] >= 4 if sc[s] is not None else None for s in ("tarn", "tarn+slog")]))
        # Four times a tarn stack's 1-job IOPS against what tarn does at
        # 8 jobs with no log at all.
        free8 = get("tarn+nosync", f"sync.{bs}.8.iops")
        for s, name in (("tarn", "tarn"), ("tarn+slog", "tarn+SLOG")):
            one = get(s, f"sync.{bs}.1.iops")
            if (isinstance(one, float) and isinstance(free8, float) and 4 * one > free8
                    and not (sc[s] is not None and sc[s] >= 4)):
                target += (f" ({name}: 4 × 1 job = {fmt(4 * one)}, more than tarn with "
                           f"sync=disabled at 8 jobs, {fmt(free8)}: above the CPUs' ceiling)")
        row(f"{bl}, IOPS 8 jobs ÷ 1 job", [r(sc[s]) for s in stacks], "", "", target)
    print()

print("Notes:")
for s in ran:
    c, why = get(s, "config"), get(s, "reason")
    line = f"- {s}: " + (c if isinstance(c, str) else "not run")
    if "sync" not in sets:
        p50 = get(s, "sync.4k.1.p50")
        if isinstance(p50, float):
            line += f"; fsync p50 {p50:,.0f} µs"
    if isinstance(why, str):
        line += f" — n/a: {why}"
    print(line)
if rounds > 1:
    print(f"\nEvery round ({rounds}), in order:")
    seen = set()
    for key, label in keys:
        if key in seen:
            continue
        seen.add(key)
        per = [(s, values(s, key)) for s in ran]
        show = pct if key.endswith(".cpu") else fmt
        per = [f"{s} " + " / ".join(show(v) for v in vs) for s, vs in per if vs]
        if per:
            print(f"- {label}: " + " · ".join(per))
EOF
