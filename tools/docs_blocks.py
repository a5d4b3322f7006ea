"""What the README and docs/ show a reader, checked against the code.

Used by ``tests/unit/test_docs_blocks.py`` (and the tutorial's integration test). Every fenced
block carries a language, and each language has a check:

- ``sh``: every ``evidence`` command's subcommands and flags exist in the CLI's argument parser
  (``cli.main``), every ``make`` target in the Makefile, every ``python -m`` module and
  ``python FILE`` script in the checkout, every program in :data:`PROGRAMS`;
- ``python``: compiled; its imports resolve and the names it imports exist; calls of imported
  callables, and of methods of objects made from imported classes, bind to their signatures;
  a block that imports only the standard library and ``evidence_contract`` is also run;
- ``json`` and ``yaml`` parse; ``ini`` parses as a unit file;
- ``text`` is not code (diagrams, output, synopses), though an ``evidence`` line in it is
  checked like a command.

Inline code that starts with ``evidence `` is checked as a command too, dotted names of our
packages (``evidence_contract.chain.advance``) must resolve, and relative links must name a
file that exists and a heading it has.
"""

from __future__ import annotations

import argparse
import ast
import configparser
import contextlib
import importlib
import inspect
import io
import json
import re
import shlex
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator

__all__ = ["Block", "DOCS", "LANGS", "ROOT", "blocks", "check_block", "check_inline",
           "check_links", "evidence_problems"]

ROOT = Path(__file__).resolve().parents[1]
LANGS = frozenset({"sh", "python", "json", "yaml", "ini", "text"})
PACKAGES = ("evidence_contract", "evidence_client", "topics", "server", "writer", "projections",
            "fidelity", "audit", "witness", "publisher", "api", "cli", "devstack", "testing")
"""Our import names: a dotted name in inline code that starts with one must resolve."""

PROGRAMS = frozenset({
    "source", "export", "cd", "curl", "docker", "pip", "printf", "sha256sum", "openssl", "cat",
    "chmod", "systemctl", "journalctl", "set", "exec", "sh", "uvicorn", "gunicorn", "kubectl",
    "lint-imports",
})
"""Programs a shell block may run besides ``evidence``, ``make`` and ``python``."""


