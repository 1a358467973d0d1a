#!/usr/bin/env bash
# Runs every fuzz target in fuzz/ for N seconds each (default 60) and
# summarises the results. Usage:
#
#   scripts/fuzz.sh [seconds-per-target] [target ...]
#
# Environment:
#   FUZZ_TARGET_DIR  cargo target dir for the sanitizer build (default
#                    fuzz/target; keep it apart from the workspace's target)
#   FUZZ_ARGS        extra libFuzzer flags, e.g. "-max_len=65536 -jobs=2"
#   CFLAGS           flags for C dependencies (default -fno-sanitize=address,
#                    see below)
#
# cargo-fuzz needs nightly-only rustc flags (-Zsanitizer=address); with
# RUSTC_BOOTSTRAP=1 the stable toolchain accepts them, so no nightly is
# needed. A crash leaves its input in fuzz/artifacts/<target>/; the script
# prints it as hex and exits non-zero. Reproduce one with
#   RUSTC_BOOTSTRAP=1 cargo fuzz run <target> fuzz/artifacts/<target>/<file>
set -euo pipefail

cd "$(dirname "$0")/.."
secs="${1:-60}"
shift || true
export RUSTC_BOOTSTRAP=1
# With a "nightly" rustc, cc >= 1.11 also builds C dependencies (zstd) with
# -fsanitize=address. Here that is GCC's instrumentation against rustc's LLVM
# runtime, and it reported a stack-use-after-scope on a *global* inside
# libzstd's optimal parser (zstd_opt.c ZSTD_selectBtGetAllMatches) for an
# input that runs clean uninstrumented and with the Rust code alone
# instrumented. The Rust code under test stays instrumented; set CFLAGS to
# override.
export CFLAGS="${CFLAGS:--fno-sanitize=address}"
target_dir="${FUZZ_TARGET_DIR:-fuzz/target}"

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz" >&2
    cargo install cargo-fuzz --locked
fi

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list --fuzz-dir fuzz)
fi

cargo fuzz build --fuzz-dir fuzz --target-dir "$target_dir"

failed=()
summary=()
for t in "${targets[@]}"; do
    corpus="fuzz/corpus/$t"
    mkdir -p "$corpus"
    corpora=("$corpus")
    [ -d "fuzz/seeds/$t" ] && corpora+=("fuzz/seeds/$t")
    dict=()
    [ -f "fuzz/dicts/$t.dict" ] && dict=("-dict=fuzz/dicts/$t.dict")
    log="$target_dir/fuzz-$t.log"
    mkdir -p "$target_dir"
    echo "== $t: ${secs}s" >&2
    # shellcheck disable=SC2086
    if cargo fuzz run --fuzz-dir fuzz --target-dir "$target_dir" "$t" "${corpora[@]}" -- \
        -max_total_time="$secs" -print_final_stats=1 "${dict[@]}" ${FUZZ_ARGS:-} >"$log" 2>&1; then
        status=ok
    else
        status=CRASH
        failed+=("$t")
    fi
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    summary+=("$(printf '%-20s %-6s execs=%-10s %s' "$t" "$status" "${execs:-?}" "${cov:-}")")
    if [ "$status" = CRASH ]; then
        grep -E 'panicked at|ERROR: |SUMMARY' "$log" | head -5 >&2 || true
        for a in fuzz/artifacts/"$t"/*; do
            [ -f "$a" ] || continue
            echo "artifact $a:" >&2
            od -An -tx1 -v "$a" | tr -d ' \n' | head -c 4096 >&2
            echo >&2
        done
    fi
done

printf '%s\n' "${summary[@]}"
if [ "${#failed[@]}" -gt 0 ]; then
    echo "crashed: ${failed[*]} (logs in $target_dir/fuzz-*.log)" >&2
    exit 1
fi
