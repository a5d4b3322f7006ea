# The two commands of the README: `make up` and `make test`. Both install what they need.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
VENVSTAMP   := $(VENV)/.made
PYSTAMP     := $(VENV)/.python-installed
NATIVESTAMP := $(VENV)/.native-installed

.PHONY: up down test unit status bench chaos lock

# $(STAMP): everything installed. The virtualenv with a current pip first; then the Python
# packages and the native crates, which need nothing of each other (uv mostly waits on the
# network, cargo on one core), so tools/test_setup.sh makes the two side by side.
$(STAMP): $(PYSTAMP) $(NATIVESTAMP)
	@touch $@
$(VENVSTAMP):
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -c constraints.txt uv
	@touch $@
# The packages with uv (its pinned version in constraints.txt, installed by pip above): the same
# resolution under the same constraints as pip's, its downloads side by side and its bytecode
# compiled on both cores (a fresh clone's install: 16 s instead of pip's 41 s). uv reads none
# of pip's settings, so the wheel directory pip is pointed to is handed on. Should uv fail,
# pip installs the same.
UV_PIP = UV_FIND_LINKS="$${UV_FIND_LINKS:-$${PIP_FIND_LINKS:-}}" $(VENV)/bin/uv pip install -q \
	--python $(PY) --compile-bytecode -c constraints.txt
$(PYSTAMP): $(VENVSTAMP) pyproject.toml packaging/contract/pyproject.toml packaging/client/pyproject.toml constraints.txt
	$(UV_PIP) -e 'packaging/contract[tlog]' -e packaging/client \
	  || $(PY) -m pip install -q -c constraints.txt -e 'packaging/contract[tlog]' -e packaging/client
	$(UV_PIP) -C editable_mode=compat -e '.[test,bench]' \
	  || $(PY) -m pip install -q -c constraints.txt --config-settings editable_mode=compat -e '.[test,bench]'
	@touch $@
$(NATIVESTAMP): $(VENVSTAMP)
	@# The two crates build side by side (each cargo build is mostly one long serial compile):
	@# both logs go to the terminal, and either failing fails the rule.
	sh native/seal/build.sh $(PY) & seal=$$!; sh native/rows/build.sh $(PY); rows=$$?; \
	  wait $$seal && test $$rows = 0
	@touch $@
# The writer's compiled seal path (native/seal/build.sh; native/toolchain.sh installs Debian's
# Rust where there is none; EVIDENCE_NATIVE=0 builds neither crate, the pure Python paths).
$(NATIVESTAMP): $(wildcard native/seal/Cargo.* native/seal/pyproject.toml native/seal/build.sh native/seal/src/*.rs)
# The projector's compiled row path (native/rows/build.sh).
$(NATIVESTAMP): $(wildcard native/rows/Cargo.* native/rows/pyproject.toml native/rows/build.sh native/rows/src/*.rs)
# How both find cargo and build (native/toolchain.sh, sourced by each build.sh).
$(NATIVESTAMP): native/toolchain.sh

## up: the whole stack on 127.0.0.1 (Kafka, PostgreSQL, topics, services), then the demo
## (`evidence demo`: record, seal, verify and replay a few calls; NO_DEMO=1 skips it);
## WRITERS=n PROJECTORS=n run n of each, splitting the partitions (default 1 each);
## BROKERS=3 runs Kafka as a cluster of three KRaft nodes (replication factor 3,
## min.insync.replicas 2; default: the count the stack was made with, else 1)
up: $(STAMP)
	EVIDENCE_WRITERS=$(or $(WRITERS),1) EVIDENCE_PROJECTORS=$(or $(PROJECTORS),1) \
	$(if $(BROKERS),EVIDENCE_BROKERS=$(BROKERS)) $(PY) -m devstack up
	@if [ -z "$(NO_DEMO)" ]; then $(PY) -m cli.main demo; fi

## down: stop what `make up` started; CLEAN=1 also deletes .stack/
down:
	@if [ -x $(PY) ]; then $(PY) -m devstack down $(if $(CLEAN),--clean); \
	 else echo "nothing to stop: $(VENV) does not exist"; fi

## test: the layer contract (.importlinter), the same set-up, then the whole suite against
##       that real Kafka and PostgreSQL, on TEST_WORKERS parallel pytest-xdist workers
##       (default 4: a test mostly waits on Kafka and PostgreSQL, so 2 cores keep 4 busy;
##       TEST_WORKERS=0 runs it in one process; an idle worker takes tests from a busy one's
##       queue, so a few long tests do not end the run alone; the 25 longest are listed);
##       tools/test_setup.sh first installs and starts what the suite needs, side by side
##       where no step needs another's result (the browser of tests/browser among them)
test:
	PY=$(PY) VENVSTAMP=$(VENVSTAMP) PYSTAMP=$(PYSTAMP) NATIVESTAMP=$(NATIVESTAMP) \
	  STAMP=$(STAMP) MAKE="$(MAKE)" sh tools/test_setup.sh
	$(PY) -m pytest -n $(or $(TEST_WORKERS),4) --dist worksteal --durations=25 $(PYTEST_ARGS)

## unit: the pure tests only, no services
unit: $(STAMP)
	$(PY) -m pytest tests/unit $(PYTEST_ARGS)

## bench: the benchmarks on the local stack (QUICK=1: the same, under 3 minutes; BENCH_ARGS=...)
##        writes bench/results/<date>.{json,md,png}; the stack comes up without its own
##        services (idle, they would still take the cores the bench measures)
bench: $(STAMP)
	$(PY) -m devstack up --no-services
	$(PY) -m bench $(if $(QUICK),--quick) $(BENCH_ARGS)

## chaos: load through the real gateway while writer, projector, broker and load processes
##        are killed, PostgreSQL crashes, a spool disk fills and a clock is skewed, on an
##        isolated stack of its own; then every capture is checked (SHORT=1: 45 s; DURATION=s;
##        BROKERS=3: on a cluster of three, killing, stalling and restarting one broker at a
##        time, the transaction coordinator's among them)
chaos: $(STAMP)
	$(PY) -m chaos $(if $(SHORT),--short) $(if $(DURATION),--duration $(DURATION)) \
	$(if $(BROKERS),--brokers $(BROKERS)) $(CHAOS_ARGS)

## status: what runs, where (each broker of a cluster)
status: $(STAMP)
	$(if $(BROKERS),EVIDENCE_BROKERS=$(BROKERS)) $(PY) -m devstack status

## lock: refresh constraints.txt from what is installed (but this project's own packages: the
##       editable ones and the native crates, built from this tree)
lock: $(STAMP)
	$(PY) -m pip freeze --exclude-editable | grep -v -e '^-e' -e '^evidence-' > constraints.txt
