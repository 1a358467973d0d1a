#!/usr/bin/env bash
# Volume benchmark (not a timed test): block I/O over NBD against
#   tarn        a tarn zvol (its own NBD server)
#   tarn-qcow2  qemu-nbd serving a qcow2 file on a tarn dataset (the
#               seed's alternative to a zvol)
#   ext4        qemu-nbd serving a raw file on the ext4 that holds the
#               pools' files (the ceiling)
#   zfs-fuse    qemu-nbd serving a qcow2 file on a zfs-fuse dataset
# in one run, and two bounds beside them:
#   tarn+nosync the same zvol with sync=disabled: what the rows cost
#               without the intent log (the ceiling of the FUA rows)
#   disk        fio on the disk itself, direct I/O, 1 MiB: two files
#               written at once (what a mirror's writes cost) and one
#               read: the sequential rows' bound without any page cache Pools: a mirror of two sparse files on the same disk, as in
# the other benchmarks; qemu-nbd: --cache=writeback --aio=threads
# --shared=8 (what it does by default, with 8 clients allowed; with
# --qemu-cache none it opens its file O_DIRECT, as libvirt usually
# configures VM disks, and the host page cache no longer absorbs writes).
#
# Rows, each with 1 and 8 clients (one connection each, one request in
# flight per client), RUNTIME seconds:
#   seqwrite   1 MiB sequential writes     (fio, nbd engine)
#   seqread    1 MiB sequential reads      (fio, nbd engine)
#   randread   4 KiB random reads          (fio, nbd engine)
#   randwrite  4 KiB random writes         (fio, nbd engine)
#   fua        4 KiB random writes, FUA on every one (bench/src/bin/nbd-fua:
#              fio's nbd engine cannot set FUA)
# after a prefill that writes every byte of the export once (fio). Each
# client works in its own SIZE/clients slice.
#
# Targets (issue 44): the zvol ≥ 1.0× tarn-qcow2 and ≥ 3× zfs-fuse on
# every row; ≥ 0.5× ext4 on the random rows and ≥ 0.7× on the
# sequential ones. Table on stdout (medians over --rounds).
#
# Usage (as root):
#   bench/zvol.sh [--size SIZE] [--runtime SECONDS] [--rounds N] [--only STACK] [WORKDIR]
#
#   --size     the export's size (default 2G)
#   --runtime  seconds per row (default 15)
#   --rounds   every stack this many times, in turn (default 1)
#   --qemu-cache  qemu-nbd's --cache mode (default writeback)
#   --only     tarn, tarn-qcow2, ext4, zfs-fuse, tarn+nosync or disk
#              (repeatable or comma-separated)
#   WORKDIR    where the backing files go (default /var/tmp)
#   TARN=PATH env: use this tarn binary instead of building one
#
# Needs fio (with the nbd engine), qemu-utils, zfs-fuse for its stack.
# Every pool, mount, daemon, server and file the script creates is
# removed on exit, also on failure or Ctrl-C.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"

SIZE=2G
RUNTIME=15
ROUNDS=1
QEMU_CACHE=writeback
STACKS=(tarn tarn-qcow2 ext4 zfs-fuse tarn+nosync disk)
script_option() {
    case "$1" in
        --qemu-cache) QEMU_CACHE=$2; return 2 ;;
        --qemu-cache=*) QEMU_CACHE=${1#*=}; return 1 ;;
        --runtime) RUNTIME=$2; return 2 ;;
        --runtime=*) RUNTIME=${1#*=}; return 1 ;;
        --rounds) ROUNDS=$2; return 2 ;;
        --rounds=*) ROUNDS=${1#*=}; return 1 ;;
    esac
    return 0
}
parse_args "$@"
check_setup "mount, drop_caches"
for t in qemu-nbd qemu-img; do
    command -v "$t" >/dev/null || { echo "missing $t (apt-get install -y qemu-utils)" >&2; exit 2; }
