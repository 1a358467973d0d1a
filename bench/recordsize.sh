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
. "$here/lib.sh"

SIZE=512M
RECORDSIZE=1M
STACKS=(tarn zfs-fuse)
script_option() { return 0; }
parse_args "$@"
check_setup "mount, drop_caches"
need_whole_mib
# Each mirror side holds both files plus copy-on-write slack. Sparse, so
# only what is written counts.
dev_bytes=$(( 2 * size_bytes + 2 * 1024 * 1024 * 1024 ))
check_space $(( 2 * dev_bytes ))
FIO_ENV=(SIZE="$size_bytes")

TPOOL=tarnrs$$
ZPOOL=zfsrs$$
DS=rs
TDS=$TPOOL/$DS
ZDS=$ZPOOL/$DS
make_work tarn-recordsize

# ------------------------------------------------------------ fio jobs
# One thread, queue depth 1, buffered, fio's default random data, like the
# jobs in bench/fio/. Env: DIR (dataset mountpoint), FILE, SIZE.
fiodir=$work/fio
mkdir -p "$fiodir"
fio_job() {   # NAME RW BS [OPTION]: $fiodir/NAME.fio, job [NAME], on FILE
    cat >"$fiodir/$1.fio" <<EOF
[global]
ioengine=psync
direct=0
fallocate=none
numjobs=1

[$1]
filename=\${DIR}/\${FILE}
rw=$2
bs=$3
size=\${SIZE}
${4:-}
EOF
}
# 16 KiB random writes into a new file until SIZE is covered. fio's random
# map (norandommap=0, the default) visits every block exactly once, so the
# file ends up fully written, in random order. fsync at the end, inside the
# job's time.
fio_job randwrite randwrite 16k end_fsync=1
# The baseline: the same file written sequentially with 1 MiB writes.
fio_job seqwrite write 1M end_fsync=1
# Sequential read, 1 MiB, of FILE; run cold (after export/import and
# drop_caches).
fio_job seqread read 1M

# --------------------------------------------------------------- helpers
# What stat(2) says about FILE: the file's data block size (st_blksize,
# which ZFS and tarn report as the file's record size) and allocated bytes.
file_blocks() {
    local s=$1 key=$2 f=$MNT/$3 st
    st=$(stat -c '%s %o %b %B' "$f" 2>/dev/null) || return 0
    put "$s" "$key" "$st"
}

# Write FILE with JOB, go cold, read it back sequentially. run_fio sets
# R="MB/s IOPS p50_us p99_us bytes".
run_pattern() {
    local s=$1 cold=$2 key=$3 job=$4 file=$5 bytes
    log "$s: $key: fio $job of $file ($SIZE)"
    run_fio "$s" "$job" "$file" || return 1
    bytes=${R##* }
    [ "$bytes" = "$size_bytes" ] || log "$s: $key: fio wrote $bytes bytes, expected $size_bytes"
    put "$s" "${key}_write" "${R%% *}"
    $cold || { log "$s: cold cycle failed"; return 1; }
    log "$s: $key: sequential read 1 MiB of $file, cold"
    run_fio "$s" seqread "$file" || return 1
    put "$s" "${key}_read" "${R%% *}"
    file_blocks "$s" "${key}_stat" "$file"
}
run_set() {
    local s=$1 cold=$2 ok=0
    run_pattern "$s" "$cold" random randwrite rand || ok=1
    run_pattern "$s" "$cold" sequential seqwrite seq || ok=1
    return $ok
}

# The dataset POOL/rs, recordsize=1M (zfs-fuse, pool v23: ≤ 128K, so if 1M
# is refused it falls back to 128K, noted under the table), compression off.
setup_dataset() { setup_rs_dataset "$1"; }

# ------------------------------------------------------------------ run
log "work dir $work; files of ${SIZE} ($size_bytes bytes), recordsize $RECORDSIZE, stacks: ${STACKS[*]}"
run_stacks

# ---------------------------------------------------------------- table
table "$results" "$SIZE" "$RECORDSIZE" "$(fio --version)" "$(uname -r)" <<'EOF'
res, size, rs, fiov, kernel = sys.argv[1:6]
stacks = ["tarn", "zfs-fuse"]
THRESHOLD = 0.8

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
