"""What one Python module's source says about ``EVIDENCE_*`` variables: every string literal
that is exactly a variable's name (docstrings, messages and f-strings that merely mention a
name do not count), where it is, and the default the code states for it.

The default is found where the code states it: the argument after the name
(``env.get(NAME, "6")``, ``_int(env, NAME, 1 << 20)``), the right-hand side of an ``or``
(``env.get(NAME) or "evidence"``), or, for a table ``{"field": (NAME, conv)}``, the default of
that field in a class of the same module. Names are resolved through module constants and
one level of ``from x import NAME``. A default the code does not state as a value is shown as
the expression it is. Fields of a pydantic settings class with an ``EVIDENCE_`` ``env_prefix``
are variables too (prefix + field name). ``tools.config_reference`` runs this over the tree.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Iterator

__all__ = ["NAME_RE", "Read", "module_constants", "scan_source"]

NAME_RE = re.compile(r"EVIDENCE_[A-Z0-9_]*[A-Z0-9]")
"""A variable's name; a literal ending in ``_`` is a prefix, never a name."""


@dataclass(frozen=True)
class Read:
    """One place the code spells a variable: its module, line and the default it states."""

    module: str
    line: int
    default: str | None


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
            # An attribute docstring: a string statement right after an assignment.
            for prev, stmt in zip(body, body[1:]):
                if (isinstance(prev, (ast.Assign, ast.AnnAssign)) and isinstance(stmt, ast.Expr)
                        and isinstance(stmt.value, ast.Constant)):
                    ids.add(id(stmt.value))
    return ids


_SAFE_FUNCS = {"int": int, "float": float, "str": str}


