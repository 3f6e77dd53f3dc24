#!/usr/bin/env bash
# wheel.sh - build the dpm-mpi wheel (pyproject.toml) with maturin.
#
#   scripts/wheel.sh [--strip] [-o DIR]
#
# Steps, each what CI runs:
#   1. maturin (pinned) in its own venv, target/wheel/tools/ (made once);
#   2. dpm's PMI client libraries (make -C client) and the man page
#      (dpm man, from the one option table), copied with mpiexec.dpm into
#      target/wheel/dpm_mpi.data/ — the files the wheel installs under the
#      environment's prefix (bin/, lib/, include/, share/man/man1/);
#   3. maturin build --release into DIR (default target/wheel/dist).
# Without --strip the wheel reuses the release build in $CARGO_TARGET_DIR
# (default target/, the workspace's: nothing recompiled); with --strip (a
# release for PyPI: 2.7 MB instead of 14 MB) maturin relinks dpm without its
# symbols, which replaces $CARGO_TARGET_DIR/release/dpm until the next cargo
# build.
# Prints the wheel's path as its last line.
set -euo pipefail
cd "$(dirname "$0")/.."

MATURIN_VERSION=1.16.0
PYTHON=${PYTHON:-python3}
TOOLS=target/wheel/tools
DATA=target/wheel/dpm_mpi.data    # pyproject.toml's [tool.maturin] data
TARGET=$(realpath -m "${CARGO_TARGET_DIR:-target}")
OUT=target/wheel/dist
STRIP=()

while [ $# -gt 0 ]; do
    case $1 in
        --strip) STRIP=(--strip) ;;
        -o) OUT=$2; shift ;;
        *) echo "usage: scripts/wheel.sh [--strip] [-o DIR]" >&2; exit 2 ;;
    esac
    shift
done

log() { printf '[wheel] %s\n' "$*" >&2; }

# ---- 1. maturin ------------------------------------------------------------
if [ "$("$TOOLS/bin/maturin" --version 2>/dev/null)" != "maturin $MATURIN_VERSION" ]; then
    log "installing maturin==$MATURIN_VERSION into $TOOLS"
    rm -rf "$TOOLS"
    "$PYTHON" -m venv "$TOOLS"
    "$TOOLS/bin/pip" install --disable-pip-version-check -q "maturin==$MATURIN_VERSION"
fi

# ---- 2. the files beside the binary ----------------------------------------
make -s -C client
CARGO_TARGET_DIR=$TARGET cargo build --release -q -p dpm
rm -rf "$DATA"
mkdir -p "$DATA/scripts" "$DATA/data/lib" "$DATA/data/include" "$DATA/data/share/man/man1"
# A wheel holds no symbolic links: each name is a copy (the .so for -lpmi,
# the .so.0 a program loads; both carry the soname libpmi.so.0).
for lib in libpmi libpmi2; do
    cp target/client/lib/$lib.so.0 "$DATA/data/lib/$lib.so.0"
    cp target/client/lib/$lib.so.0 "$DATA/data/lib/$lib.so"
done
cp include/pmi.h include/pmi2.h "$DATA/data/include/"
"$TARGET/release/dpm" man > "$DATA/data/share/man/man1/dpm.1"
cp packaging/mpiexec.dpm "$DATA/scripts/mpiexec.dpm"
chmod 0755 "$DATA/scripts/mpiexec.dpm"

# ---- 3. the wheel ----------------------------------------------------------
mkdir -p "$OUT"

CARGO_TARGET_DIR=$TARGET "$TOOLS/bin/maturin" build --release "${STRIP[@]}" -o "$OUT" >&2
wheel=$(ls -t "$OUT"/dpm_mpi-*.whl | head -n 1)
log "built $wheel"
printf '%s\n' "$wheel"
