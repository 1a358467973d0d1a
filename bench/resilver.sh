#!/usr/bin/env bash
# Resilver benchmark (not a timed test): how long does replacing one disk
# take, and how much does it read from the others, on six disks laid out as
# mirrors, raidz1 or raidz2?
#
# The seeds' claim: a mirror resilver reads one healthy copy of what the
# disk held, while raidz reads every surviving member — about 5× the I/O
# for a 6-wide raidz1.
#
# For each layout, on six sparse files (tarn, real daemon, FUSE mount):
#   mirrors  mirror d0 d1 mirror d2 d3 mirror d4 d5
#   raidz1   raidz1 d0..d5
#   raidz2   raidz2 d0..d5
# fill SIZE with fio (1 MiB sequential writes, random data) into a dataset
# with recordsize=1M and compression off, export/import, drop caches, then
# `zpool replace -w POOL d0 new` and measure: wall time, bytes read from
# the five surviving disks and bytes written to the new one (the daemon's
# cumulative per-device counters before and after).
#
# Usage (as root):
#   bench/resilver.sh [--size SIZE] [--only LAYOUT[,LAYOUT]] [WORKDIR]
#
#   --size     data written before the replace (fio syntax, default 2G)
#   --only     mirrors, raidz1 or raidz2
#   WORKDIR    where the backing files go (default /var/tmp)
#   TARN=PATH  env: use this tarn binary instead of building one
#
# Every pool, mount, daemon and file the script creates is removed on exit,
# also on failure or Ctrl-C.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"

SIZE=2G
STACKS=(mirrors raidz1 raidz2)
script_option() { return 0; }
parse_args "$@"
check_setup "mount, drop_caches"
# Each disk holds at most half the data (mirrors: a third) plus slack.
dev_bytes=$(( size_bytes + 2 * 1024 * 1024 * 1024 ))
FIO_ENV=(SIZE="$size_bytes")
TPOOL=tarnresilver$$
TDS=$TPOOL/data
make_work tarn-resilver

fiodir=$work/fio
mkdir -p "$fiodir"
fill_job

# Leaf read and write bytes since import: "PATH READ WRITE" lines, the
# cumulative counters asked of the daemon over its socket (zpool iostat
# prints rates).
leaf_bytes() {
    python3 - "$TARN_SOCKET" "$TPOOL" "$work/tarn/vdevs/" <<'EOF'
import json, socket, sys
sock, pool, prefix = sys.argv[1:4]
s = socket.socket(socket.AF_UNIX)
s.connect(sock)
s.sendall((json.dumps({"op": "zpool_iostat", "names": [pool]}) + "\n").encode())
buf = b""
while not buf.endswith(b"\n"):
    chunk = s.recv(1 << 16)
    if not chunk:
        break
    buf += chunk
resp = json.loads(buf)
def walk(v):
    if v["name"].startswith(prefix):
        print(v["name"], v["read_bytes"], v["write_bytes"])
    for c in v.get("children", []):
        walk(c)
for p in resp["data"]:
    for v in p["vdevs"]:
        walk(v)
EOF
}

run_layout() {
    local s=$1 spec i before after t0 t1
    tarn_prepare || { na_all "$s" "$TARN_READY"; return; }
    tarn_daemon_start || { na_all "$s" "daemon did not start"; tarn_stop; return; }
    local d=$work/tarn/vdevs
    for i in 0 1 2 3 4 5 new; do truncate -s "$dev_bytes" "$d/d$i"; done
    case "$s" in
        mirrors) spec=(mirror "$d/d0" "$d/d1" mirror "$d/d2" "$d/d3" mirror "$d/d4" "$d/d5") ;;
        *) spec=("$s" "$d/d0" "$d/d1" "$d/d2" "$d/d3" "$d/d4" "$d/d5") ;;
    esac
    if ! "$TARN_BIN" zpool create -o ashift=12 "$TPOOL" "${spec[@]}" >/dev/null ||
        ! "$TARN_BIN" zfs create -o recordsize=1M -o compression=off "$TDS" >/dev/null ||
        ! tarn_wait_mounted; then
        na_all "$s" "pool setup failed: $(tail -2 "$work/tarn/daemon.out" | tr '\n' ' ')"
        tarn_stop; return
    fi
    log "$s: fill $SIZE"
    run_fio "$s" fill data || { put "$s" reason "fill failed"; tarn_stop; return; }
    tarn_cold || { put "$s" reason "cold cycle failed"; tarn_stop; return; }
    before=$(leaf_bytes)
    log "$s: zpool replace -w d0 dnew"
    t0=$(date +%s.%N)
    "$TARN_BIN" zpool replace -w "$TPOOL" "$d/d0" "$d/dnew" ||
        { put "$s" reason "replace failed"; tarn_stop; return; }
    t1=$(date +%s.%N)
    after=$(leaf_bytes)
    put "$s" secs "$(python3 -c "print(f'{$t1 - $t0:.2f}')")"
    python3 - "$results" "$s" "$d/dnew" "$before" "$after" <<'EOF'
import sys
res, s, new, before, after = sys.argv[1:6]
def parse(t):
    return {l.split()[0]: (int(l.split()[1]), int(l.split()[2])) for l in t.splitlines() if l.strip()}
b, a = parse(before), parse(after)
read = sum(a[k][0] - b.get(k, (0, 0))[0] for k in a if k != new)
wrote = a.get(new, (0, 0))[1] - b.get(new, (0, 0))[1]
open(f"{res}/{s}.read", "w").write(str(read))
open(f"{res}/{s}.wrote", "w").write(str(wrote))
EOF
    put "$s" scan "$("$TARN_BIN" zpool status "$TPOOL" | grep 'scan:' | sed 's/^ *//')"
    tarn_stop
}
stack_mirrors() { run_layout mirrors; }
stack_raidz1() { run_layout raidz1; }
stack_raidz2() { run_layout raidz2; }

log "work dir $work; $SIZE of data; layouts: ${STACKS[*]}"
run_stacks

table "$results" "$SIZE" <<'EOF'
res, size = sys.argv[1:3]
print(f"tarn, six sparse files on one disk, {size} written (1 MiB records, random data), "
      "then `zpool replace -w` of one disk, cold. Read = bytes read from the five "
      "surviving disks; written = bytes written to the new disk (the daemon's per-device counters).\n")
print("| layout | resilver s | read from survivors MiB | written to new MiB | read ÷ written | read ÷ mirrors' read |")
print("|---|---:|---:|---:|---:|---:|")
base = get("mirrors", "read")
for s in ["mirrors", "raidz1", "raidz2"]:
    secs, rd, wr = get(s, "secs"), get(s, "read"), get(s, "wrote")
    if not isinstance(rd, float):
        why = get(s, "reason")
        print(f"| {s} | n/a | n/a | n/a | n/a | n/a |" + (f" ({why})" if why else ""))
        continue
    ratio = f"{rd / wr:.2f}" if wr else "n/a"
    vs = f"{rd / base:.2f}" if isinstance(base, float) and base else "n/a"
    print(f"| {s} | {secs:.1f} | {rd / 2**20:,.0f} | {wr / 2**20:,.0f} | {ratio} | {vs} |")
print()
for s in ["mirrors", "raidz1", "raidz2"]:
    scan = get(s, "scan")
    if isinstance(scan, str):
        print(f"- {s}: {scan}")
EOF
