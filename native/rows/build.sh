#!/bin/sh
# Build evidence_rows_native (this crate: the projector's compiled row path) into the
# virtualenv whose python is $1. The Makefile's $(STAMP) rule runs it, so `make up` and
# `make test` build it on a fresh clone: pip builds the wheel with maturin (from PyPI, in an
# isolated build environment) and cargo (crates from crates.io, pinned by Cargo.lock).
#
# cargo is looked for as native/toolchain.sh looks for it (for every native crate): on PATH,
# then $CARGO_HOME/bin, ~/.cargo/bin, /root/.cargo/bin, /usr/local/cargo/bin, with rustup's
# homes beside it. No toolchain at all: a warning, and the projector takes the pure Python
# row path.
#
#     native/rows/build.sh PYTHON    build and install
#     native/rows/build.sh --probe   exit 0 if there is a cargo that would build, else 1
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../toolchain.sh"

if [ "${1:-}" = "--probe" ]; then
    find_cargo >/dev/null && exit 0
    exit 1
fi
PY=${1:?usage: native/rows/build.sh PYTHON}
build_native "$PY" "$here" evidence_rows_native "the projector" \
    "decodes with its pure Python row path (slower rebuilds; rustup installs Rust)."
