#!/bin/sh
# Build evidence_rows_native (this crate: the projector's compiled row path) into the
# virtualenv whose python is $1. The Makefile's $(STAMP) rule runs it, so `make up` and
# `make test` build it on a fresh clone: pip builds the wheel with maturin (from PyPI, in an
# isolated build environment) and cargo (crates from crates.io, pinned by Cargo.lock).
#
# cargo is looked for as native/seal/build.sh looks for it: on PATH, then $CARGO_HOME/bin,
# ~/.cargo/bin, /root/.cargo/bin, /usr/local/cargo/bin, with rustup's homes beside it. No
# toolchain at all: a warning, and the projector takes the pure Python row path.
#
#     native/rows/build.sh PYTHON    build and install
#     native/rows/build.sh --probe   exit 0 if there is a cargo that would build, else 1
set -eu
here=$(cd "$(dirname "$0")" && pwd)

find_cargo() {
    found=$(command -v cargo 2>/dev/null || true)
    if [ -z "$found" ]; then
        for c in "${CARGO_HOME:-/nonexistent}/bin/cargo" "${HOME:-/nonexistent}/.cargo/bin/cargo" \
                 /root/.cargo/bin/cargo /usr/local/cargo/bin/cargo; do
            if [ -x "$c" ]; then found=$c; break; fi
        done
    fi
    [ -n "$found" ] || return 1
    bindir=$(dirname "$found")
    home=$(dirname "$bindir")
    if [ -z "${CARGO_HOME:-}" ] && [ "$(basename "$home")" = ".cargo" ]; then
        export CARGO_HOME="$home"
    fi
    if [ -z "${RUSTUP_HOME:-}" ] && [ ! -d "${HOME:-/nonexistent}/.rustup" ] \
            && [ -d "$(dirname "$home")/.rustup" ]; then
        export RUSTUP_HOME="$(dirname "$home")/.rustup"
    fi
    PATH="$bindir:$PATH"
    export PATH
    "$found" --version >/dev/null 2>&1 || return 1  # a rustup proxy with no toolchain
    echo "$found"
}

if [ "${1:-}" = "--probe" ]; then
    find_cargo >/dev/null && exit 0
    exit 1
fi
PY=${1:?usage: native/rows/build.sh PYTHON}
if ! cargo=$(find_cargo); then
    echo "WARNING: no Rust toolchain (cargo) on PATH, in ~/.cargo, /root/.cargo or" >&2
    echo "WARNING: /usr/local/cargo: evidence_rows_native is not built, and the projector" >&2
    echo "WARNING: decodes with its pure Python row path (slower rebuilds; rustup installs Rust)." >&2
    "$PY" -m pip uninstall -q -y evidence-rows-native >/dev/null 2>&1 || true
    exit 0
fi
find_cargo >/dev/null  # again in this shell: the exports of a $(...) are lost
echo "building evidence_rows_native with $cargo ($("$cargo" --version))"
"$PY" -m pip install -q --force-reinstall --no-deps "$here"
"$PY" -c "import evidence_rows_native" \
    || { echo "evidence_rows_native does not import" >&2; exit 1; }
