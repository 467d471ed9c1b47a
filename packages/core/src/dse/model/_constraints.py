"""Constraints: a simple expression over params, or a Python callable ``module:function``.

Expressions are parsed with :mod:`ast` and evaluated by a small interpreter (never ``eval``):
names of params, numbers, strings, arithmetic, comparisons, ``and``/``or``/``not``, ``in``,
and the functions ``abs``, ``min``, ``max``, ``round``, ``int``, ``float``, ``log2``.

They are evaluated for every proposal, so their cost is bounded: an integer may hold at most
:data:`MAX_INT_BITS` bits and a string or tuple at most :data:`MAX_LENGTH` items, checked
*before* the operation that would exceed them (``9**9**9**9`` would take hours and all the
memory there is), an expression at most :data:`MAX_NODES` syntax nodes nested at most
:data:`MAX_DEPTH` deep. Parts without a param are evaluated once when the campaign is loaded,
so a constant that is too costly is refused before anything runs.

An expression that reads a conditional param where it is inactive (absent from the params)
holds there: ``momentum < 0.9`` binds only the points where ``momentum`` is active.
"""

from __future__ import annotations

import ast
import importlib
import math
import operator
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dse.model._errors import ConfigError, ConstraintError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from pathlib import Path

MAX_INT_BITS = 4096
"""Largest integer a constraint may compute (about 1233 decimal digits)."""
MAX_LENGTH = 10_000
"""Longest string or tuple a constraint may build."""
MAX_NODES = 1000
"""Most syntax nodes in one expression."""
MAX_DEPTH = 100
"""Deepest nesting of one expression."""


class CostLimitError(ArithmeticError):
    """An operation of a constraint would exceed the cost limit (the message says which)."""


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


def _size(value: Any) -> tuple[str, int, int] | None:
    """(what, size, limit) of a value whose size is bounded, or ``None``."""
    if isinstance(value, int):
        return "bits", value.bit_length(), MAX_INT_BITS
    if isinstance(value, str | tuple):
        return "items", len(value), MAX_LENGTH
    return None


def _over(node: ast.AST, verb: str, size: tuple[str, int, int]) -> CostLimitError:
    unit, n, limit = size
    text = ast.unparse(node)
    text = text if len(text) <= 60 else text[:57] + "..."
    return CostLimitError(f"{text} {verb} {n} {unit}, over the limit of {limit}")


def _bounded(value: Any, node: ast.AST) -> Any:
    size = _size(value)
    if size is not None and size[1] > size[2]:
        raise _over(node, "has", size)
    return value


def _expected(op: type[ast.operator], left: Any, right: Any) -> tuple[str, int, int] | None:
    """The size of what *left* op *right* would build, when it could exceed the cost limit:
    estimated before the operation, which may take longer than anyone waits."""
    if op is ast.Pow and isinstance(left, int) and isinstance(right, int) and right > 0:
        bits = 1 if abs(left) <= 1 else int(right * math.log2(abs(left))) + 1
        return "bits", bits, MAX_INT_BITS
    if op is ast.Mult and isinstance(left, int) and isinstance(right, int):
        return "bits", left.bit_length() + right.bit_length(), MAX_INT_BITS
    if op is ast.Mult and isinstance(left, str | tuple) and isinstance(right, int):
        return "items", len(left) * max(right, 0), MAX_LENGTH
    if op is ast.Mult and isinstance(right, str | tuple) and isinstance(left, int):
        return "items", len(right) * max(left, 0), MAX_LENGTH
    return None


def _binop(node: ast.BinOp, left: Any, right: Any) -> Any:
    op = type(node.op)
    if op is ast.Mod and isinstance(left, str):
        # printf-style formatting can build any size of string ("%0999999999d")
        raise TypeError("a string may not be formatted with % in a constraint")
    expected = _expected(op, left, right)
    if expected is not None and expected[1] > expected[2]:
        raise _over(node, "would have about", expected)
    return _bounded(_BINOPS[op](left, right), node)


def _round(number: Any, ndigits: Any = None) -> Any:
    # round(5, -10**9) computes 10**(10**9)
    if isinstance(ndigits, int) and abs(ndigits) > MAX_INT_BITS:
        raise CostLimitError(f"round to {ndigits} digits, over the limit of {MAX_INT_BITS}")
    return round(number) if ndigits is None else round(number, ndigits)


_FUNCS: dict[str, Callable[..., Any]] = {
    "abs": abs, "min": min, "max": max, "round": _round, "int": int, "float": float,
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
        return _bounded(node.value, node)
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise _Inactive(node.id)
        return env[node.id]
    if isinstance(node, ast.BinOp):
        return _binop(node, _eval(node.left, env), _eval(node.right, env))
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
        return _bounded(_FUNCS[node.func.id](*(_eval(a, env) for a in node.args)), node)
    if isinstance(node, ast.Tuple | ast.List):
        return _bounded(tuple(_eval(e, env) for e in node.elts), node)
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
        except CostLimitError as exc:
            prefix = f"{self.where}: " if self.where else ""
            msg = (f"{prefix}constraint {self.text!r} exceeds the cost limit for params"
                   f" {dict(params)!r}: {exc}")
            raise ConstraintError(msg) from None
        except Exception as exc:
            prefix = f"{self.where}: " if self.where else ""
            msg = (
                f"{prefix}constraint {self.text!r} raised {type(exc).__name__}: {exc} "
                f"for params {dict(params)!r}"
            )
            raise ConstraintError(msg) from exc


def _depth(tree: ast.AST) -> int:
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _check_cost(tree: ast.Expression, text: str, where: str) -> None:
    """Refuse an expression too large to evaluate per proposal, or whose parts without a
    param exceed the cost limit (evaluated here, once: they do not change)."""
    nodes = sum(1 for _ in ast.walk(tree))
    if nodes > MAX_NODES or _depth(tree) > MAX_DEPTH:
        raise ConfigError(
            f"{where}: constraint {text!r} is too large ({nodes} syntax nodes, at most"
            f" {MAX_NODES}, nested at most {MAX_DEPTH} deep)")
    stack: list[ast.AST] = [tree.body]
    while stack:
        node = stack.pop()
        if any(isinstance(sub, ast.Name) and sub.id not in _FUNCS for sub in ast.walk(node)):
            stack.extend(ast.iter_child_nodes(node))
            continue
        try:
            _eval(node, {})
        except CostLimitError as exc:
            raise ConfigError(
                f"{where}: constraint {text!r} exceeds the cost limit: {exc}") from None
        except Exception:  # noqa: BLE001 - other errors are raised per proposal, naming its params
            continue


def expression_constraint(text: str, names: frozenset[str], where: str) -> Constraint:
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ConfigError(f"{where}: constraint {text!r} is not an expression: {exc.msg}") from None
    except (RecursionError, MemoryError):
        raise ConfigError(
            f"{where}: constraint {text!r} is too large (nested at most {MAX_DEPTH} deep)"
        ) from None
    _check(tree, names, text, where)
    _check_cost(tree, text, where)
    return Constraint(text, lambda params: _holds(tree, params), where)


class _Inactive(LookupError):
    """The params lack a name the expression reads: a conditional param, inactive there."""


def _holds(tree: ast.Expression, params: Mapping[str, Any]) -> Any:
    """*tree* evaluated over *params*; true where it reads a param they lack (a conditional
    param its ``when`` leaves out: a rule about a param binds only where it is active)."""
    try:
        return _eval(tree, params)
    except _Inactive:
        return True


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
