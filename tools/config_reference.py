"""The configuration reference, ``docs/configuration.md``, generated from the code.

    python -m tools.config_reference            # rewrite docs/configuration.md
    python -m tools.config_reference --check    # exit 1 when it is stale or incomplete

What the code reads is found in the code, not in a list someone keeps: every string literal
that is exactly an ``EVIDENCE_*`` name, in every Python module outside the tests, the
benchmarks and build output (docstrings and messages that merely mention a name do not
count). That holds whatever shape the reading takes (``os.environ.get``, a settings object,
a table of names): a name the code spells is a name it reads or sets. Fields of a pydantic
settings class with an ``env_prefix`` are variables too (prefix + field name).

The default is found where the code states it (``tools.config_scan`` says how, and reads
one module's source; this module walks the tree and writes the document).

What each variable is for comes from ``docs/configuration.toml``, the one hand-kept part: one
table per variable with ``description``, optionally ``default`` (only where the code states
none) and ``set = true`` for a variable evidence sets for a process it starts rather than
reads. The check fails when a variable the code reads has no description, when a description
names a variable the code no longer reads, when a hand-kept default contradicts the code, and
when the checked-in file differs from what this module generates.
"""

from __future__ import annotations

import argparse
import ast
import functools
import os
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from tools.config_scan import NAME_RE, Read, module_constants, scan_source

__all__ = ["NAME_RE", "Read", "ReferenceError", "Variable", "check", "generate", "scan",
           "scan_source", "variables"]

ROOT = Path(__file__).resolve().parents[1]
DESCRIPTIONS = ROOT / "docs" / "configuration.toml"
OUTPUT = ROOT / "docs" / "configuration.md"

SKIP_DIRS = frozenset({".git", ".venv", ".stack", "bench", "build", "tests", "tools",
                       "node_modules", "target", "__pycache__", "packaging"})
"""Not the code that runs: tests, benchmarks, this generator, build output (``packaging/``
holds only pyprojects and their build output; the import-name mapping is read from there)."""

COMPONENTS = {
    "api": "API", "audit": "audit", "chaos": "chaos", "cli": "CLI", "devstack": "make up",
    "evidence_client": "client", "evidence_contract": "contract", "fidelity": "fidelity",
    "projections": "projector", "publisher": "publisher", "server": "services", "testing":
    "fake provider", "topics": "topics", "witness": "witness", "writer": "writer",
}
"""What a reader calls the component a top-level package is (``server``: what every service
shares); a package not listed is shown by its import name."""


class ReferenceError(Exception):
    """The reference cannot be generated, or what is checked in is not what the code says."""


@dataclass
class Variable:
    name: str
    reads: list[Read] = field(default_factory=list)

    @property
    def modules(self) -> list[str]:
        return sorted({r.module for r in self.reads})

    @property
    def defaults(self) -> dict[str, list[str]]:
        """Each stated default and the modules that state it."""
        out: dict[str, set[str]] = {}
        for r in self.reads:
            if r.default is not None:
                out.setdefault(r.default, set()).add(r.module)
        return {d: sorted(m) for d, m in sorted(out.items())}


# -- where the modules are, and what they are imported as ------------------------------------

def import_names(root: Path = ROOT) -> dict[Path, str]:
    """The import names of the folders the distributions under ``packaging/`` are built
    from (their ``package-dir``), for a folder whose import name differs from its path."""
    out: dict[Path, str] = {}
    for pyproject in sorted(root.glob("packaging/*/pyproject.toml")):
        data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
        package_dir = data.get("tool", {}).get("setuptools", {}).get("package-dir", {})
        for name, rel in package_dir.items():
            if name:
                out[(pyproject.parent / rel).resolve()] = name
    return out


def python_files(root: Path = ROOT) -> Iterator[Path]:
    """Every source file outside SKIP_DIRS. The skipped folders are never entered: ``.stack/``
    holds a running broker's data, whose files come and go while a walk would list them."""
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        found.extend(Path(folder, f) for f in files if f.endswith(".py"))
    yield from sorted(found)


def module_name(path: Path, root: Path, renamed: dict[Path, str]) -> str:
    resolved = path.resolve()
    for folder, name in renamed.items():
        if resolved.is_relative_to(folder):
            rest = resolved.relative_to(folder).with_suffix("").parts
            return ".".join((name, *rest)).removesuffix(".__init__")
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


# -- the scan ----------------------------------------------------------------------------------

def scan(root: Path = ROOT) -> dict[str, Variable]:
    """Every variable the code under ``root`` reads, with where and its defaults (a fresh
    dict of what :func:`_scan` found, which reads each file once per process)."""
    return {name: Variable(name, list(var.reads)) for name, var in _scan(root).items()}


@functools.lru_cache(maxsize=4)
def _scan(root: Path) -> dict[str, Variable]:
    renamed = import_names(root)
    files = {module_name(p, root, renamed): p for p in python_files(root)}
    cache: dict[str, dict[str, object]] = {}

    def constants_of(module: str) -> dict[str, object]:
        if module not in cache:
            cache[module] = {}
            path = files.get(module)
            if path is not None:
                cache[module] = module_constants(ast.parse(path.read_text(encoding="utf-8")),
                                                  lambda m, n: None)
        return cache[module]

    out: dict[str, Variable] = {}
    for module, path in sorted(files.items()):
        try:
            reads = scan_source(path.read_text(encoding="utf-8"), module,
                                lambda m, n: constants_of(m).get(n))
        except SyntaxError as e:
            raise ReferenceError(f"{path}: {e}") from e
        for name, read in reads:
            out.setdefault(name, Variable(name)).reads.append(read)
    return dict(sorted(out.items()))