def docs() -> list[Path]:
    """The README and every document under docs/ (docs/witnessing.md included)."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


DOCS = docs()


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    lang: str
    text: str

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")


def blocks(path: Path) -> Iterator[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = m.groups()
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        i += 1
        yield Block(path, start, info.strip().split(" ")[0] if info.strip() else "", "\n".join(body))


# -- evidence commands ------------------------------------------------------------------------

@lru_cache(maxsize=1)
def evidence_parser() -> argparse.ArgumentParser:
    """The ``evidence`` parser as ``cli.main.main`` builds it."""
    from cli.main import _Parser, _commands

    parser = _Parser(prog="evidence")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name, (help_text, add_args, _run) in _commands().items():
        add_args(sub.add_parser(name, help=help_text))
    return parser


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


_FLAG = re.compile(r"(?<![\w$/.-])(--?[A-Za-z][\w-]*)")


def evidence_problems(command: str | list[str]) -> list[str]:
    """What is wrong with one ``evidence ...`` command line (or synopsis: ``[--flag X]``,
    ``a | b`` alternatives and placeholders are fine). A list is the command's words as the
    shell splits them: a quoted value (one word with spaces) holds no flags of ours."""
    words = (command.replace("\\|", "|").split() if isinstance(command, str)
             else [w for w in command if not re.search(r"\s", w)])
    if not words or words[0] != "evidence":
        return [f"not an evidence command: {command!r}"]
    parser, path = evidence_parser(), ["evidence"]
    rest = words[1:]
    # Subcommands: the leading bare words that name one (alternatives a|b each checked).
    while rest and _subparsers(parser):
        choices = _subparsers(parser)
        names = rest[0].strip("[]()").split("|")
        if rest[0] in ("...", "…") or rest[0].startswith("<"):
            return []  # a placeholder: `evidence <command> --help`
        if not all(n in choices for n in names if n):
            if rest[0].startswith("-"):
                break
            return [f"`{' '.join(path)}` has no subcommand {rest[0]!r} "
                    f"(it has: {', '.join(sorted(choices))})"]
        known_flags = [o for n in names if n for o in _flags(choices[n])]
        if len(names) > 1:  # a|b alternatives: check the flags against their union
            return [f"`{' '.join(path)} {rest[0]}`: no flag {f}" for f in _flags_in(rest[1:])
                    if f not in known_flags]
        parser = choices[names[0]]
        path.append(names[0])
        rest = rest[1:]
    flags = _flags(parser)
    return [f"`{' '.join(path)}` has no flag {f}" for f in _flags_in(rest) if f not in flags]


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return set(parser._option_string_actions)


def _flags_in(words: list[str]) -> list[str]:
    return [m.split("=")[0] for w in words for m in _FLAG.findall(w)]


# -- shell ------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return {m for line in text.splitlines()
            for m in re.findall(r"^([A-Za-z][\w-]*)\s*:(?!=)", line)}


def _commands(text: str) -> Iterator[str]:
    """The commands of a shell block: continuation lines joined, comments dropped, split on
    ``&&``, ``||``, ``;`` and ``|``."""
    joined = re.sub(r"\\\n", " ", text)
    for line in joined.splitlines():
        try:
            tokens = shlex.split(line, comments=True, posix=True)
        except ValueError:
            tokens = line.split("#")[0].split()
        current: list[str] = []
        for tok in tokens + [";"]:
            if tok in ("&&", "||", ";", "|"):
                if current:
                    yield shlex.join(current)
                current = []
            else:
                current.append(tok)


def check_shell(text: str) -> list[str]:
    problems = []
    for command in _commands(text):
        words = shlex.split(command)
        while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
            words = words[1:]  # VAR=value prefixes
        if not words or words[0].startswith("#!"):
            continue
        prog = words[0].rsplit("/", 1)[-1]
        if prog == "evidence":
            problems += evidence_problems(["evidence", *words[1:]])
        elif prog == "make":
            targets = [w for w in words[1:] if "=" not in w and not w.startswith("-")]
            problems += [f"no make target {t!r}" for t in targets if t not in make_targets()]
        elif re.fullmatch(r"python3?(\.\d+)?", prog):
            problems += _check_python_command(words[1:])
        elif prog == "pip" and words[1:2] == ["install"]:
            problems += [f"pip install {w}: no such path" for w in words[2:]
                         if w.startswith(".") and not (ROOT / re.sub(r"\[.*\]$", "", w)).exists()]
        elif prog not in PROGRAMS:
            problems.append(f"unknown program {prog!r} in {command!r} (add it to "
                            f"tools.docs_blocks.PROGRAMS if it is meant)")
    return problems


def _check_python_command(args: list[str]) -> list[str]:
    import importlib.util

    if args[:1] == ["-m"] and len(args) > 1:
        try:
            found = importlib.util.find_spec(args[1]) is not None
        except ModuleNotFoundError:
            found = False
        return [] if found else [f"python -m {args[1]}: no such module"]
    if args and args[0].endswith(".py"):
        return [] if (ROOT / args[0]).exists() or args[0] in ("record.py", "replay.py") \
            else [f"python {args[0]}: no such file"]
    return []


# -- python -----------------------------------------------------------------------------------

_MISSING = object()


def _import(module: str) -> Any:
    return importlib.import_module(module)


def check_python(text: str) -> list[str]:
    """Compile, resolve imports, and bind the calls it can follow to their signatures."""
    try:
        tree = ast.parse(text)
    except SyntaxError as e:
        return [f"does not compile: {e}"]
    names: dict[str, Any] = {}
    problems: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                try:
                    mod = _import(alias.name)
                except ImportError as e:
                    problems.append(f"import {alias.name}: {e}")
                    continue
                if alias.asname:
                    names[alias.asname] = mod
                else:
                    names[alias.name.split(".")[0]] = _import(alias.name.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.module:
            try:
                mod = _import(node.module)
            except ImportError as e:
                problems.append(f"from {node.module} import ...: {e}")
                continue
            for alias in node.names:
                obj = getattr(mod, alias.name, _MISSING)
                if obj is _MISSING:
                    try:
                        obj = _import(f"{node.module}.{alias.name}")
                    except ImportError:
                        problems.append(f"{node.module} has no {alias.name!r}")
                        continue
                names[alias.asname or alias.name] = obj
    instances: dict[str, type] = {}
    for node in ast.walk(tree):
        targets: list[tuple[ast.expr, ast.expr]] = []
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            targets.append((node.targets[0], node.value))
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            targets.append((node.optional_vars, node.context_expr))
        for target, value in targets:
            if isinstance(target, ast.Name) and isinstance(value, ast.Call):
                cls = _resolve(value.func, names, {})
                if inspect.isclass(cls):
                    instances[target.id] = cls
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            problems += _check_call(node, names, instances)
    return problems


def _resolve(func: ast.expr, names: dict[str, Any], instances: dict[str, type]) -> Any:
    """The object a call's function names, following imported names, attributes of imported
    modules and classes, and one method of an instance of an imported class; None when it
    cannot be followed (it is not ours to check)."""
    chain: list[str] = []
    while isinstance(func, ast.Attribute):
        chain.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return None
    chain.reverse()
    if func.id in names:
        obj = names[func.id]
        for attr in chain:
            if not (inspect.ismodule(obj) or inspect.isclass(obj)):
                return None
            nxt = getattr(obj, attr, _MISSING)
            if nxt is _MISSING:
                return _Missing(f"{func.id}.{'.'.join(chain)}")
            obj = nxt
        return obj
    if func.id in instances and len(chain) == 1:
        cls = instances[func.id]
        attr = inspect.getattr_static(cls, chain[0], _MISSING)
        if attr is _MISSING:
            return _Missing(f"{cls.__name__}.{chain[0]} (on {func.id})")
        return getattr(cls, chain[0]) if inspect.isfunction(attr) else None
    return None


@dataclass(frozen=True)
class _Missing:
    name: str


def _check_call(node: ast.Call, names: dict[str, Any], instances: dict[str, type]) -> list[str]:
    obj = _resolve(node.func, names, instances)
    if isinstance(obj, _Missing):
        return [f"{obj.name} does not exist"]
    if obj is None or not callable(obj):
        return []
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        return []
    if len(node.args) == 1 and isinstance(node.args[0], ast.Constant) and node.args[0].value is ...:
        return []  # f(...): "your arguments here"
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return []
    args = [None] * len(node.args)
    is_method = (isinstance(node.func, ast.Attribute) and isinstance(node.func.value, ast.Name)
                 and node.func.value.id in instances and inspect.isfunction(obj))
    if is_method:
        args = [None, *args]
    try:
        sig.bind(*args, **{k.arg: None for k in node.keywords})
    except TypeError as e:
        return [f"{ast.unparse(node.func)}(...) does not match {obj.__qualname__}{sig}: {e}"]
    return []


def runnable(text: str) -> bool:
    """A Python block that needs nothing but the standard library and the contract."""
    tree = ast.parse(text)
    roots = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import)
             for a in n.names}
    roots |= {n.module.split(".")[0] for n in ast.walk(tree)
              if isinstance(n, ast.ImportFrom) and n.module}
    return all(r == "evidence_contract" or r in sys.stdlib_module_names for r in roots)


def run_python(text: str) -> list[str]:
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            exec(compile(text, "<doc block>", "exec"), {"__name__": "__doc_block__"})
        except Exception as e:  # noqa: BLE001: any failure of a block is what we report
            return [f"raised {type(e).__name__}: {e}"]
    return []


# -- one block, inline code, links -------------------------------------------------------------

UNLABELLED_OK: frozenset[str] = frozenset()
"""Documents whose unlabelled blocks are taken as ``text`` (none: every block says its
language)."""


def check_block(block: Block) -> list[str]:
    if block.lang == "" and block.path.name in UNLABELLED_OK:
        block = Block(block.path, block.line, "text", block.text)
    if block.lang not in LANGS:
        return [f"a code block must say its language, one of {sorted(LANGS)} "
                f"(```text for what is not code); this one says {block.lang!r}"]
    if block.lang == "sh":
        return check_shell(block.text)
    if block.lang == "python":
        problems = check_python(block.text)
        if not problems and runnable(block.text):
            problems = run_python(block.text)
        return problems
    if block.lang == "json":
        try:
            json.loads(block.text)
        except ValueError as e:
            return [f"not JSON: {e}"]
        return []
    if block.lang == "yaml":
        import yaml

        try:
            yaml.safe_load(block.text)
        except yaml.YAMLError as e:
            return [f"not YAML: {e}"]
        return []
    if block.lang == "ini":
        try:
            configparser.ConfigParser(strict=False, interpolation=None).read_string(block.text)
        except configparser.Error as e:
            return [f"not an ini/unit file: {e}"]
        return []
    # text: only its evidence lines
    return [p for line in block.text.splitlines()
            if line.strip().startswith("evidence ")
            for p in evidence_problems(line.strip())]


_INLINE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")


def _prose(path: Path) -> str:
    """The document without its fenced blocks."""
    text = path.read_text(encoding="utf-8")
    out, fence = [], None
    for line in text.splitlines():
        m = _FENCE.match(line)
        if m and (fence is None or m.group(2).startswith(fence)):
            fence = None if fence else m.group(2)
            continue
        if fence is None:
            out.append(line)
    return "\n".join(out)


def check_inline(path: Path) -> list[str]:
    problems = []
    for code in _INLINE.findall(_prose(path)):
        code = code.replace("\\|", "|")
        if code.startswith("evidence ") and not code.startswith("evidence-"):
            problems += [f"`{code}`: {p}" for p in evidence_problems(code)]
        m = re.fullmatch(r"((?:%s)(?:\.[A-Za-z_][A-Za-z0-9_]*)+)(?:\(\))?" % "|".join(PACKAGES),
                         code)
        if m and not _resolves(m.group(1)):
            problems.append(f"`{code}` does not resolve to a module or a name in one")
    return problems


def _resolves(dotted: str) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr, _MISSING)
            if obj is _MISSING:
                return False
        return True
    return False


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    text = re.sub(r"[`*_]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {slug(line.lstrip("#")) for line in _prose(path).splitlines()
            if re.match(r"#{1,6} ", line)}


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def check_links(path: Path) -> list[str]:
    problems = []
    for target in _LINK.findall(_prose(path)):
        if re.match(r"[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            problems.append(f"link to {target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"link to {target}: {dest.name} has no heading #{anchor}")
    return problems
