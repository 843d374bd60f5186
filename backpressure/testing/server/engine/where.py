"""The part of ``$where`` JavaScript the embedded server understands: sleeps and constant results.

mongod runs ``$where`` code once per scanned document. Tests use it to make a query slow
(pymongo's helper sends ``function() { sleep(0.100000 * 1000); return true; }``), so the server
must know how long the code sleeps and whether it matches. The code is not executed: it is
parsed into a small expression language and evaluated safely, and anything outside that language
is rejected with an error (238 NotImplemented) instead of being guessed.

Understood: an optional ``function() { ... }`` wrapper around statements separated by ``;``;
``return <expr>`` (no return: undefined, which matches nothing); expressions made of number,
``true``/``false``/``null``/``undefined`` literals, ``+ - * / %``, parentheses, comparisons,
``!``, ``&&``, ``||`` and calls of ``sleep(<expr>)`` (milliseconds; returns undefined).
Everything else (``this``, fields, variables, strings, other functions) is rejected.
"""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

from backpressure.testing.server.errors import CommandError

__all__ = ["WhereCode", "analyse_where"]

_FUNCTION = re.compile(r"^\s*function\s*\(\s*\)\s*\{(?P<body>.*)\}\s*;?\s*$", re.S)
_RETURN = re.compile(r"^return\b(?P<expr>.*)$", re.S)
_IDENTIFIER = re.compile(r"\b[A-Za-z_$][\w$]*\b")
_ALLOWED_WORDS = frozenset({"sleep", "true", "false", "null", "undefined"})
_MAX_CODE = 4096
_MAX_SLEEP_MS = 3_600_000.0


@dataclass(frozen=True)
class WhereCode:
    """What a ``$where`` does for each scanned document."""

    sleep_ms: float
    """Milliseconds slept per evaluated document."""
    matches: bool
    """Whether a document matches (the code's result, truthy or not)."""


class _Undefined:
    """JavaScript's ``undefined``: what ``sleep()`` and a missing ``return`` give."""

    def __bool__(self) -> bool:
        return False


_UNDEFINED = _Undefined()


def _reject(code: str, why: str) -> CommandError:
    return CommandError(
        238,
        f"$where is emulated only for sleep(<arithmetic>) and constant results; {why}: {code!r}",
    )


def _to_python(expr: str, code: str) -> ast.expr:
    """Parse a JavaScript expression of the supported subset into a Python AST."""
    for word in _IDENTIFIER.findall(expr):
        if word not in _ALLOWED_WORDS:
            raise _reject(code, f"{word!r} cannot be evaluated")
    if any(char in expr for char in "'\"`[]{}"):
        raise _reject(code, "strings, arrays and objects cannot be evaluated")
    text = re.sub(r"===?", "==", expr)
    text = re.sub(r"!==?", "!=", text)
    text = text.replace("&&", " and ").replace("||", " or ")
    text = re.sub(r"!(?!=)", " not ", text)
    text = re.sub(r"\btrue\b", "True", text)
    text = re.sub(r"\bfalse\b", "False", text)
    text = re.sub(r"\b(null|undefined)\b", "None", text)
    try:
        tree = ast.parse(text.strip() or "None", mode="eval")
    except SyntaxError as exc:
        raise _reject(code, f"syntax not understood ({exc.msg})") from None
    return tree.body


_BINARY: dict[type[ast.operator], Callable[[float, float], float]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b if b else (math.nan if a == 0 else math.copysign(math.inf, a)),
    ast.Mod: lambda a, b: math.fmod(a, b) if b else math.nan,
}
_COMPARE: dict[type[ast.cmpop], Callable[[Any, Any], bool]] = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
}


class _Evaluator:
    """Evaluate the supported AST with JavaScript's truthiness, adding up ``sleep`` calls."""

    def __init__(self, code: str) -> None:
        self.code = code
        self.sleep_ms = 0.0

    def number(self, value: Any) -> float:
        if value is None or value is _UNDEFINED:
            return 0.0 if value is None else math.nan
        return float(value)

    def eval(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, bool)):
            return node.value
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            try:
                return float(node.value)
            except OverflowError:  # an integer literal beyond the double range
                return math.inf
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            left, right = self.number(self.eval(node.left)), self.number(self.eval(node.right))
            return _BINARY[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp):
            operand = self.eval(node.operand)
            if isinstance(node.op, ast.Not):
                return not operand
            if isinstance(node.op, ast.USub):
                return -self.number(operand)
            if isinstance(node.op, ast.UAdd):
                return self.number(operand)
        if isinstance(node, ast.BoolOp):  # JavaScript's && and || return an operand
            value: Any = _UNDEFINED
            for operand in node.values:
                value = self.eval(operand)
                if bool(value) == isinstance(node.op, ast.Or):
                    return value
            return value
        if isinstance(node, ast.Compare) and all(type(op) in _COMPARE for op in node.ops):
            left = self.number(self.eval(node.left))
            for op, right_node in zip(node.ops, node.comparators):
                right = self.number(self.eval(right_node))
                if not _COMPARE[type(op)](left, right):
                    return False
                left = right
            return True
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "sleep"
            and len(node.args) == 1
            and not node.keywords
        ):
            ms = self.number(self.eval(node.args[0]))
            if not math.isfinite(ms):
                raise _reject(self.code, f"sleep({ms}) is not a finite duration")
            self.sleep_ms += min(max(ms, 0.0), _MAX_SLEEP_MS)
            return _UNDEFINED
        raise _reject(self.code, f"{ast.dump(node)[:60]} cannot be evaluated")


def analyse_where(value: Any) -> Optional[WhereCode]:
    """Return what a ``$where`` value does per document; raise ``CommandError`` if unsupported.

    ``None`` for a value that is not a string (mongod's Code values arrive as ``bson.Code``,
    which is a ``str`` subclass and therefore supported).
    """
    if not isinstance(value, str):
        return None
    code = str(value)
    if len(code) > _MAX_CODE:
        raise _reject(code[:80] + "...", f"code longer than {_MAX_CODE} characters")
    try:
        return _run(code)
    except (RecursionError, MemoryError):
        raise _reject(code[:80], "nesting too deep") from None


def _run(code: str) -> WhereCode:
    evaluator = _Evaluator(code)
    function = _FUNCTION.match(code)
    if function is None:  # a bare expression: its value is the result
        result = evaluator.eval(_to_python(code, code))
        return WhereCode(evaluator.sleep_ms, bool(result))
    result = _UNDEFINED
    for statement in function.group("body").split(";"):
        statement = statement.strip()
        if not statement:
            continue
        returned = _RETURN.match(statement)
        if returned is not None:
            result = evaluator.eval(_to_python(returned.group("expr"), code))
            break
        evaluator.eval(_to_python(statement, code))
    return WhereCode(evaluator.sleep_ms, bool(result))
