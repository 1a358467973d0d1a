#!/usr/bin/env bash
# tarn's quick start: builds tarn, creates a mirrored pool on two sparse
# files, mounts its datasets through FUSE, copies files into them like into
# any directory, shows the pool the way zpool/zfs/df do, exports and
# re-imports it, checks every file reads back byte for byte, and destroys
# the pool. Run as root on Debian. Leaves nothing behind but the build.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --bin tarn
tarn=$PWD/target/release/tarn

demo=$(mktemp -d /tmp/tarn-demo.XXXXXX)
# A private daemon for the demo, so it never touches pools you already
# have, and a private mount root: the pool mounts on $demo/mnt/demo rather
# than on /demo (every mountpoint is placed under TARN_MOUNT_ROOT).
export TARN_RUN_DIR=$demo/run TARN_SOCKET=$demo/run/tarn.sock TARN_CACHEFILE=$demo/tarn.cache
export TARN_MOUNT_ROOT=$demo/mnt
mnt=$TARN_MOUNT_ROOT/demo

cleanup() {
    cd /
    "$tarn" zpool destroy -f backup >/dev/null 2>&1 || true
    "$tarn" zpool destroy -f demo >/dev/null 2>&1 || true
    # SIGTERM: the daemon unmounts what is left, syncs and exits.
    local pid
    pid=$(cat "$demo/run/tarn.lock" 2>/dev/null || true)
    if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
    fi
    if grep -q " $demo/" /proc/mounts; then
        echo "quick start: something is still mounted under $demo; leaving it" >&2
        return
    fi
    rm -rf "$demo"
}
trap cleanup EXIT

run() { printf '\n# %s\n' "$*"; "$@"; }

truncate -s 1G "$demo/a.img" "$demo/b.img"
run "$tarn" zpool create demo mirror "$demo/a.img" "$demo/b.img"
run "$tarn" zfs create -o recordsize=1M -o compression=zstd demo/media
run "$tarn" zfs create -p demo/db/pg
run "$tarn" zfs set recordsize=16K demo/db
run "$tarn" zfs set quota=200M demo/db/pg
run "$tarn" zfs mount

# The datasets are directories now: ordinary tools work on them.
run cp -r /usr/share/common-licenses "$mnt/media/licenses"
run dd if=/dev/urandom of="$mnt/db/pg/table.bin" bs=1M count=64 status=none
run dd if=/dev/zero of="$mnt/media/zeros.bin" bs=1M count=100 status=none
run mkdir "$mnt/notes"
echo "written through FUSE at $(date -u)" >"$mnt/notes/hello.txt"
(cd "$mnt" && find . -type f -print0 | sort -z | xargs -0 sha256sum) >"$demo/SHA256SUMS"
# fsync: tarn commits the transaction group, so zfs list counts the data.
sync "$mnt/notes/hello.txt"
printf '\n# %s files written, checksums in %s\n' "$(wc -l <"$demo/SHA256SUMS")" "$demo/SHA256SUMS"

run "$tarn" zfs list -r demo
run df -h "$mnt" "$mnt/media" "$mnt/db/pg"
run "$tarn" zpool list
run "$tarn" zpool status demo
run "$tarn" zfs get recordsize,compression,compressratio,quota,mounted -r demo

run "$tarn" zpool export demo
run grep -c " $mnt" /proc/mounts || true
run "$tarn" zpool import -d "$demo"
run "$tarn" zpool import -d "$demo" demo
run "$tarn" zfs mount
printf '\n# sha256sum -c (in %s)\n' "$mnt"
(cd "$mnt" && sha256sum -c --quiet "$demo/SHA256SUMS")
printf 'every file read back intact after export and import\n'

# Snapshots: take one of everything, change things, look, roll back.
run "$tarn" zfs snapshot -r demo@verified
run rm "$mnt/notes/hello.txt"
run dd if=/dev/urandom of="$mnt/db/pg/table.bin" bs=1M count=8 conv=notrunc status=none
run "$tarn" zfs list -t snapshot -o name,used,refer,written -r demo
run "$tarn" zfs diff demo@verified
run cat "$mnt/.zfs/snapshot/verified/notes/hello.txt"
run "$tarn" zfs rollback demo@verified
run "$tarn" zfs rollback demo/db/pg@verified
printf '\n# sha256sum -c after the rollbacks\n'
(cd "$mnt" && sha256sum -c --quiet "$demo/SHA256SUMS")
printf 'every file as it was when the snapshot was taken\n'
run "$tarn" zfs clone demo/media@verified demo/media-copy
run ls "$mnt/media-copy"
run "$tarn" zfs list -r -o name,used,avail,refer,origin,mounted,mountpoint demo

# Replication: the whole tree into a second pool, then only what changed.
truncate -s 1G "$demo/backup.img"
run "$tarn" zpool create backup "$demo/backup.img"
run bash -c "'$tarn' zfs send -R demo@verified | '$tarn' zfs receive -u -F backup/demo"
run "$tarn" zfs snapshot -r demo@later
run bash -c "echo 'written after the backup' > '$mnt/notes/later.txt'"
run "$tarn" zfs snapshot -r demo@evening
run "$tarn" zfs send -nvP -R -I @verified demo@evening
run bash -c "'$tarn' zfs send -R -I @verified demo@evening | '$tarn' zfs receive -v -u -F backup/demo"
run "$tarn" zfs mount -a
printf '\n# sha256sum -c in the backup (%s)\n' "$TARN_MOUNT_ROOT/backup/demo"
(cd "$TARN_MOUNT_ROOT/backup/demo" && sha256sum -c --quiet "$demo/SHA256SUMS")
run cat "$TARN_MOUNT_ROOT/backup/demo/notes/later.txt"
run "$tarn" zfs list -t all -r -o name,used,refer,mounted backup
run "$tarn" zpool destroy backup
# Volumes: a block device for a VM, served over NBD at <run dir>/zvol.
zv=$TARN_RUN_DIR/zvol/demo
run "$tarn" zfs create -V 128M demo/vm
run ls -l "$zv/vm"
run nbdinfo "nbd+unix:///?socket=$zv/vm"
run qemu-io -f raw -c "write -P 0x5a 0 32M" -c "write -z 32M 32M" -c flush "nbd:unix:$zv/vm"
run "$tarn" zfs snapshot demo/vm@golden
run "$tarn" zfs clone demo/vm@golden demo/guest1
run qemu-io -f raw -c "read -P 0x5a 0 32M" -c "write -P 0x77 0 1M" "nbd:unix:$zv/guest1"
run nbdinfo --map "nbd+unix:///?socket=$zv/guest1"
run "$tarn" zfs list -t volume -o name,volsize,volblocksize,used,refer,refreservation,origin
run "$tarn" zpool history demo
run "$tarn" zpool destroy demo
printf '\nquick start finished: pool created, mounted, used, exported, imported, verified, snapshotted, rolled back, cloned, replicated to a second pool, given volumes over NBD and destroyed.\n'
