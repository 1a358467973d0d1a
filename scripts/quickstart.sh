#!/usr/bin/env bash
# tarn's quick start: builds tarn, then creates a mirrored pool on two
# sparse files, makes datasets with properties, shows the pool the way
# zpool/zfs do, exports and re-imports it, and destroys it again.
# Run as root on Debian. Leaves nothing behind but the build.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
cargo build --release --bin tarn
tarn=$PWD/target/release/tarn

demo=$(mktemp -d /tmp/tarn-demo.XXXXXX)
# A private daemon for the demo, so it never touches pools you already have.
export TARN_RUN_DIR=$demo/run TARN_SOCKET=$demo/run/tarn.sock TARN_CACHEFILE=$demo/tarn.cache
cleanup() {
    "$tarn" zpool destroy -f demo >/dev/null 2>&1 || true
    pkill -f "$tarn daemon" >/dev/null 2>&1 || true
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
run "$tarn" zpool list
run "$tarn" zpool status demo
run "$tarn" zfs list -r demo
run "$tarn" zfs get recordsize,compression,quota -r demo
run "$tarn" zpool export demo
run "$tarn" zpool import -d "$demo"
run "$tarn" zpool import -d "$demo" demo
run "$tarn" zfs list -r -o name,used,avail,refer,recordsize demo
run "$tarn" zpool history demo
run "$tarn" zpool destroy demo
printf '\nquick start finished: pool created, used, exported, imported and destroyed.\n'
