"""The CLI installed from a wheel, without a checkout: devstack/ and testing/ ship in no
wheel, so the commands that need them say so, and the others do not need them.

A checkout is simulated away by making ``devstack`` and ``testing`` unimportable (a ``None``
in ``sys.modules`` makes an import of that name raise ImportError)."""

from __future__ import annotations

import os
import sys

import pytest

from cli.main import main

CHECKOUT_ONLY = ("devstack", "devstack.config", "devstack.stack", "testing",
                 "testing.fake_provider")


@pytest.fixture
def no_checkout(monkeypatch):
    for name in CHECKOUT_ONLY:
        monkeypatch.setitem(sys.modules, name, None)
    for name in [k for k in os.environ if k.startswith("EVIDENCE_")]:
        monkeypatch.delenv(name)


@pytest.mark.parametrize("argv", [["dev", "up"], ["dev", "status"], ["dev", "down"]])
def test_dev_says_the_local_stack_runs_from_a_checkout(no_checkout, capsys, argv):
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("evidence dev: the local stack runs from a checkout of evidence-store")
    assert "`make up`" in err


def test_demo_says_it_runs_from_a_checkout(no_checkout, capsys):
    assert main(["demo"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("evidence demo: the demo runs from a checkout of evidence-store: its "
                          "fake provider (testing/) is in no installed package"), err
    assert "`.venv/bin/evidence demo`" in err


def test_audit_runs_without_the_local_stack(no_checkout, capsys):
    # Without .stack/env the flags and variables are all there is: none given, it says which.
    assert main(["audit"]) != 0
    assert "evidence audit: no Kafka to read: pass --bootstrap" in capsys.readouterr().err
