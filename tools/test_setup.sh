#!/bin/sh
# What `make test` does before pytest: install what the suite needs and start the stack it runs
# against. The steps that need nothing of each other run side by side, which takes about a
# minute and a half off a fresh clone's set-up (most of them wait on the network or on one
# core):
#
#   1. the virtualenv, a current pip and uv ($VENVSTAMP)
#   2. the browser (tools/browser_setup.sh: apt-get, npm)
#      | the native crates (cargo, $NATIVESTAMP)
#      | the Python packages (uv, $PYSTAMP), then the layer contract (lint-imports), then
#        | Kafka, PostgreSQL and the topics (devstack up --no-services)
#        | the bytecode caches (below)
#
# The stack's own services (writer, projector, API, witness, publisher) are not started: every
# test starts the services it drives, on topics and schemas of its own, and none reads what the
# stack's services make. Left running idle beside the suite they cost it about 40 s of CPU
# (most of it the broker answering their consumers' empty fetches: an idle consumer with the
# writer's 20 ms fetch wait took 2.4-3.8% of a core of the broker, measured here) and 13 s of
# set-up. `make up` starts them, before or after `make test`.
#
# The bytecode caches: each of pytest's parallel workers imports every test module, and pytest
# rewrites each module's asserts on import unless it finds the result cached in __pycache__;
# the services and CLI commands the tests start (hundreds of processes) import the product's
# modules. Where PYTHONDONTWRITEBYTECODE is set (as on this project's machines) nothing is
# cached, so every worker rewrote all 235 test modules (22 s of CPU each instead of 10) and
# every process compiled what it imported. One collection and a compileall write the caches
# once; the processes that follow only read them.
#
# Each background step's output is held in build/setup/ and printed when it ends, so the
# terminal reads in order. Any step failing fails `make test`, after the others have ended
# (but the caches' warm-up: the suite only runs slower without it).
# Called by the Makefile with PY, VENVSTAMP, PYSTAMP, NATIVESTAMP, STAMP and MAKE set.
set -u
cd "$(dirname "$0")/.."
: "${PY:?}" "${VENVSTAMP:?}" "${PYSTAMP:?}" "${NATIVESTAMP:?}" "${STAMP:?}" "${MAKE:=make}"
LOGS=build/setup
PACKAGES=$(for d in */; do [ -f "$d/__init__.py" ] && printf '%s ' "${d%/}"; done)
mkdir -p "$LOGS"

T0=$(date +%s)

# run NAME COMMAND...: COMMAND in the background, its output held in $LOGS/NAME.log, which
# ends with the exit code and the second of the set-up the step ended at.
run() {
    name=$1
    shift
    {
        "$@"
        rc=$?
        echo "[set-up] $name: exit $rc at $(( $(date +%s) - T0 )) s"
        exit "$rc"
    } > "$LOGS/$name.log" 2>&1 &
}

# finish NAME PID: wait for a background step, print its output, and say whether it failed.
finish() {
    wait "$2"
    rc=$?
    cat "$LOGS/$1.log"
    if [ "$rc" != 0 ]; then
        echo "ERROR: $1 failed (exit $rc); its output is above and in $LOGS/$1.log" >&2
    fi
    return "$rc"
}

warm_bytecode() {
    env -u PYTHONDONTWRITEBYTECODE "$PY" -m compileall -q -j 0 $PACKAGES \
        && env -u PYTHONDONTWRITEBYTECODE "$PY" -m pytest --collect-only -q -p no:cacheprovider
}

"$MAKE" --no-print-directory "$VENVSTAMP" || exit 1
run browser sh tools/browser_setup.sh
browser=$!
# The native crates are the longest step (about 65 s of CPU, most of it one crate's compile
# after another's), and the services the tests start run them. With pip, which mostly waited
# on the network, cargo ran niced, but with uv a niced cargo ended last.
run native "$MAKE" --no-print-directory "$NATIVESTAMP"
native=$!

failed=0
bytecode=
if "$MAKE" --no-print-directory "$PYSTAMP" && "$(dirname "$PY")/lint-imports"; then
    # The broker the whole suite shares runs with the C1-only JIT of the brokers the tests
    # start (tests/conftest.py): on the suite's short, varied load it took a quarter less CPU
    # than with C2 (60 -> 46 s over two and a half minutes), and the suite is bound by CPU.
    # Only a broker this starts: one that already runs (`make up`) is left as it is.
    run stack env EVIDENCE_KAFKA_JVM_OPTS="${EVIDENCE_KAFKA_JVM_OPTS--XX:TieredStopAtLevel=1}" \
        "$PY" -m devstack up --no-services
    stack=$!
    run bytecode warm_bytecode
    bytecode=$!
    finish stack "$stack" || failed=1
else
    failed=1
fi
finish native "$native" || failed=1
if [ "$failed" = 0 ]; then
    "$MAKE" --no-print-directory "$STAMP" || failed=1
fi
# Only a cache: if it fails, the suite runs without it (and reports any real collection error
# itself).
if [ -n "$bytecode" ]; then
    wait "$bytecode" || echo "warning: warming the bytecode caches failed (see $LOGS/bytecode.log)" >&2
    tail -n 1 "$LOGS/bytecode.log"
fi
finish browser "$browser" || failed=1
echo "[set-up] done at $(( $(date +%s) - T0 )) s"
exit "$failed"
