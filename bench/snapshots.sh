#!/usr/bin/env bash
# Snapshot benchmark (not a timed test): what snapshots cost, tarn beside
# zfs-fuse (the real ZFS in user space: snapshots, rollback and clones, no
# `.zfs`), in one run.
#
# Targets (issue 42):
#   - a snapshot of a dataset of 100,000 files and 4 GiB takes under 50 ms,
#     and about as long as one of an empty dataset;
#   - write throughput on a dataset with 1,000 snapshots ≥ 0.9 × on one
#     with none;
#   - `zfs list -t snapshot` of 1,000 snapshots under 1 s and ≥ 3 × faster
#     than zfs-fuse;
#   - `zfs destroy` of a snapshot holding 2 GiB of unique data returns in
#     under 1 s, the space coming back in the background;
#   - rollback of 1 GiB of changes (time reported).
#
# For each stack (a mirror of two sparse files, compression off):
#   snapshot/empty  `zfs snapshot` of a new, empty dataset POOL/snap, five
#                   times: the median wall time of the command
#   fill            FILES files totalling SIZE in POOL/snap (1,000 a
#                   directory), then sync and a pause for the txgs
#   snapshot/full   five snapshots of POOL/snap: the first, the median
#   many            a 1 GiB file `w/data` (fio seqwrite) in POOL/snap and
#                   in POOL/none; then SNAPSHOTS snapshots of POOL/snap, a
#                   random 4 KiB of `w/data` overwritten before each (so
#                   the snapshots differ and own blocks): mean per snapshot
#   list            `zfs list -t snapshot` (all SNAPSHOTS + 10), three
#                   times: the median
#   overwrite       fio randwrite (16 KiB random overwrites of `w/data`,
#                   buffered, fsync at the end, RUNTIME s) on POOL/none and
#                   POOL/snap, taking turns, ROUNDS times each: medians and
#                   their ratio (every overwrite of a block a snapshot
#                   holds goes on a dead list instead of being freed)
#   destroy         a 2 GiB file in POOL/uniq, snapshot, file removed and
#                   synced: the snapshot alone holds it; `zfs destroy` of
#                   it: the command's wall time, and until the pool's free
#                   space has grown by 1.9 GiB
#   rollback        a 1 GiB file in POOL/uniq, snapshot, the file written
#                   over and synced: `zfs rollback` wall time
# Table on stdout.
#
# Usage (as root):
#   bench/snapshots.sh [--size SIZE] [--files N] [--snapshots N]
#                      [--runtime S] [--rounds N] [--only STACK] [WORKDIR]
#
#   --size       data of the fill (default 4G)
#   --files      files of the fill (default 100000)
#   --snapshots  snapshots of the list and overwrite rows (default 1000)
#   --runtime    seconds of each overwrite job (default 20)
#   --rounds     overwrite jobs per dataset (default 2)
#   --only       tarn or zfs-fuse (repeatable or comma-separated)
#   WORKDIR      where the backing files go (default /var/tmp)
#   TARN=PATH    env: use this tarn binary instead of building one
#
# Every pool, mount, daemon and file the script creates is removed on exit,
# also on failure or Ctrl-C.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"

SIZE=4G
FILES=100000
SNAPSHOTS=1000
RUNTIME=20
ROUNDS=2
WSIZE=1G        # the overwritten file
USIZE=2G        # the unique data of the destroyed snapshot
RSIZE=1G        # the changes rolled back
STACKS=(tarn zfs-fuse)
script_option() {
    case "$1" in
        --files) FILES=$2; return 2 ;;
        --files=*) FILES=${1#*=}; return 1 ;;
        --snapshots) SNAPSHOTS=$2; return 2 ;;
        --snapshots=*) SNAPSHOTS=${1#*=}; return 1 ;;
        --runtime) RUNTIME=$2; return 2 ;;
        --runtime=*) RUNTIME=${1#*=}; return 1 ;;
        --rounds) ROUNDS=$2; return 2 ;;
        --rounds=*) ROUNDS=${1#*=}; return 1 ;;
    esac
    return 0
}
parse_args "$@"
check_setup "mount, drop_caches"
# The fill, the overwritten files, the unique and the rolled-back data,
# with room to spare: each mirror side holds all of it.
dev_bytes=$(( size_bytes + 8 * 1024 * 1024 * 1024 ))
check_space $(( 2 * dev_bytes ))
FIO_ENV=(RUNTIME="$RUNTIME")

