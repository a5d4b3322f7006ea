"""native/toolchain.sh: which cargo builds the compiled paths (a recent enough one, found on
PATH or where rustup or Debian put it), and that the parallel suite's helpers in
tests/conftest.py keep workers apart."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests import conftest

ROOT = Path(__file__).resolve().parents[2]


def _fake_cargo(bindir: Path, version: str) -> Path:
    bindir.mkdir(parents=True)
    cargo = bindir / "cargo"
    cargo.write_text(f'#!/bin/sh\necho "cargo {version} (fake)"\n')
    cargo.chmod(0o755)
    return cargo


def _find_cargo(path: str, home: Path) -> subprocess.CompletedProcess:
    """find_cargo's choice, then its ``--version`` in the environment find_cargo exported."""
    script = (f". {ROOT / 'native' / 'toolchain.sh'}; c=$(find_cargo) || exit 1; "
              'find_cargo >/dev/null; echo "$c"; "$c" --version')
    return subprocess.run(["sh", "-c", script], env={"PATH": path, "HOME": str(home)},
                          capture_output=True, text=True)


def test_a_recent_cargo_on_path_is_taken(tmp_path):
    cargo = _fake_cargo(tmp_path / "bin", "1.80.0")
    found = _find_cargo(f"{cargo.parent}:/usr/bin:/bin", tmp_path / "home")
    assert found.returncode == 0 and found.stdout.split("\n")[0] == str(cargo), found


@pytest.mark.parametrize("version", ["1.63.0", "1.77.2", "0.66.0", "nonsense"])
def test_a_cargo_too_old_to_read_the_lock_files_is_passed_over(tmp_path, version):
    cargo = _fake_cargo(tmp_path / "bin", version)
    found = _find_cargo(f"{cargo.parent}:/usr/bin:/bin", tmp_path / "home")
    # Another cargo of this machine (rustup's, Debian's), or none at all: never the old one.
    if found.returncode == 0:
        chosen, version = found.stdout.split("\n")[:2]
        assert chosen != str(cargo) and int(version.split()[1].split(".")[1]) >= 78, found
    else:
        assert found.stdout == "", found


def test_each_parallel_worker_draws_ports_from_its_own_share():
    ports = range(20000, 20100)
    shares = [{conftest._WorkerShare(i, 3).choice(ports) for _ in range(200)} for i in range(3)]
    for i, share in enumerate(shares):
        assert share and all((p - 20000) % 3 == i for p in share)
    assert conftest._WorkerShare(1, 3).choice(["a"]) == "a"  # not a range: as random does


def test_random_parts_are_left_out_of_test_ids():
    make_id = conftest.pytest_make_parametrize_id
    assert make_id(None, "/events/0190b6d2-7c3e-7a51-9f00-1234567890ab", "path") == \
        "/events/UUID"
    assert make_id(None, "witness.example/ed+515094e0+BOtXVeLQqo1aiU7wUedaXxhO4syrXYiOK0IhuJ"
                         "QoDcQ+ http://w", "line") == "witness.example/ed+KEY http://w"
    assert make_id(None, "plain", "x") is None and make_id(None, 3, "x") is None


def _fake_venv(root: Path, build_rc: int) -> Path:
    """A virtualenv's bin/ whose python and uv only log how they were called: uv's ``build``
    leaves a wheel in its --out-dir (or fails with ``build_rc``)."""
    bindir = root / "venv" / "bin"
    bindir.mkdir(parents=True)
    log = root / "calls"
    (bindir / "python").write_text(f'#!/bin/sh\necho "python $*" >> {log}\n')
    (bindir / "uv").write_text(
        f'#!/bin/sh\necho "uv $*" >> {log}\n'
        'if [ "$1" = build ]; then\n'
        f'  [ {build_rc} = 0 ] || exit {build_rc}\n'
        '  while [ "$1" != --out-dir ]; do shift; done\n'
        '  touch "$2/crate-0.1.0-cp311-cp311-linux_x86_64.whl"\n'
        'fi\n')
    for exe in ("python", "uv"):
        (bindir / exe).chmod(0o755)
    return bindir / "python"


def _build_native(tmp_path: Path, build_rc: int) -> tuple[subprocess.CompletedProcess, list]:
    python = _fake_venv(tmp_path, build_rc)
    cargo = _fake_cargo(tmp_path / "cargo-bin", "1.80.0")
    script = (f". {ROOT / 'native' / 'toolchain.sh'}; "
              f"build_native {python} {tmp_path / 'crate'} crate_native 'the user' 'falls back.'")
    done = subprocess.run(["sh", "-eu", "-c", script], capture_output=True, text=True,
                          env={"PATH": f"{cargo.parent}:/usr/bin:/bin",
                               "HOME": str(tmp_path / "home")})
    calls = tmp_path / "calls"
    return done, calls.read_text().splitlines() if calls.exists() else []


def test_a_crate_is_built_apart_from_the_virtualenv_then_installed_into_it(tmp_path):
    # `make test` installs the Python packages into the virtualenv while the crates build: a
    # build must not start the virtualenv's interpreter on its half-written site-packages (pip's
    # isolated build did, and failed), and the install goes through uv, which takes the
    # virtualenv's lock and so waits for the other install.
    done, calls = _build_native(tmp_path, 0)
    assert done.returncode == 0, done
    assert [c.split()[:2] for c in calls] == [["uv", "build"], ["uv", "pip"], ["python", "-c"]]
    build, install, check = calls
    assert f"--python {tmp_path / 'venv' / 'bin' / 'python'}" in build
    assert build.endswith(str(tmp_path / "crate"))
    assert "--no-deps" in install and "--reinstall" in install
    assert install.endswith("crate-0.1.0-cp311-cp311-linux_x86_64.whl")
    assert check == "python -c import crate_native"
    assert not any("-m pip" in c for c in calls)


def test_a_crate_that_fails_to_build_is_not_installed_and_fails_the_step(tmp_path):
    done, calls = _build_native(tmp_path, 3)
    assert done.returncode == 3, done
    assert [c.split()[:2] for c in calls] == [["uv", "build"]]
