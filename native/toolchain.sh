# Sourced by native/*/build.sh (POSIX sh, under their `set -eu`): finding a Rust toolchain,
# installing one when there is none, and building one crate's wheel into a virtualenv with it,
# the same way for every native extension.
#
# A cargo builds when it runs and is at least $RUST_MIN (Cargo.lock version 4 needs 1.78; PyO3
# 0.27 needs 1.74). One is looked for on PATH, then where rustup puts it ($CARGO_HOME/bin,
# ~/.cargo/bin, /root/.cargo/bin, /usr/local/cargo/bin), then Debian's (/usr/bin): the first
# that builds is taken. Found outside PATH, rustup's proxies need their RUSTUP_HOME and
# CARGO_HOME: the ones beside that cargo. None at all: Debian's cargo and rustc are installed
# with apt-get (as devstack installs PostgreSQL and Maven), so the compiled paths build on a
# fresh machine whatever HOME is. Only EVIDENCE_NATIVE=0 (the pure Python paths, chosen on
# purpose) builds nothing.

RUST_MIN=78  # the minor version of 1.x

# has_toolchains DIR: DIR is a rustup home with at least one toolchain installed.
has_toolchains() {
    [ -d "$1/toolchains" ] && [ -n "$(ls -A "$1/toolchains" 2>/dev/null)" ]
}

# use_cargo CARGO: export what CARGO needs (PATH first, and rustup's homes beside a cargo
# found outside PATH where they were unset).
use_cargo() {
    bindir=$(dirname "$1")
    home=$(dirname "$bindir")
    if [ -z "${CARGO_HOME:-}" ] && [ "$(basename "$home")" = ".cargo" ]; then
        export CARGO_HOME="$home"
    fi
    # A ~/.rustup without toolchains (an empty one, made by a rustup proxy run under a fresh
    # HOME) is no rustup home: the one beside that cargo is, if it has toolchains.
    if [ -z "${RUSTUP_HOME:-}" ] && ! has_toolchains "${HOME:-/nonexistent}/.rustup" \
            && has_toolchains "$(dirname "$home")/.rustup"; then
        export RUSTUP_HOME="$(dirname "$home")/.rustup"
    fi
    PATH="$bindir:$PATH"
    export PATH
}

# builds CARGO: CARGO runs (a rustup proxy without a toolchain behind it does not) and is
# recent enough; tried in a subshell, so a refused candidate leaves no exports behind.
builds() {
    (
        use_cargo "$1"
        version=$("$1" --version 2>/dev/null) || exit 1
        minor=$(echo "$version" | sed -n 's/^cargo 1\.\([0-9][0-9]*\)\..*/\1/p')
        [ -n "$minor" ] && [ "$minor" -ge "$RUST_MIN" ]
    )
}

# find_cargo: print the cargo that would build, with its environment exported (use_cargo);
# return 1 when there is none.
find_cargo() {
    for c in "$(command -v cargo 2>/dev/null || true)" "${CARGO_HOME:-/nonexistent}/bin/cargo" \
             "${HOME:-/nonexistent}/.cargo/bin/cargo" /root/.cargo/bin/cargo \
             /usr/local/cargo/bin/cargo /usr/bin/cargo; do
        if [ -n "$c" ] && [ -x "$c" ] && builds "$c"; then
            use_cargo "$c"
            echo "$c"
            return 0
        fi
    done
    return 1
}

# install_cargo: Debian's cargo and rustc, when we may (root with apt-get). Debian 12's own
# cargo is 1.63, too old: there the -web builds (1.85 and later, kept up to date for the
# browsers) are taken; a later Debian's plain cargo is recent enough.
install_cargo() {
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        return 1
    fi
    echo "no Rust toolchain: installing Debian's cargo and rustc with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    # The lock timeout: `make test` installs the browser side by side (tools/browser_setup.sh).
    apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null || true
    if apt-cache show cargo-web >/dev/null 2>&1; then
        packages="cargo-web rustc-web"
    else
        packages="cargo rustc"
    fi
    # shellcheck disable=SC2086 # two package names
    apt-get -o DPkg::Lock::Timeout=600 install -y -q $packages >/dev/null || return 1
}

# build_native PYTHON CRATE_DIR MODULE USER FALLBACK: install the crate in CRATE_DIR (its wheel
# built by maturin and cargo, with the virtualenv's uv; pip where it has none) into PYTHON's
# virtualenv and check MODULE imports. With EVIDENCE_NATIVE=0, MODULE is not built (any stale
# build uninstalled) and USER takes FALLBACK. No toolchain to be found or installed: an error
# that says how to get one.
build_native() {
    py=$1 crate=$2 module=$3 user=$4 fallback=$5
    if [ "${EVIDENCE_NATIVE:-}" = 0 ]; then
        echo "EVIDENCE_NATIVE=0: $module is not built, and $user $fallback" >&2
        "$py" -m pip uninstall -q -y "$(echo "$module" | tr _ -)" >/dev/null 2>&1 || true
        return 0
    fi
    if ! cargo=$(find_cargo) && ! { install_cargo && cargo=$(find_cargo); }; then
        echo "ERROR: no Rust toolchain (cargo 1.$RUST_MIN or later) on PATH, in ~/.cargo," >&2
        echo "ERROR: /root/.cargo, /usr/local/cargo or /usr/bin, and none could be installed" >&2
        echo "ERROR: (apt-get needs root): $module cannot be built. Install Rust (rustup," >&2
        echo "ERROR: or Debian's cargo-web and rustc-web), or set EVIDENCE_NATIVE=0 and $user" >&2
        echo "ERROR: $fallback" >&2
        return 1
    fi
    find_cargo >/dev/null  # again in this shell: the exports of a $(...) are lost
    echo "building $module with $cargo ($("$cargo" --version))"
    # The wheel is built apart from the virtualenv, then installed into it. `make test` installs
    # the Python packages into the same virtualenv while the crates build (tools/test_setup.sh),
    # and pip's isolated build starts its interpreter on the virtualenv's site-packages: a .pth
    # of an editable package that uv had written before the module it imports made that build
    # fail (pip 26.3 empties sys.path while it reads them). uv builds in an environment of its
    # own, and its install takes the virtualenv's lock, so it waits for the other install.
    uv=$(dirname "$py")/uv
    if [ -x "$uv" ]; then
        wheels=$(mktemp -d)
        rc=0
        UV_FIND_LINKS="${UV_FIND_LINKS:-${PIP_FIND_LINKS:-}}" \
            "$uv" build -q --wheel --out-dir "$wheels" --python "$py" "$crate" || rc=$?
        if [ "$rc" = 0 ]; then
            "$uv" pip install -q --python "$py" --no-deps --reinstall "$wheels"/*.whl || rc=$?
        fi
        rm -rf "$wheels"
        [ "$rc" = 0 ] || return "$rc"
    else
        "$py" -m pip install -q --force-reinstall --no-deps "$crate"
    fi
    "$py" -c "import $module" \
        || { echo "$module does not import" >&2; return 1; }
}
