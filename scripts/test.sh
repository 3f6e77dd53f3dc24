#!/usr/bin/env bash
# test.sh - set the machine up (scripts/setup.sh), check that the declared
# Rust version builds (scripts/msrv.sh), then run the whole workspace's
# tests in release mode.  Extra arguments go to cargo test,
# e.g. scripts/test.sh -p dpm-pmi, or scripts/test.sh -- --nocapture.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh
# setup.sh may have just installed rustup; its PATH change lives in this file.
# shellcheck source=/dev/null
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"

# The declared MSRV builds (rust-version in Cargo.toml): see scripts/msrv.sh.
./scripts/msrv.sh
exec cargo test --release --workspace "$@"
