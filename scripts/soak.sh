#!/usr/bin/env bash
# Soak the crash-consistency suites with many seeds:
#   sim   the engine on simulated disks whose power is cut at a seeded I/O
#         (crates/tarn-zpl/tests/zil_crash.rs), two crashes per seed;
#   fuse  the real daemon killed with SIGKILL under a FUSE workload
#         (crates/tarn/tests/zil_crash.rs), one crash per seed; needs root.
#
#   scripts/soak.sh [COUNT [START]]      seeds START..START+COUNT of each
#                                        (default 2000 from 0)
#   SOAK_SUITES=sim|fuse|both            which suites (default both)
#
# Stops at the first failure and prints the seed and the command that
# replays it. Ctrl-C stops at once and leaves no daemon, mount or
# temporary directory behind.
set -euo pipefail

count=${1:-2000}
start=${2:-0}
suites=${SOAK_SUITES:-both}
# Seeds per test run: the FUSE suite re-reads every earlier round of a
# run after each crash, so its runs stay short.
sim_chunk=200
fuse_chunk=20

cd "$(dirname "$0")/.."
case $suites in
sim | fuse | both) ;;
*)
    echo "SOAK_SUITES must be sim, fuse or both" >&2
    exit 2
    ;;
esac
if [[ $suites != sim && $(id -u) != 0 ]]; then
    echo "the fuse suite mounts filesystems: run as root, or SOAK_SUITES=sim" >&2
    exit 2
fi

# Every temporary directory of the FUSE suite (and so every daemon socket
# and mount) lives under $work.
work=$(mktemp -d "${TMPDIR:-/tmp}/tarn-soak.XXXXXX")
out=$work/out

# Stops the daemons started under $work (by the pid in their lock file),
# detaches what is still mounted there and removes it all.
cleanup() {
    local lock pid
    for lock in "$work"/tmp/.tmp*/run/tarn.lock; do
        [[ -f $lock ]] || continue
        pid=$(<"$lock")
        [[ $pid =~ ^[0-9]+$ ]] || continue
        kill -TERM "$pid" 2>/dev/null || continue
        for _ in $(seq 100); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
    done
    awk -v dir="$work" 'index($5, dir) == 1 { print $5 }' /proc/self/mountinfo |
        sort -r | while read -r mp; do umount -l "$mp" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'echo; echo "interrupted"; exit 130' INT TERM
mkdir -p "$work/tmp"

# run NAME REPLAY_HINT -- COMMAND...: runs one chunk; on failure prints
# its output's end and the failing seed (TARN_SEED), and exits.
run() {
    local name=$1 hint=$2
    shift 3
    if ! TMPDIR=$work/tmp "$@" >"$out" 2>&1; then
        # The panic messages, without backtraces.
        awk '/panicked at/ { p = 1 } p' "$out" | grep -vE '^ +([0-9]+: |at )' | head -n 80
        local seed
        seed=$(grep -o "replay: TARN_SEED=[0-9]*" "$out" | tail -n 1 | cut -d= -f2 || true)
        echo
        if [[ -n $seed ]]; then
            echo "FAILED: $name seed $seed; replay with: TARN_SEED=$seed $hint"
        else
            echo "FAILED: $name (no seed reported; full output above)"
        fi
        exit 1
    fi
    grep -E "^[0-9]+ seeds \(" "$out" || grep "test result" "$out"
}

echo "building the crash suites"
cargo test -p tarn-zpl -p tarn --test zil_crash --no-run 2>&1 | tail -n 1

end=$((start + count))
sim_test=acknowledged_state_survives_power_loss_under_many_threads
fuse_test=acknowledged_state_survives_sigkill_under_many_threads
for ((s = start; s < end; s += sim_chunk)); do
    n=$((end - s < sim_chunk ? end - s : sim_chunk))
    if [[ $suites != fuse ]]; then
        echo "sim  seeds $s..$((s + n))"
        TARN_SEED_START=$s TARN_SEEDS=$n run sim \
            "cargo test -p tarn-zpl --test zil_crash $sim_test" -- \
            cargo test -p tarn-zpl --test zil_crash "$sim_test" -- --exact --nocapture
    fi
    if [[ $suites != sim ]]; then
        for ((f = s; f < s + n; f += fuse_chunk)); do
            m=$((s + n - f < fuse_chunk ? s + n - f : fuse_chunk))
            echo "fuse seeds $f..$((f + m))"
            TARN_SEED_START=$f TARN_SEEDS=$m run fuse \
                "cargo test -p tarn --test zil_crash $fuse_test" -- \
                cargo test -p tarn --test zil_crash "$fuse_test" -- --exact
        done
    fi
done
echo "all seeds $start..$end passed ($suites)"