TPOOL=tarnsnap$$
ZPOOL=zfssnap$$
TDS=$TPOOL/snap
ZDS=$ZPOOL/snap
make_work tarn-snapshots
fiodir=$here/fio

# The zfs(8) of stack $1.
zcmd() {
    if [ "$1" = tarn ]; then echo "$TARN_BIN"; else echo ""; fi
}
mnt_of() {   # STACK DATASET → its mountpoint
    if [ "$1" = tarn ]; then tarn_mountpoint "$2"; else echo "$work/zfs/mnt/${2#*/}"; fi
}

# seconds CMD...: wall time of CMD → R (seconds, 4 decimals); its output
# goes to $work/last.out.
seconds() {
    local t0 t1
    t0=$(date +%s%N)
    "$@" >"$work/last.out" 2>&1 || { log "failed: $* — $(tail -2 "$work/last.out" | tr '\n' ' ')"; return 1; }
    t1=$(date +%s%N)
    R=$(( (t1 - t0) / 1000 ))e-6
}
median() { printf '%s\n' "$@" | python3 -c 'import statistics,sys; print(statistics.median(float(l) for l in sys.stdin))'; }

# settle STACK: everything written reaches the pool (sync of the mounts,
# then a pause longer than a txg).
settle() {
    sync
    [ "$1" = tarn ] && "$TARN_BIN" zpool sync "$TPOOL" >/dev/null 2>&1
    sleep 6
}

snapshot_times() {   # STACK DATASET PREFIX N → R: "first median"
    local s=$1 ds=$2 p=$3 n=$4 i all=()
    for i in $(seq "$n"); do
        seconds z "$s" zfs snapshot "$ds@$p$i" || return 1
        all+=("$R")
    done
    R="${all[0]} $(median "${all[@]}")"
}