done
fio --enghelp=nbd >/dev/null 2>&1 || { echo "this fio has no nbd engine" >&2; exit 2; }
need_whole_mib
# Each mirror side holds the export (thick: its reservation) and room.
dev_bytes=$(( 2 * size_bytes + 2 * 1024 * 1024 * 1024 ))
check_space $(( 2 * dev_bytes ))

TPOOL=tarnzvol$$
ZPOOL=zfszvol$$
TDS=$TPOOL
ZDS=$ZPOOL
make_work tarn-zvol
fiodir=$here/fio
FIO_ENV=()
QNBD_PID=
STOPS=(qnbd_stop "${STOPS[@]}" ext4_stop)
CLIENTS=(1 8)
ROWS=(seqwrite:write:1M seqread:read:1M randread:randread:4k randwrite:randwrite:4k)

FUA_BIN=
fua_prepare() {   # the nbd-fua tool, built once
    [ -n "$FUA_BIN" ] && return 0
    log "building bench/src/bin/nbd-fua (release)"
    (cd "$repo" && cargo build --release -p tarn-bench --bin nbd-fua) >"$work/fua-build.log" 2>&1 ||
        { tail -5 "$work/fua-build.log" >&2; return 1; }
    cp "$repo/target/release/nbd-fua" "$work/nbd-fua" && FUA_BIN=$work/nbd-fua
}

# measure STACK SOCKET: the prefill, then every row at 1 and 8 clients.
measure() {
    local s=$1 sock=$2 uri row name rw bs c fua
    uri="nbd+unix:///?socket=$sock"
    # In the environment, not run_fio's VAR=value list (which names the
    # output files: no slashes there).
    FIO_ENV=(URI="$uri")
    log "$s: prefill of $SIZE"
    run_fio "$s" nbdfill "" SIZE="$size_bytes" || return 1
    sync
    for c in "${CLIENTS[@]}"; do
        for row in "${ROWS[@]}"; do
            IFS=: read -r name rw bs <<<"$row"
            quiesce
            run_fio "$s" nbd "" RW="$rw" BS="$bs" NJOBS="$c" \
                JOBSIZE=$(( size_bytes / c )) RUNTIME="$RUNTIME" || return 1
            put "$s" "$name.$c" "$R"
            log "$s: $name, $c client(s): $R"
        done
        quiesce
        fua=$(timeout -k 10 $(( RUNTIME * 4 + 60 )) "$FUA_BIN" "$sock" "$c" "$RUNTIME" "$size_bytes") ||
            { log "$s: nbd-fua failed"; return 1; }
        put "$s" "fua.$c" "$fua"
        log "$s: fua, $c client(s): $fua"
    done
}

# ------------------------------------------------------------- qemu-nbd
qnbd_stop() {
    [ -n "$QNBD_PID" ] && stop_pid "$QNBD_PID"
    QNBD_PID=
    [ -n "$work" ] && rm -f "$work/qnbd.sock"
}
# qnbd_serve FORMAT FILE: qemu-nbd on $work/qnbd.sock
qnbd_serve() {
    local i
    rm -f "$work/qnbd.sock"
    setsid qemu-nbd --format="$1" --socket="$work/qnbd.sock" --shared=8 --persistent \
        --cache="$QEMU_CACHE" --aio=threads "$2" >"$work/qnbd.out" 2>&1 &
    QNBD_PID=$!
    for i in $(seq 100); do [ -S "$work/qnbd.sock" ] && return 0; sleep 0.1; done
    log "qemu-nbd did not start: $(tail -2 "$work/qnbd.out" | tr '\n' ' ')"
    return 1
}
# qcow2_on STACK DIR: a qcow2 image of SIZE in DIR, served and measured.
qcow2_on() {
    local s=$1 img=$2/vm.qcow2
    qemu-img create -q -f qcow2 "$img" "$size_bytes" || { log "$s: qemu-img create failed"; return 1; }
    qnbd_serve qcow2 "$img" || return 1
    put "$s" server "qemu-nbd $(qemu-nbd --version | awk 'NR == 1 {print $2}') --cache=$QEMU_CACHE, qcow2 (cluster 64K) on $3"
    measure "$s" "$work/qnbd.sock"
    local rc=$?
    qnbd_stop
    rm -f "$img"
    return $rc
}

