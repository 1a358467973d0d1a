#!/usr/bin/env bash
# Metadata benchmark (not a timed test): big directories and a source-tree
# sized copy of /usr, tarn beside ext4, btrfs raid1 and zfs-fuse, in one
# run (issue 47).
#
# For each stack:
#   one directory of N empty files (open(O_CREAT) + close, from Python):
#     create · `ls -f | wc -l` warm · `ls -f` cold · 20,000 random
#     `lstat`s cold · `rm -rf`
#   a tree like /usr (its directories, symlinks and files, each file cut
#   to its first 4 KiB; about 130,000 entries here), from a tar made once
#   per run: `tar x` · `find | wc -l` · `du -s` · cold `ls -lR` · `rm -rf`
# Seconds per step; the table gives tarn ÷ ext4 (target ≤ 3) and
# zfs-fuse ÷ tarn (target ≥ 3) for every row, and `rm -rf` of 200,000
# entries under 9 s.
#
#   tarn      mirror of two sparse files, real target/release/tarn daemon,
#             FUSE mount; cold = export/import + drop_caches
#   ext4      a directory on the file system holding the backing files;
#             cold = drop_caches
#   btrfs     raid1/raid1 on two loop devices; cold = umount/mount
#   zfs-fuse  the same mirror on zfs-fuse 0.7; cold = export/import
#
# Usage (as root):
#   bench/metadata.sh [--entries N] [--only STACK[,STACK]] [WORKDIR]
#
#   --entries  files in the big directory (default 200000)
#   --only     tarn, ext4, btrfs, zfs-fuse
#   WORKDIR    where the backing files go (default /var/tmp)
#   TARN=PATH  env: use this tarn binary instead of building one
#
# Every pool, mount, daemon, loop device and file the script creates is
# removed on exit, also on failure or Ctrl-C.
set -uo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
. "$here/lib.sh"

SIZE=4G
ENTRIES=200000
STATS=20000
STACKS=(tarn ext4 btrfs zfs-fuse)
script_option() {
    case "$1" in
        --entries) ENTRIES=$2; return 2 ;;
        --entries=*) ENTRIES=${1#*=}; return 1 ;;
    esac
    return 0
}
parse_args "$@"
check_setup "mount, losetup, drop_caches"
dev_bytes=$(( 8 << 30 ))
TPOOL=tarnmeta$$ ZPOOL=zfsmeta$$
TDS=$TPOOL ZDS=$ZPOOL
setup_dataset() { :; }
make_work tarn-metadata

# The tree: /usr's directories, symlinks and regular files (each cut to
# its first 4 KiB), as a tar in the work directory.
log "making the tree's tar from /usr"
python3 - "$work/usr.tar" <<'EOF'
import os, sys, tarfile, io
out = tarfile.open(sys.argv[1], "w", format=tarfile.GNU_FORMAT)
n = 0
for root, dirs, files in os.walk("/usr"):
    dirs.sort()
    for name in [root] + sorted(os.path.join(root, f) for f in files):
        try:
            st = os.lstat(name)
        except OSError:
            continue
        arc = "usr" + name[len("/usr"):]
        ti = tarfile.TarInfo(arc)
        ti.mode, ti.mtime = st.st_mode & 0o7777, int(st.st_mtime)
        if os.path.islink(name):
            ti.type, ti.linkname = tarfile.SYMTYPE, os.readlink(name)
            out.addfile(ti)
        elif os.path.isdir(name):
            ti.type = tarfile.DIRTYPE
            out.addfile(ti)
        elif os.path.isfile(name):
            try:
                with open(name, "rb") as f:
                    data = f.read(4096)
            except OSError:
                continue
            ti.size = len(data)
            out.addfile(ti, io.BytesIO(data))
        else:
            continue
        n += 1
out.close()
print(n, file=sys.stderr)
EOF
TREE_ENTRIES=$(tar tf "$work/usr.tar" | wc -l)
log "tree: $TREE_ENTRIES entries, $(du -h "$work/usr.tar" | cut -f1) of tar"

# timed STACK KEY CMD…: seconds of CMD (run as a background job, so a
# Ctrl-C stops it) into results STACK.KEY.
timed() {
    local s=$1 k=$2 t0 rc
    shift 2
    t0=$(date +%s.%N)
    run_bg "$k" /dev/null "$work/$s.$k.err" timeout -k 10 "$STEP_TIMEOUT" "$@"
    rc=$?
    if [ "$rc" -ne 0 ]; then
        log "$s: $k failed (exit $rc): $(tail -2 "$work/$s.$k.err" | tr '\n' ' ')"
        return 1
    fi
    put "$s" "$k" "$(python3 -c "import time; print(f'{time.time() - $t0:.2f}')")"
}

