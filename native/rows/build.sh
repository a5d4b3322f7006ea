#!/bin/sh
# Build evidence_rows_native (this crate: the projector's compiled row path) into the
# virtualenv whose python is $1. The Makefile's $(STAMP) rule runs it, so `make up` and
# `make test` build it on a fresh clone: uv builds the wheel with maturin (from PyPI, in an
# isolated build environment) and cargo (crates from crates.io, pinned by Cargo.lock).
#
# cargo is looked for as native/toolchain.sh looks for it (for every native crate): on PATH,
# where rustup puts it, then Debian's; none at all: Debian's is installed with apt-get. No
# toolchain to be had is an error; only EVIDENCE_NATIVE=0 builds nothing on purpose.
#
#     native/rows/build.sh PYTHON    build and install
#     native/rows/build.sh --probe   print the cargo that would build (exit 1: none)
set -eu
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../toolchain.sh"

if [ "${1:-}" = "--probe" ]; then
    find_cargo && exit 0
    exit 1
fi
PY=${1:?usage: native/rows/build.sh PYTHON}
build_native "$PY" "$here" evidence_rows_native "the projector" \
    "decodes with its pure Python row path (slower rebuilds)."
