#!/usr/bin/env bash
# msrv.sh - check that the workspace builds with the Rust it declares
# (`rust-version` in Cargo.toml) and the locked dependencies: `cargo check`
# of every target with that toolchain, installed by rustup if missing, in a
# target directory of its own (target/msrv). scripts/test.sh runs it.
set -euo pipefail
cd "$(dirname "$0")/.."

msrv=$(sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -n 1)
[ -n "$msrv" ] || { echo "msrv: no rust-version in Cargo.toml" >&2; exit 1; }
command -v rustup >/dev/null || { echo "msrv: rustup is needed to check Rust $msrv" >&2; exit 1; }
if ! rustup run "$msrv" rustc --version >/dev/null 2>&1; then
    rustup toolchain install "$msrv" --profile minimal
fi
echo "msrv: cargo +$msrv check --workspace --all-targets --locked"
cargo "+$msrv" check --workspace --all-targets --locked --target-dir target/msrv --quiet