# ------------------------------------------------------------ the stacks
setup_dataset() { :; }   # the pool's root dataset is used as it is

run_set() {
    local s=$1 sock err
    fua_prepare || { log "$s: cannot build nbd-fua"; return 1; }
    case "$s" in
        tarn|tarn+nosync)
            err=$("$TARN_BIN" zfs create -V "$SIZE" "$TPOOL/vol" 2>&1) ||
                { log "$s: zfs create -V failed: $err"; return 1; }
            sock=$TARN_RUN_DIR/zvol/$TPOOL/vol
            [ -S "$sock" ] || { log "$s: no socket at $sock"; return 1; }
            put "$s" server "tarn zvol, $("$TARN_BIN" zfs get -H -o property,value volblocksize,compression,refreservation,sync "$TPOOL/vol" | tr '\t\n' '= ' | sed 's/ $//')"
            measure "$s" "$sock"
            ;;
        tarn-qcow2) qcow2_on "$s" "$MNT" "a tarn dataset (recordsize 128K)" ;;
        zfs-fuse) qcow2_on "$s" "$MNT" "a zfs-fuse dataset" ;;
    esac
}

ext4_stop() { [ -n "$work" ] && rm -rf --one-file-system "$work/ext4"; }
stack_ext4() {
    local s=ext4 img=$work/ext4/vm.raw
    mkdir -p "$work/ext4"
    truncate -s "$size_bytes" "$img"
    fua_prepare || { na_all $s "cannot build nbd-fua"; return; }
    qnbd_serve raw "$img" || { na_all $s "qemu-nbd did not start"; ext4_stop; return; }
    put $s server "qemu-nbd $(qemu-nbd --version | awk 'NR == 1 {print $2}') --cache=$QEMU_CACHE, raw file on $(findmnt -n -T "$work" -o FSTYPE) (the disk holding the pools' files)"
    measure $s "$work/qnbd.sock" || put $s reason "a step failed (see log above)"
    qnbd_stop
    ext4_stop
}
stack_tarn-qcow2() { stack_tarn tarn-qcow2; }

disk_stop() { [ -n "$work" ] && rm -rf --one-file-system "$work/disk"; }
STOPS+=(disk_stop)
stack_disk() {
    local s=disk d=$work/disk
    mkdir -p "$d"
    put $s config "fio, direct I/O, 1 MiB, 4 deep, on $(findmnt -n -T "$work" -o FSTYPE) of the same disk"
    quiesce
    run_bg disk-write /dev/null "$d/w.err" timeout -k 10 "$STEP_TIMEOUT" fio --output-format=json \
        --output="$d/w.json" --ioengine=libaio --direct=1 --bs=1M --iodepth=4 --rw=write \
        --size="$size_bytes" --numjobs=2 --group_reporting --end_fsync=1 --name=mirror \
        --filename_format="$d/side.\$jobnum" || { put $s reason "fio write failed"; disk_stop; return; }
    put $s seqwrite "$(python3 -c "import json,sys; j=json.load(open(sys.argv[1]))['jobs'][0]; print(j['write']['bw_bytes'] / 2e6)" "$d/w.json")"
    drop_caches
    run_bg disk-read /dev/null "$d/r.err" timeout -k 10 "$STEP_TIMEOUT" fio --output-format=json \
        --output="$d/r.json" --ioengine=libaio --direct=1 --bs=1M --iodepth=4 --rw=read \
        --size="$size_bytes" --name=read --filename="$d/side.0" || { put $s reason "fio read failed"; disk_stop; return; }
    put $s seqread "$(python3 -c "import json,sys; j=json.load(open(sys.argv[1]))['jobs'][0]; print(j['read']['bw_bytes'] / 1e6)" "$d/r.json")"
    log "$s: mirror write $(cat "$results/disk.seqwrite") MB/s a side, read $(cat "$results/disk.seqread") MB/s"
    disk_stop
}

# ------------------------------------------------------------------ run
log "work dir $work; export $SIZE, $RUNTIME s a row, stacks: ${STACKS[*]}, $ROUNDS round(s)"
run_rounds "$ROUNDS"