run_set() {
    local s=$1 cold=$2
    quiesce
    log "$s: create $ENTRIES files"
    timed "$s" create python3 -c "
import os, sys
d = sys.argv[1]; os.mkdir(d)
for i in range(int(sys.argv[2])):
    os.close(os.open(f'{d}/f{i:07d}', os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644))
" "$MNT/big" "$ENTRIES" || return 1
    timed "$s" ls_warm sh -c "[ \$(ls -f '$MNT/big' | wc -l) -eq $((ENTRIES + 2)) ]" || return 1
    $cold || return 1
    timed "$s" ls_cold sh -c "[ \$(ls -f '$MNT/big' | wc -l) -eq $((ENTRIES + 2)) ]" || return 1
    $cold || return 1
    timed "$s" stat_cold python3 -c "
import os, random, sys
d, n, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(45)
for _ in range(k):
    os.lstat(f'{d}/f{r.randrange(n):07d}')
" "$MNT/big" "$ENTRIES" "$STATS" || return 1
    log "$s: rm -rf of the directory"
    timed "$s" rm rm -rf "$MNT/big" || return 1
    log "$s: the tree"
    timed "$s" tar_x tar xf "$work/usr.tar" -C "$MNT" || return 1
    timed "$s" find sh -c "[ \$(find '$MNT/usr' | wc -l) -eq $TREE_ENTRIES ]" || return 1
    timed "$s" du du -s "$MNT/usr" || return 1
    $cold || return 1
    timed "$s" ls_lR ls -lR "$MNT/usr" || return 1
    timed "$s" rm_tree rm -rf "$MNT/usr" || return 1
}

stack_ext4() {
    local s=ext4
    MNT=$work/ext4
    mkdir -p "$MNT"
    put $s config "$(findmnt -n -T "$MNT" -o FSTYPE,SOURCE,OPTIONS | tr -s ' ')"
    run_set $s drop_caches || put $s reason "a step failed (see log above)"
    rm -rf --one-file-system "$MNT"
}

log "work dir $work; $ENTRIES entries; stacks: ${STACKS[*]}"
run_stacks

table "$results" "$ENTRIES" "$STATS" "$TREE_ENTRIES" "$(uname -r)" "${STACKS[*]}" <<'EOF'
res, entries, stats, tree, kernel, ran = sys.argv[1:7]
ran = ran.split()
stacks = [s for s in ["tarn", "ext4", "btrfs", "zfs-fuse"] if s in ran]
rows = [
    ("create", f"create {int(entries):,} files"),
    ("ls_warm", f"`ls -f` of {int(entries):,} entries, warm"),
    ("ls_cold", "`ls -f`, cold"),
    ("stat_cold", f"{int(stats):,} random `lstat`s, cold"),
    ("rm", "`rm -rf` of the directory"),
    ("tar_x", f"`tar x` of the /usr-like tree ({int(tree):,} entries)"),
    ("find", "`find` of the tree, counted"),
    ("du", "`du -s`"),
    ("ls_lR", "`ls -lR`, cold"),
    ("rm_tree", "`rm -rf` of the tree"),
]
def cell(v):
    return "n/a" if not isinstance(v, float) else f"{v:.2f} s"
print(f"Kernel {kernel}; seconds (lower is better). tarn and zfs-fuse: a mirror of two sparse files; ext4: the file system holding them; btrfs: raid1 on two loop devices.")
print()
print("| operation | " + " | ".join(stacks) + " | tarn ÷ ext4 (≤ 3) | zfs-fuse ÷ tarn (≥ 3) |")
print("|---|" + "---:|" * (len(stacks) + 2))
for key, label in rows:
    vals = {s: get(s, key) for s in stacks}
    t, e, z = vals.get("tarn"), vals.get("ext4"), vals.get("zfs-fuse")
    num = lambda v: isinstance(v, float) and v > 0
    r1 = f"{t / e:.2f}" if num(t) and num(e) else "n/a"
    r2 = f"{z / t:.2f}" if num(t) and num(z) else "n/a"
    print(f"| {label} | " + " | ".join(cell(vals[s]) for s in stacks) + f" | {r1} | {r2} |")
print()
rm = get("tarn", "rm")
if isinstance(rm, float):
    print(f"- tarn `rm -rf` of {int(entries):,} entries: {rm:.1f} s (target under 9 s at 200,000)")
for s in stacks:
    c, why = get(s, "config"), get(s, "reason")
    if c:
        print(f"- {s}: {c}")
    if why:
        print(f"- {s}: {why}")
EOF
