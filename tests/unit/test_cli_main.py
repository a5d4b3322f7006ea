"""``evidence``'s entry point: a command line that names its subcommand imports that one alone,
and anything else builds every subcommand so that the usage and errors list them all."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OTHERS = ("writer.cli", "api.cli", "otlp.cli", "fidelity.cli", "projections.cli", "cli.audit")


def _imported(argv: list[str]) -> tuple[set[str], str]:
    """The subcommand modules ``main(argv)`` imported, in a process of its own, and stderr."""
    code = (f"import sys\nfrom cli.main import main\ntry:\n    main({argv!r})\n"
            f"except SystemExit:\n    pass\n"
            f"print('imported:', *(m for m in {OTHERS!r} + ('cli.records',) if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60)
    last = out.stdout.splitlines()[-1]
    assert last.startswith("imported:"), out.stdout[-2000:] + out.stderr[-2000:]
    return set(last.split()[1:]), out.stderr


def test_a_named_subcommand_imports_that_one_alone():
    imported, _ = _imported(["list", "--help"])
    assert imported == {"cli.records"}


@pytest.mark.parametrize("argv", [[], ["--help"], ["no-such-command"]])
def test_no_subcommand_or_an_unknown_one_lists_every_subcommand(argv):
    imported, err = _imported(argv)
    assert imported >= set(OTHERS)
    if argv == ["no-such-command"]:
        assert "invalid choice: 'no-such-command'" in err and "'list'" in err and "'otlp'" in err