# ---------------------------------------------------------------- table
table "$results" "$SIZE" "$RUNTIME" "$(uname -r)" "$(nproc)" <<'EOF'
res, size, runtime, kernel, cpus = sys.argv[1:6]
stacks = ["tarn", "tarn-qcow2", "ext4", "zfs-fuse"]
rows = [("seqwrite", "1 MiB sequential write", "MB/s", 0, 0.7),
        ("seqread", "1 MiB sequential read", "MB/s", 0, 0.7),
        ("randread", "4 KiB random read", "IOPS", 1, 0.5),
        ("randwrite", "4 KiB random write", "IOPS", 1, 0.5),
        ("fua", "4 KiB random write, FUA each", "IOPS", 1, 0.5)]

def field(stack, key, i):
    """Field i of the stored "MB/s IOPS p50 p99 bytes", median over rounds."""
    nums = []
    for x in values(stack, key):
        try:
            nums.append(float(str(x).split()[i]))
        except (ValueError, IndexError):
            pass
    return statistics.median(nums) if nums else None

def fmt(v, unit):
    return "n/a" if v is None else (f"{v:,.0f}" if unit == "IOPS" else f"{v:,.0f} MB/s")

def ratio(a, b):
    return f"{a / b:.2f}×" if a is not None and b else "n/a"

print(f"Kernel {kernel}, {cpus} CPUs; export {size}; {runtime} s a row; one request in flight per client.\n")
print("| row | clients | " + " | ".join(stacks) + " | zvol / qcow2 on tarn (≥ 1.0) | zvol / ext4 | zvol / zfs-fuse (≥ 3) |")
print("|---|---:|" + "---:|" * len(stacks) + "---:|---:|---:|")
misses = []
for key, name, unit, i, ceil in rows:
    for c in ("1", "8"):
        k = f"{key}.{c}"
        v = {s: field(s, k, i) for s in stacks}
        t = v["tarn"]
        cells = " | ".join(fmt(v[s], unit) for s in stacks)
        print(f"| {name} | {c} | {cells} | {ratio(t, v['tarn-qcow2'])} | {ratio(t, v['ext4'])} (≥ {ceil}) | {ratio(t, v['zfs-fuse'])} |")
        for other, want in (("tarn-qcow2", 1.0), ("ext4", ceil), ("zfs-fuse", 3.0)):
            if t is not None and v[other] and t / v[other] < want:
                misses.append(f"{name}, {c} client(s): {t / v[other]:.2f}× {other} (target {want}×)")
print("\np50/p99 latency (µs):\n")
print("| row | clients | " + " | ".join(stacks) + " |")
print("|---|---:|" + "---:|" * len(stacks))
for key, name, unit, i, ceil in rows:
    for c in ("1", "8"):
        k = f"{key}.{c}"
        cells = []
        for s in stacks:
            p50, p99 = field(s, k, 2), field(s, k, 3)
            cells.append("n/a" if p50 is None else f"{p50:,.0f} / {p99:,.0f}")
        print(f"| {name} | {c} | " + " | ".join(cells) + " |")
print("\nBounds in the same run:\n")
print("| row | clients | zvol | zvol, sync=disabled | disk (direct) |")
print("|---|---:|---:|---:|---:|")
for key, name, unit, i, ceil in rows:
    for c in ("1", "8"):
        k = f"{key}.{c}"
        d = get("disk", key) if key in ("seqwrite", "seqread") else None
        dt = "n/a" if not isinstance(d, float) else f"{d:,.0f} MB/s" + (" a side, mirror" if key == "seqwrite" else "")
        print(f"| {name} | {c} | {fmt(field('tarn', k, i), unit)} | {fmt(field('tarn+nosync', k, i), unit)} | {dt} |")
print("\nTargets missed: " + ("none" if not misses else "; ".join(misses)))
for s in stacks + ["tarn+nosync", "disk"]:
    for what in ("reason", "server", "config"):
        r = get(s, what)
        if r:
            print(f"\n{s} {what}: {r}")
EOF
