"""docs/tutorial.md runs as written: its two Python programs and every command of its shell
blocks, on a pipeline of the test's own (topics, writer, projector, API) standing in for
`make up` and `.stack/env`."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from evidence_contract.note import format_vkey
from tests.fixtures.log import wait_until
from tools import docs_blocks as d

pytestmark = pytest.mark.integration

TUTORIAL = d.ROOT / "docs" / "tutorial.md"
STREAM = "tutorial:first-call"
SET_UP = ("make up", "source .stack/env")
"""What the pipeline stands in for."""


def run_program(source: str) -> str:
    """Run a Python block as ``python record.py`` would (its own globals); its output."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(source, str(TUTORIAL), "exec"), {"__name__": "__main__"})
    return out.getvalue()


def checkpoint_size(api, stream: str) -> int:
    r = api.get(f"/streams/{stream}/checkpoint")
    if r.status_code != 200:
        return 0
    return int(r.text.splitlines()[1])


def commands(text: str) -> list[tuple[str, int]]:
    """Each command line of a shell block with the exit status it says it has (``# exits N``;
    else 0)."""
    out = []
    for line in text.splitlines():
        command, _, comment = line.partition("#")
        if command.strip():
            m = re.search(r"exits (\d+)", comment)
            out.append((command.strip(), int(m.group(1)) if m else 0))
    return out


def test_the_tutorial_runs_as_written(make_pipeline, tmp_path, monkeypatch):
    p = make_pipeline()
    stream = f"tutorial:{uuid.uuid4().hex[:12]}"
    vkey = tmp_path / "log.vkey"
    vkey.write_text(format_vkey(p.log_key) + "\n", encoding="utf-8")
    env = {**p.env(), "EVIDENCE_LOG_VERIFIER_KEY_FILE": str(vkey),
           "EVIDENCE_SPOOL_DIR": str(tmp_path / "spool"),
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for name in [n for n in os.environ if n.startswith("EVIDENCE_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)

    blocks = list(d.blocks(TUTORIAL))
    record, replay = [b.text.replace(STREAM, stream) for b in blocks if b.lang == "python"]
    shell = [c for b in blocks if b.lang == "sh"
             for c in commands(b.text.replace(STREAM, stream)) if c[0] not in SET_UP]
    assert [c for c, _ in shell if c.startswith("evidence ")], "the tutorial runs no command"

    # 2. Record a call.
    assert "echo: What is evidence? ✓" in run_program(record)
    p.wait_records(stream, 1)
    wait_until(f"a signed checkpoint of {stream}", lambda: checkpoint_size(p.api, stream) >= 1,
               60, 0.2)

    # 3.-5. The shell steps, as written, in a shell with the stack's environment.
    for command, status in shell:
        done = subprocess.run(["bash", "-c", command], env=env, cwd=d.ROOT,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == status, (f"{command!r} exited {done.returncode}, the "
                                           f"tutorial says {status}:\n{done.stdout}\n{done.stderr}")
        if command.startswith("curl"):
            assert f'"stream":"{stream}"' in done.stdout.replace(" ", ""), done.stdout

    # 6. Replay from storage.
    out = run_program(replay)
    assert "echo: What is evidence? ✓" in out
    assert "never recorded: ReplayMiss" in out


def test_the_tutorial_commands_are_what_this_test_runs():
    """Each command of the tutorial is one this test knows how to run: the set-up it stands
    in for, curl, or evidence."""
    blocks = [b for b in d.blocks(TUTORIAL) if b.lang == "sh"]
    for command, _ in (c for b in blocks for c in commands(b.text)):
        assert command in SET_UP or shlex.split(command)[0] in ("curl", "evidence"), command
