#!/usr/bin/env bash
# Installs what building and testing tarn needs on a fresh Debian machine
# (run as root). Idempotent: skips what is already there.
set -euo pipefail

need_apt=()
# qemu-utils and libnbd-bin: the volume tests' NBD clients (qemu-io,
# qemu-img, nbdinfo, nbdcopy).
for pkg in gcc make pkg-config curl ca-certificates qemu-utils libnbd-bin; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ ${#need_apt[@]} -gt 0 ]; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${need_apt[@]}"
fi

if ! command -v cargo >/dev/null 2>&1; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
fi

if ! cargo nextest --version >/dev/null 2>&1; then
    cargo install cargo-nextest --locked
fi
