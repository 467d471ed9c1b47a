"""Constraints: a simple expression over params, or a Python callable ``module:function``.

Expressions are parsed with :mod:`ast` and evaluated by a small interpreter (never ``eval``):
names of params, numbers, strings, arithmetic, comparisons, ``and``/``or``/``not``, ``in``,
and the functions ``abs``, ``min``, ``max``, ``round``, ``int``, ``float``, ``log2``.
"""

from __future__ import annotations

import ast
import importlib
import math
import operator
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dse._errors import ConfigError, ConstraintError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

_BINOPS: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_CMPOPS: dict[type[ast.cmpop], Callable[[Any, Any], Any]] = {
    ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
    ast.Gt: operator.gt, ast.GtE: operator.ge,
    ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b,
}
_FUNCS: dict[str, Callable[..., Any]] = {
    "abs": abs, "min": min, "max": max, "round": round, "int": int, "float": float,
    "log2": math.log2,
}


def _check(node: ast.AST, names: frozenset[str], text: str, where: str) -> None:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            if sub.id not in names and sub.id not in _FUNCS:
                raise ConfigError(
                    f"{where}: constraint {text!r} names {sub.id!r}, which is not a parameter"
                    f" (parameters: {sorted(names)})"
                )
        elif isinstance(sub, ast.Call):
            if not isinstance(sub.func, ast.Name) or sub.func.id not in _FUNCS or sub.keywords:
                raise ConfigError(
                    f"{where}: constraint {text!r} may only call {sorted(_FUNCS)}"
                )
        elif not isinstance(
            sub,
            ast.Expression | ast.BoolOp | ast.BinOp | ast.UnaryOp | ast.Compare | ast.Constant
            | ast.Load | ast.boolop | ast.operator | ast.unaryop | ast.cmpop | ast.Tuple
            | ast.List | ast.IfExp,
        ):
            raise ConfigError(
                f"{where}: constraint {text!r} uses {type(sub).__name__}, which is not allowed"
            )
        if isinstance(sub, ast.BinOp) and type(sub.op) not in _BINOPS:
            raise ConfigError(f"{where}: constraint {text!r} uses an unsupported operator")


def _eval(node: ast.AST, env: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Expression):
        return _eval(node.body, env)
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return env[node.id]
    if isinstance(node, ast.BinOp):
        return _BINOPS[type(node.op)](_eval(node.left, env), _eval(node.right, env))
    if isinstance(node, ast.UnaryOp):
        value = _eval(node.operand, env)
        if isinstance(node.op, ast.Not):
            return not value
        if isinstance(node.op, ast.USub):
            return -value
        if isinstance(node.op, ast.UAdd):
            return +value
        return ~value
    if isinstance(node, ast.BoolOp):
        if isinstance(node.op, ast.And):
            result: Any = True
            for value_node in node.values:
                result = _eval(value_node, env)
                if not result:
                    return result
            return result
        result = False
        for value_node in node.values:
            result = _eval(value_node, env)
            if result:
                return result
        return result
    if isinstance(node, ast.Compare):
        left = _eval(node.left, env)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _eval(comparator, env)
            if not _CMPOPS[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.Call):
        assert isinstance(node.func, ast.Name)
        return _FUNCS[node.func.id](*(_eval(a, env) for a in node.args))
    if isinstance(node, ast.Tuple | ast.List):
        return tuple(_eval(e, env) for e in node.elts)
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, env) else node.orelse, env)
    raise AssertionError(f"unchecked node {type(node).__name__}")


@dataclass(frozen=True)
class Constraint:
    """A predicate over params; a proposal for which it is false is rejected."""

    text: str
    """The expression or ``module:function`` as written."""
    check: Callable[[Mapping[str, Any]], Any]
    """The compiled predicate."""
    where: str = ""
    """Where it was declared (``file: campaign.constraints[i]``), for error messages."""

    def __call__(self, params: Mapping[str, Any]) -> bool:
        try:
            return bool(self.check(params))
        except Exception as exc:
            prefix = f"{self.where}: " if self.where else ""
            msg = (
                f"{prefix}constraint {self.text!r} raised {type(exc).__name__}: {exc} "
                f"for params {dict(params)!r}"
            )
            raise ConstraintError(msg) from exc


def expression_constraint(text: str, names: frozenset[str], where: str) -> Constraint:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ConfigError(f"{where}: constraint {text!r} is not an expression: {exc.msg}") from None
    _check(tree, names, text, where)
    return Constraint(text, lambda params: _eval(tree, params), where)


def callable_constraint(text: str, base_dir: Path | None, where: str) -> Constraint:
    module_name, _, func_name = text.partition(":")
    if not module_name or not func_name:
        raise ConfigError(f"{where}: expected 'module:function', got {text!r}")
    func = load_callable(text, base_dir, where)
    return Constraint(text, func, where)


def load_callable(text: str, base_dir: Path | None, where: str) -> Callable[..., Any]:
    """Import ``module:attribute``, looking first beside the campaign file."""
    module_name, _, attr = text.partition(":")
    if base_dir is not None and str(base_dir) not in sys.path:
        sys.path.insert(0, str(base_dir))
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is a config error naming the module
        msg = f"{where}: cannot import {module_name!r} ({type(exc).__name__}: {exc})"
        raise ConfigError(msg) from None
    obj: Any = module
    for part in attr.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            raise ConfigError(f"{where}: module {module_name!r} has no attribute {attr!r}")
    if not callable(obj):
        raise ConfigError(f"{where}: {text!r} is not callable")
    return obj  # type: ignore[no-any-return]


def is_callable_ref(text: str) -> bool:
    """``True`` when *text* looks like ``package.module:function``."""
    module_name, sep, attr = text.partition(":")
    return bool(sep) and all(p.isidentifier() for p in module_name.split(".")) and all(
        p.isidentifier() for p in attr.split(".")
    )