# many_snapshots STACK DATASET FILE N: N snapshots, a random 4 KiB of FILE
# overwritten before each → R = mean seconds per snapshot.
many_snapshots() {
    local s=$1
    run_bg snapshots "$work/many.out" "$work/many.err" timeout -k 10 "$STEP_TIMEOUT" \
        python3 - "$(zcmd "$s")" "$2" "$3" "$4" <<'EOF'
import os, random, subprocess, sys, time
tarn, ds, path, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
zfs = [tarn, "zfs"] if tarn else ["zfs"]
size = os.path.getsize(path)
fd = os.open(path, os.O_WRONLY)
rng = random.Random(42)
spent = 0.0
for i in range(n):
    os.pwrite(fd, os.urandom(4096), rng.randrange(size // 4096) * 4096)
    t0 = time.monotonic()
    subprocess.run(zfs + ["snapshot", f"{ds}@many{i:05}"], check=True)
    spent += time.monotonic() - t0
os.close(fd)
print(f"{spent / n:.6f}")
EOF
    R=$(cat "$work/many.out")
}

# free_bytes STACK: the pool's available space, in bytes.
free_bytes() { z "$1" zfs get -Hp -o value available "$(pool_of "$1")"; }

# write_file STACK DIR SIZE: fio seqwrite of DIR/data (SIZE) → R.
write_file() { local s=$1; MNT=$2; run_fio "$s" seqwrite "" SIZE="$3"; }

run_set() {
    local s=$1 pool ds none uniq m mnone muniq i r ok=0
    pool=$(pool_of "$s"); ds=$pool/snap; none=$pool/none; uniq=$pool/uniq
    m=$(mnt_of "$s" "$ds") || { log "$s: $ds not mounted"; return 1; }
    # snapshot of an empty dataset
    snapshot_times "$s" "$ds" empty 5 || return 1
    put $s snap_empty "${R#* }"
    log "$s: snapshot of an empty dataset: ${R#* } s (median of 5)"
    # the fill
    log "$s: filling $ds with $FILES files, $SIZE"
    seconds fill "$m" "$FILES" "$size_bytes" || return 1
    put $s fill_s "$R"
    settle "$s"
    snapshot_times "$s" "$ds" full 5 || return 1
    put $s snap_full_first "${R% *}"
    put $s snap_full "${R#* }"
    log "$s: snapshot of $FILES files / $SIZE: first ${R% *} s, median ${R#* } s"
    # the overwritten file, in the dataset with snapshots and in one without
    z "$s" zfs create -o compression=off "$none" || return 1
    mnone=$(mnt_of "$s" "$none") || return 1
    mkdir -p "$m/w" "$mnone/w"
    write_file $s "$m/w" "$WSIZE" || return 1
    write_file $s "$mnone/w" "$WSIZE" || return 1
    settle "$s"
    log "$s: taking $SNAPSHOTS snapshots of $ds"
    many_snapshots "$s" "$ds" "$m/w/data" "$SNAPSHOTS" || return 1
    put $s snap_many "$R"
    log "$s: $R s a snapshot"
    settle "$s"
    local lists=()
    for i in 1 2 3; do
        seconds z "$s" zfs list -t snapshot || return 1
        lists+=("$R")
    done
    put $s listed "$(( $(wc -l <"$work/last.out") - 1 ))"
    put $s list "$(median "${lists[@]}")"
    log "$s: zfs list -t snapshot: ${lists[*]} s"
    # overwrites, taking turns
    local w0=() w1=()
    for r in $(seq "$ROUNDS"); do
        MNT=$mnone/w; run_fio $s randwrite "" SIZE="$WSIZE" || ok=1
        w0+=("${R%% *}")
        MNT=$m/w; run_fio $s randwrite "" SIZE="$WSIZE" || ok=1
        w1+=("${R%% *}")
    done
    put $s write_none "$(median "${w0[@]}")"
    put $s write_snaps "$(median "${w1[@]}")"
    log "$s: 16K random overwrite MB/s: no snapshots ${w0[*]}, $SNAPSHOTS snapshots ${w1[*]}"
    # destroy of a snapshot holding 2 GiB alone
    z "$s" zfs create -o compression=off "$uniq" || return 1
    muniq=$(mnt_of "$s" "$uniq") || return 1
    write_file $s "$muniq" "$USIZE" || return 1
    settle "$s"
    z "$s" zfs snapshot "$uniq@u" || return 1
    rm "$muniq/data"
    settle "$s"
    # A large file's blocks are freed over several txgs after the unlink:
    # wait (up to 2 min) until the snapshot holds them alone.
    local used want
    want=$(( $(numfmt --from=iec "${USIZE%[bB]}") * 95 / 100 ))
    for i in $(seq 240); do
        used=$(z "$s" zfs get -Hp -o value used "$uniq@u")
        [ "${used:-0}" -ge "$want" ] 2>/dev/null && break
        sleep 0.5
    done
    put $s unique_used "$used"
    FREE0=$(free_bytes "$s")
    local t0 t1
    t0=$(date +%s%N)
    z "$s" zfs destroy "$uniq@u" || return 1
    t1=$(date +%s%N)
    put $s destroy "$(( (t1 - t0) / 1000 ))e-6"
    for i in $(seq 12000); do
        [ $(( $(free_bytes "$s") - FREE0 )) -ge "$want" ] && break
        sleep 0.05
    done
    t1=$(date +%s%N)
    put $s destroy_back "$(( (t1 - t0) / 1000 ))e-6"
    log "$s: destroy: returned $(cat "$results/$s.destroy") s, space back after $(cat "$results/$s.destroy_back") s"
    # rollback of 1 GiB of changes
    write_file $s "$muniq" "$RSIZE" || return 1
    settle "$s"
    z "$s" zfs snapshot "$uniq@r" || return 1
    write_file $s "$muniq" "$RSIZE" || return 1
    settle "$s"
    seconds z "$s" zfs rollback "$uniq@r" || return 1
    put $s rollback "$R"
    log "$s: rollback of $RSIZE of changes: $R s"
    return $ok
}

setup_dataset() {
    local s=$1 err
    if ! err=$(z "$s" zfs create -o compression=off "$( [ "$s" = tarn ] && echo "$TDS" || echo "$ZDS")" 2>&1); then
        na_all $s "zfs create failed: $err"; return 1
    fi
}

# ------------------------------------------------------------------ run
log "work dir $work; fill $FILES files / $SIZE, $SNAPSHOTS snapshots, stacks: ${STACKS[*]}"
run_stacks

# ---------------------------------------------------------------- table
table "$results" "$SIZE" "$FILES" "$SNAPSHOTS" "$RUNTIME" "$ROUNDS" "$(uname -r)" <<'EOF'
res, size, files, nsnaps, runtime, rounds, kernel = sys.argv[1:8]
stacks = ["tarn", "zfs-fuse"]

def ms(v):
    return f"{v * 1000:,.1f} ms" if isinstance(v, float) else "n/a"
def s_(v):
    return f"{v:,.2f} s" if isinstance(v, float) else "n/a"
def mbs(v):
    return f"{v:,.1f} MB/s" if isinstance(v, float) else "n/a"
def ratio(a, b):
    return f"{a / b:.2f}×" if isinstance(a, float) and isinstance(b, float) and b else "n/a"

rows = [
    ("`zfs snapshot`, empty dataset (median of 5)", lambda s: ms(get(s, "snap_empty")), "—"),
    (f"`zfs snapshot`, {int(files):,} files / {size}: first", lambda s: ms(get(s, "snap_full_first")), "< 50 ms"),
    (f"`zfs snapshot`, {int(files):,} files / {size}: median of 5", lambda s: ms(get(s, "snap_full")), "< 50 ms, ≈ empty"),
    (f"`zfs snapshot` while taking {int(nsnaps):,} (mean)", lambda s: ms(get(s, "snap_many")), "—"),
    (f"`zfs list -t snapshot` ({int(nsnaps) + 10:,} snapshots; median of 3)", lambda s: s_(get(s, "list")), "< 1 s, ≥ 3× zfs-fuse"),
    ("16 KiB random overwrite, no snapshots", lambda s: mbs(get(s, "write_none")), "—"),
    (f"16 KiB random overwrite, {int(nsnaps):,} snapshots", lambda s: mbs(get(s, "write_snaps")), "—"),
    ("… with snapshots ÷ without", lambda s: ratio(get(s, "write_snaps"), get(s, "write_none")), "≥ 0.9"),
    ("`zfs destroy` of a snapshot holding 2 GiB alone: returns", lambda s: s_(get(s, "destroy")), "< 1 s"),
    ("… until the pool's free space is back", lambda s: s_(get(s, "destroy_back")), "background"),
    ("`zfs rollback` of 1 GiB of changes", lambda s: s_(get(s, "rollback")), "—"),
]
print(f"Kernel {kernel}; each stack a mirror of two sparse files on the same disk, compression off; "
      f"overwrites: fio 16 KiB randwrite of a 1 GiB file, buffered, fsync at the end, {runtime} s, "
      f"median of {rounds}.\n")
print("| measurement | " + " | ".join(stacks) + " | target |")
print("|---|" + "---:|" * len(stacks) + "---|")
for name, f, target in rows:
    print(f"| {name} | " + " | ".join(f(s) for s in stacks) + f" | {target} |")
lt, lz = get("tarn", "list"), get("zfs-fuse", "list")
if isinstance(lt, float) and isinstance(lz, float) and lt:
    print(f"\n`zfs list -t snapshot`: tarn is {lz / lt:.1f}× faster than zfs-fuse.")
for s in stacks:
    for key in ("reason", "note"):
        v = get(s, key)
        if v:
            print(f"\n{s}: {v}")
    u = get(s, "unique_used")
    if isinstance(u, float):
        print(f"\n{s}: the destroyed snapshot's `used` was {u / 2**30:.2f} GiB; "
              f"snapshots listed: {get(s, 'listed'):.0f}.")
EOF
