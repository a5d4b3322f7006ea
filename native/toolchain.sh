# Sourced by native/*/build.sh (POSIX sh, under their `set -eu`): finding cargo, and building
# one crate's wheel into a virtualenv with it, the same way for every native extension.
#
# cargo is looked for on PATH, then where rustup puts it ($CARGO_HOME/bin, ~/.cargo/bin,
# /root/.cargo/bin, /usr/local/cargo/bin), as devstack looks for Go beside PATH. Found outside
# PATH, rustup's proxies need their RUSTUP_HOME and CARGO_HOME: the ones beside that cargo.

# has_toolchains DIR: DIR is a rustup home with at least one toolchain installed.
has_toolchains() {
    [ -d "$1/toolchains" ] && [ -n "$(ls -A "$1/toolchains" 2>/dev/null)" ]
}

# find_cargo: print the cargo that would build, with PATH (and CARGO_HOME, RUSTUP_HOME where
# they were unset) exported for it; return 1 when there is none.
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
    # A ~/.rustup without toolchains (an empty one, made by a rustup proxy run under a fresh
    # HOME) is no rustup home: the one beside that cargo is, if it has toolchains.
    if [ -z "${RUSTUP_HOME:-}" ] && ! has_toolchains "${HOME:-/nonexistent}/.rustup" \
            && has_toolchains "$(dirname "$home")/.rustup"; then
        export RUSTUP_HOME="$(dirname "$home")/.rustup"
    fi
    PATH="$bindir:$PATH"
    export PATH
    # A rustup proxy without a toolchain behind it is no toolchain.
    "$found" --version >/dev/null 2>&1 || return 1
    echo "$found"
}

# build_native PYTHON CRATE_DIR MODULE USER FALLBACK: pip-install the crate in CRATE_DIR (its
# wheel built by maturin and cargo) into PYTHON's virtualenv and check MODULE imports. No
# toolchain: a warning that USER (who imports MODULE) takes FALLBACK instead, any stale
# build of MODULE uninstalled, and success.
build_native() {
    py=$1 crate=$2 module=$3 user=$4 fallback=$5
    if ! cargo=$(find_cargo); then
        echo "WARNING: no Rust toolchain (cargo) on PATH, in ~/.cargo, /root/.cargo or" >&2
        echo "WARNING: /usr/local/cargo: $module is not built, and $user" >&2
        echo "WARNING: $fallback" >&2
        "$py" -m pip uninstall -q -y "$(echo "$module" | tr _ -)" >/dev/null 2>&1 || true
        return 0
    fi
    find_cargo >/dev/null  # again in this shell: the exports of a $(...) are lost
    echo "building $module with $cargo ($("$cargo" --version))"
    "$py" -m pip install -q --force-reinstall --no-deps "$crate"
    "$py" -c "import $module" \
        || { echo "$module does not import" >&2; return 1; }
}
