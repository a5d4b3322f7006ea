#!/bin/sh
# The browser tests' set-up, run by `make test` (and by tests/browser's fixtures when a single
# browser test is run on a machine that has none of it): Debian's Chromium and ChromeDriver,
# and axe-core (the accessibility check injected into each page) from the npm registry.
#
#   /usr/bin/chromium, /usr/bin/chromedriver   apt-get install chromium chromium-driver (root)
#   build/browser/node_modules/axe-core/       npm install axe-core@$AXE_VERSION (git ignores build/)
#
# The tests drive Chromium with Playwright's Python package (the test extra of pyproject.toml),
# launched with executable_path=/usr/bin/chromium: Playwright's own browser download is never
# used (it cannot be fetched here, and Debian's build is the one CI has). Idempotent: a machine
# that has all three is left as it is, in well under a second.
set -eu

AXE_VERSION=4.14.1
cd "$(dirname "$0")/.."
AXE_DIR=build/browser

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        echo "ERROR: the browser tests need Debian's chromium and chromium-driver" >&2
        echo "ERROR: (/usr/bin/chromium, /usr/bin/chromedriver); install them as root:" >&2
        echo "ERROR:     apt-get install chromium chromium-driver" >&2
        exit 1
    fi
    echo "no Chromium: installing Debian's chromium and chromium-driver with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    # The lock timeout: `make test` runs this beside pip and the native builds, which may
    # apt-get a Rust toolchain at the same time (native/toolchain.sh).
    apt-get -o DPkg::Lock::Timeout=600 update -q >/dev/null || true
    apt-get -o DPkg::Lock::Timeout=600 install -y -q chromium chromium-driver >/dev/null
fi

installed=$(node -p "require('./$AXE_DIR/node_modules/axe-core/package.json').version" \
    2>/dev/null || true)
if [ "$installed" != "$AXE_VERSION" ] || [ ! -f "$AXE_DIR/node_modules/axe-core/axe.min.js" ]; then
    if ! command -v npm >/dev/null 2>&1; then
        echo "ERROR: npm is needed to install axe-core $AXE_VERSION (apt-get install npm)" >&2
        exit 1
    fi
    echo "installing axe-core $AXE_VERSION into $AXE_DIR with npm" >&2
    mkdir -p "$AXE_DIR"
    # A package.json of its own, so npm installs here and not in a parent folder's project.
    [ -f "$AXE_DIR/package.json" ] || printf '{"private": true}\n' > "$AXE_DIR/package.json"
    npm install --prefix "$AXE_DIR" --no-audit --no-fund --save-exact --silent \
        "axe-core@$AXE_VERSION"
    test -f "$AXE_DIR/node_modules/axe-core/axe.min.js"
fi
