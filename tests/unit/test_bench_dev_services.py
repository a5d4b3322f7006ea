"""The bench knows when the dev stack's own services run beside it, and its report says so:
idle, they still take the cores it measures."""

from __future__ import annotations

import os
import subprocess
import sys

from bench.report import machine_line
from devstack import StackConfig
from devstack.services import running

MACHINE = {"cpu": "AMD EPYC", "cores": 2, "memory_gib": 23.5, "os": "Linux 6", "python": "3.11",
           "loadavg": "0.10 0.20 0.30"}


def test_running_names_the_services_whose_supervisor_is_alive(tmp_path):
    cfg = StackConfig(root=tmp_path)
    cfg.services_dir.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (cfg.services_dir / "writer.pid").write_text(f"{os.getpid()}\n")
    (cfg.services_dir / "projector.pid").write_text(f"{dead.pid}\n")
    (cfg.services_dir / "writer-2.pid").write_text(f"{os.getpid()}\n")
    assert running(cfg) == ["writer", "writer-2"]


def test_no_services_directory_is_none_running(tmp_path):
    assert running(StackConfig(root=tmp_path)) == []


def test_the_report_says_when_the_services_ran_beside_the_bench():
    quiet = machine_line({**MACHINE, "dev_services": []})
    assert "Load average at start: 0.10 0.20 0.30." in quiet and "services" not in quiet
    busy = machine_line({**MACHINE, "dev_services": ["writer", "api"]})
    assert "dev stack's own services ran beside the bench** (writer, api)" in busy
    assert "services" not in machine_line(MACHINE), "reports from before the field"