def _value(node: ast.AST, consts: dict[str, object]) -> object:
    """The value of a constant expression (literals, arithmetic, int/float/str of those, and
    names bound to such); ``ValueError`` for anything else."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name) and node.id in consts:
        return consts[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, consts)  # type: ignore[operator]
    if isinstance(node, ast.BinOp):
        left, right = _value(node.left, consts), _value(node.right, consts)
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
               ast.Mult: lambda a, b: a * b, ast.LShift: lambda a, b: a << b,
               ast.FloorDiv: lambda a, b: a // b, ast.Div: lambda a, b: a / b}
        op = ops.get(type(node.op))
        if op is not None:
            return op(left, right)
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in _SAFE_FUNCS and len(node.args) == 1 and not node.keywords):
        return _SAFE_FUNCS[node.func.id](_value(node.args[0], consts))
    raise ValueError(ast.dump(node))


def _render(node: ast.AST, consts: dict[str, object]) -> str | None:
    """A default as the reference shows it; None for "no default" (``None``, ``""``, or a
    plain name that is no constant: a value passed on, not a default)."""
    try:
        value = _value(node, consts)
    except (ValueError, TypeError, ArithmeticError):
        if isinstance(node, ast.Name):
            return None
        if isinstance(node, ast.Lambda):  # default_factory=lambda: ...
            return ast.unparse(node.body)
        return ast.unparse(node)
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def module_constants(tree: ast.Module, resolve_import) -> dict[str, object]:
    consts: dict[str, object] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0:
            for alias in stmt.names:
                value = resolve_import(stmt.module, alias.name)
                if value is not None:
                    consts[alias.asname or alias.name] = value
    for stmt in tree.body:
        targets: list[ast.expr] = []
        if isinstance(stmt, ast.Assign):
            targets, value_node = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value_node = [stmt.target], stmt.value
        for target in targets:
            if isinstance(target, ast.Name):
                try:
                    consts[target.id] = _value(value_node, consts)
                except (ValueError, TypeError, ArithmeticError):
                    pass
    return consts


def _class_fields(tree: ast.Module) -> dict[str, ast.expr]:
    """Every class attribute with a value, by name (``field: int = 5``), across the module."""
    out: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for stmt in node.body:
                if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                        and stmt.value is not None):
                    out.setdefault(stmt.target.id, stmt.value)
    return out


def _field_default(node: ast.expr, consts: dict[str, object]) -> str | None:
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id in ("field", "Field")):
        for kw in node.keywords:
            if kw.arg == "default":
                return _render(kw.value, consts)
            if kw.arg == "default_factory":
                return (ast.unparse(kw.value.body) if isinstance(kw.value, ast.Lambda)
                        else ast.unparse(kw.value) + "()")
        if node.args:
            return _render(node.args[0], consts)
        return None
    return _render(node, consts)


def _default(name: str, node: ast.expr, parents: dict[int, ast.AST],
             fields: dict[str, ast.expr], consts: dict[str, object]) -> str | None:
    parent = parents.get(id(node))
    if isinstance(parent, ast.Call) and node in parent.args:
        i = parent.args.index(node)
        after = parent.args[i + 1] if i + 1 < len(parent.args) else None
        if after is None:
            after = next((kw.value for kw in parent.keywords if kw.arg == "default"), None)
        stated = _render(after, consts) if after is not None else None
        if stated is not None:
            return stated
        # env.get(NAME) or "default" / env.get(NAME, "") or "default"
        outer = parents.get(id(parent))
        if isinstance(outer, ast.BoolOp) and isinstance(outer.op, ast.Or):
            for fallback in outer.values[outer.values.index(parent) + 1:]:
                names = _names_in(fallback)
                if name in names:  # another source of the same variable (a saved copy)
                    continue
                return "$" + names[0] if names else _render(fallback, consts)
        return None
    # {"field": (NAME, conv)}: the default of that field of a class in this module
    if isinstance(parent, ast.Tuple) and parent.elts and parent.elts[0] is node:
        table = parents.get(id(parent))
        if isinstance(table, ast.Dict):
            key = table.keys[table.values.index(parent)]
            if isinstance(key, ast.Constant) and isinstance(key.value, str) \
                    and key.value in fields:
                return _field_default(fields[key.value], consts)
    return None


def _names_in(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and NAME_RE.fullmatch(n.value)]


def _settings_fields(tree: ast.Module, consts: dict[str, object]) -> Iterator[tuple[str, int, str | None]]:
    """Fields of pydantic settings classes whose ``env_prefix`` is an ``EVIDENCE_`` prefix."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        prefix = None
        for sub in ast.walk(node):
            if isinstance(sub, ast.keyword) and sub.arg == "env_prefix":
                prefix = sub.value
            elif (isinstance(sub, ast.Assign) and len(sub.targets) == 1
                  and isinstance(sub.targets[0], ast.Name) and sub.targets[0].id == "env_prefix"):
                prefix = sub.value
        if not (isinstance(prefix, ast.Constant) and isinstance(prefix.value, str)
                and prefix.value.startswith("EVIDENCE_")):
            continue
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) \
                    and stmt.target.id != "model_config":
                default = _field_default(stmt.value, consts) if stmt.value is not None else None
                yield prefix.value + stmt.target.id.upper(), stmt.lineno, default


def scan_source(source: str, module: str, resolve_import=lambda module, name: None
                ) -> list[tuple[str, Read]]:
    """Every (variable, read) in one module's source."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    consts = module_constants(tree, resolve_import)
    fields = _class_fields(tree)
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                and id(node) not in skip and NAME_RE.fullmatch(node.value)
                and not isinstance(parents.get(id(node)), ast.JoinedStr)):
            found.append((node.value, Read(module, node.lineno,
                                           _default(node.value, node, parents, fields, consts))))
        # ENV = "EVIDENCE_X" ... env.get(ENV, "auto"): a constant that names a variable
        elif (isinstance(node, ast.Name) and isinstance(consts.get(node.id), str)
              and NAME_RE.fullmatch(str(consts[node.id]))
              and isinstance(parents.get(id(node)), ast.Call)):
            name = str(consts[node.id])
            found.append((name, Read(module, node.lineno,
                                     _default(name, node, parents, fields, consts))))
    for name, line, default in _settings_fields(tree, consts):
        found.append((name, Read(module, line, default)))
    return found