# -- the descriptions and the document -------------------------------------------------------

def load_descriptions(path: Path = DESCRIPTIONS) -> dict[str, dict[str, object]]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ReferenceError(f"{path}: {e}") from e
    for name, entry in data.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("description"), str):
            raise ReferenceError(f"{path}: [{name}] needs a description = \"...\"")
        unknown = set(entry) - {"description", "default", "set"}
        if unknown:
            raise ReferenceError(f"{path}: [{name}] has unknown keys {sorted(unknown)}")
    return data


def problems(found: dict[str, Variable], described: dict[str, dict[str, object]]) -> list[str]:
    """What makes the reference wrong: a variable without a description, a description of
    nothing, a hand-kept default where the code states one."""
    out = [f"{name} is read by {', '.join(found[name].modules)} but has no description in "
           f"{DESCRIPTIONS.relative_to(ROOT)}" for name in found if name not in described]
    out += [f"{name} is described in {DESCRIPTIONS.relative_to(ROOT)} but nothing reads it: "
            f"remove it" for name in described if name not in found]
    for name, entry in described.items():
        if name in found and "default" in entry and found[name].defaults:
            out.append(f"{name}: the code states its default ({', '.join(found[name].defaults)}); "
                       f"remove default = {entry['default']!r} from "
                       f"{DESCRIPTIONS.relative_to(ROOT)}")
    return out


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _default_cell(var: Variable, entry: dict[str, object]) -> str:
    """The code's defaults; the modules that state one are named unless every reader does.
    What ``make up`` (devstack) writes to ``.stack/env`` is its value, not a default, and is
    shown as such."""
    stated = {d: [m for m in mods if not m.startswith("devstack.")]
              for d, mods in var.defaults.items()}
    stated = {d: mods for d, mods in stated.items() if mods}
    made = [d for d, mods in var.defaults.items()
            if any(m.startswith("devstack.") for m in mods) and d not in stated]
    readers = [m for m in var.modules if not m.startswith("devstack.")]
    parts = []
    for d, mods in stated.items():
        where = "" if mods == readers else " (" + ", ".join(f"`{m}`" for m in mods) + ")"
        parts.append(f"`{_cell(d)}`{where}")
    if not parts and "default" in entry:
        parts.append(_cell(str(entry["default"])))
    parts += [f"`make up`: `{_cell(d)}`" for d in made]
    return "; ".join(parts)


def _components(var: Variable) -> str:
    tops = sorted({COMPONENTS.get(m.split(".")[0], m.split(".")[0]) for m in var.modules})
    return ", ".join(tops)


HEADER = """\
# Configuration reference

<!-- Generated by `python -m tools.config_reference` from the code and
     docs/configuration.toml; edit those, not this file. `make test` fails when it is stale. -->

Every `EVIDENCE_*` variable the code reads, its default and what reads it. `make up` writes
the ones a shell needs to `.stack/env` (`source .stack/env`); a service's flags, where it has
them, win over its variables (`evidence <command> --help`). An empty value counts as unset
unless the description says otherwise.

A default in backticks is the code's own; where the code computes it, the expression is shown
as written (`default_workers()`), and `$EVIDENCE_X` means "else the value of that variable".
Where the modules that read a variable state different defaults, each is named.

"""


def generate(found: dict[str, Variable] | None = None,
             described: dict[str, dict[str, object]] | None = None) -> str:
    """The reference as it should be checked in; ``ReferenceError`` listing every problem."""
    found = scan() if found is None else found
    described = load_descriptions() if described is None else described
    wrong = problems(found, described)
    if wrong:
        raise ReferenceError("\n".join(wrong))
    lines = [HEADER]
    sections = (("Variables the code reads", False),
                ("Variables evidence sets for the processes it starts",  True))
    for title, is_set in sections:
        names = [n for n in found if bool(described[n].get("set", False)) is is_set]
        if not names:
            continue
        lines.append(f"## {title}\n\n")
        if is_set:
            lines.append("Read by what those processes run (a command you give), not by "
                         "evidence itself.\n\n")
        lines.append("| variable | default | used by | what |\n|---|---|---|---|\n")
        for name in names:
            var, entry = found[name], described[name]
            modules = ", ".join(f"`{m}`" for m in var.modules)
            lines.append(f"| `{name}` | {_default_cell(var, entry)} | {_components(var)}: "
                         f"{modules} | {_cell(str(entry['description']))} |\n")
        lines.append("\n")
    return "".join(lines).rstrip("\n") + "\n"


def check(path: Path = OUTPUT) -> list[str]:
    """Problems with the checked-in reference (empty when it is current and complete)."""
    try:
        expected = generate()
    except ReferenceError as e:
        return str(e).splitlines()
    if not path.exists() or path.read_text(encoding="utf-8") != expected:
        return [f"{path.relative_to(ROOT)} is stale: run `python -m tools.config_reference`"]
    return []


def variables() -> Iterable[str]:
    """The names of every variable the code reads."""
    return scan().keys()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.config_reference",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true",
                   help="change nothing; exit 1 when the checked-in reference is wrong")
    args = p.parse_args(argv)
    if args.check:
        wrong = check()
        for line in wrong:
            print(line, file=sys.stderr)
        return 1 if wrong else 0
    try:
        text = generate()
    except ReferenceError as e:
        print(e, file=sys.stderr)
        return 1
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
