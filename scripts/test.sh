#!/usr/bin/env bash
# Runs tarn's whole test suite (unit, property, crash and end-to-end CLI
# tests). Needs root for the end-to-end tests; installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export PATH="$HOME/.cargo/bin:$PATH"
exec cargo nextest run --workspace --no-fail-fast "$@"
