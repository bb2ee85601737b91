"""Small libcst node helpers shared by the rules: arguments, literals, method calls, edits."""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst

__all__ = [
    "subexpressions", "arg", "kwarg", "has_star_args", "positional", "is_true", "is_false", "int_value",
    "method", "receiver", "last_name", "string_value", "with_kwarg", "without_arg",
    "strip_parens", "contains_op", "has_kwargs_splat", "root_name", "number_value", "dotted",
    "bound_names", "names_in", "binary_ops",
]


def kwarg(call: cst.Call, name: str) -> cst.Arg | None:
    """The keyword argument ``name=`` of ``call``, or None."""
    for a in call.args:
        if a.keyword is not None and a.keyword.value == name:
            return a
    return None


def positional(call: cst.Call) -> list[cst.Arg]:
    return [a for a in call.args if a.keyword is None and not a.star]


def has_kwargs_splat(call: cst.Call) -> bool:
    """True when ``**kwargs`` could hide any keyword argument."""
    return any(a.star == "**" for a in call.args)


def root_name(expr: cst.BaseExpression) -> str | None:
    """``x`` for ``x``, ``x["a"]``, ``x.a``, ``x[0].b``; None otherwise."""
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        expr = expr.value
    return expr.value if isinstance(expr, cst.Name) else None


def has_star_args(call: cst.Call) -> bool:
    """True when ``*args`` or ``**kwargs`` could hide any argument."""
    return any(a.star for a in call.args)


def arg(call: cst.Call, name: str, index: int | None = None) -> cst.Arg | None:
    """The argument bound to parameter ``name`` (keyword, or positional at ``index``)."""
    found = kwarg(call, name)
    if found is None and index is not None:
        pos = positional(call)
        if len(pos) > index and not any(a.star == "*" for a in call.args[: call.args.index(pos[index])]):
            found = pos[index]
    return found


def is_true(node: cst.BaseExpression | None) -> bool:
    return isinstance(node, cst.Name) and node.value == "True"


def is_false(node: cst.BaseExpression | None) -> bool:
    return isinstance(node, cst.Name) and node.value == "False"


def int_value(node: cst.BaseExpression | None) -> int | None:
    """The value of an integer literal (``64``, ``0x40``, ``1_024``), else None."""
    if isinstance(node, cst.Integer):
        try:
            return int(node.value, 0)
        except ValueError:
            return int(node.value.replace("_", ""))
    return None


def number_value(node: cst.BaseExpression | None) -> float | None:
    if isinstance(node, (cst.Integer, cst.Float)):
        try:
            return float(node.evaluated_value)
        except (ValueError, OverflowError):
            return None
    if isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Minus):
        v = number_value(node.expression)
        return None if v is None else -v
    return None


def method(call: cst.BaseExpression) -> str | None:
    """``x.foo(...)`` -> ``"foo"``; anything else -> None."""
    if isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute):
        return call.func.attr.value
    return None


def receiver(call: cst.Call) -> cst.BaseExpression:
    """``x.foo(...)`` -> ``x`` (call.func must be an Attribute)."""
    return call.func.value  # type: ignore[attr-defined]


def last_name(node: cst.BaseExpression | None) -> str | None:
    """``a.b.c`` -> ``"c"``, ``a`` -> ``"a"``, anything else -> None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return node.attr.value
    return None


def bound_names(target: cst.CSTNode) -> list[str]:
    """Names an assignment/loop target binds: ``x`` / ``x, (y, *z)`` -> ``["x", "y", "z"]``."""
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [n for el in target.elements for n in bound_names(el.value)]
    if isinstance(target, cst.StarredElement):
        return bound_names(target.value)
    return []


def dotted(node: cst.BaseExpression | None) -> str | None:
    """``self.opt`` -> ``"self.opt"`` for names and attribute chains of names; else None."""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        head = dotted(node.value)
        return None if head is None else f"{head}.{node.attr.value}"
    return None


def string_value(node: cst.BaseExpression | None) -> str | None:
    """The text of a plain string literal, or of the leading text of an f-string."""
    if isinstance(node, cst.SimpleString):
        raw = node.value
        q = raw.lstrip("rRbBuU")
        if "b" in raw[: len(raw) - len(q)].lower():
            return None
        quote = q[:3] if q[:3] in ('"""', "'''") else q[0]
        return q[len(quote): -len(quote)]
    if isinstance(node, cst.FormattedString):
        first = node.parts[0] if node.parts else None
        return first.value if isinstance(first, cst.FormattedStringText) else ""
    if isinstance(node, cst.ConcatenatedString):
        return string_value(node.left)
    return None


def strip_parens(node):
    """A copy of ``node`` without its own parentheses (positions exclude them)."""
    if getattr(node, "lpar", None):
        return node.with_changes(lpar=(), rpar=())
    return node


def contains_op(node: cst.CSTNode, op_type: type) -> bool:
    """True when a BinaryOperation with operator ``op_type`` occurs in ``node``'s expression."""
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, cst.BinaryOperation):
            if isinstance(n.operator, op_type):
                return True
            stack += (n.left, n.right)
        elif isinstance(n, cst.Call):
            stack += [a.value for a in n.args] + [n.func]
        elif isinstance(n, cst.Attribute):
            stack.append(n.value)
        elif isinstance(n, cst.UnaryOperation):
            stack.append(n.expression)
        elif isinstance(n, cst.Subscript):
            stack.append(n.value)
    return False


def with_kwarg(call: cst.Call, name: str, value: str) -> cst.Call:
    """``call`` with ``name=value`` set: the existing keyword replaced, or one appended."""
    new_value = cst.parse_expression(value)
    existing = kwarg(call, name)
    if existing is not None:
        return call.with_changes(args=[a.with_changes(value=new_value) if a is existing else a for a in call.args])
    args = list(call.args)
    new = cst.Arg(value=new_value, keyword=cst.Name(name),
                  equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                        whitespace_after=cst.SimpleWhitespace("")))
    if args:
        last = args[-1]
        if isinstance(last.comma, cst.Comma):  # trailing comma: keep it after the new argument
            new = new.with_changes(comma=last.comma)
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
        else:
            args[-1] = last.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*args, new])


def without_arg(call: cst.Call, target: cst.Arg) -> cst.Call:
    args = [a for a in call.args if a is not target]
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return call.with_changes(args=args)


def subexpressions(node: cst.CSTNode | None) -> Iterator[cst.CSTNode]:
    """Each expression inside ``node``, itself first: through attribute roots, arithmetic, boolean and unary
    operators, comparisons and calls' arguments."""
    stack = [node] if node is not None else []
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, cst.Attribute):
            stack.append(n.value)
        elif isinstance(n, (cst.BinaryOperation, cst.BooleanOperation)):
            stack += [n.left, n.right]
        elif isinstance(n, cst.Comparison):
            stack += [n.left, *(c.comparator for c in n.comparisons)]
        elif isinstance(n, cst.UnaryOperation):
            stack.append(n.expression)
        elif isinstance(n, cst.Call):
            stack += [a.value for a in n.args]


def names_in(node: cst.CSTNode | None) -> list[str]:
    """The bare names an expression reads (``ni``, ``last_opt_step``, ``accumulate`` in ``ni - last >= accumulate``;
    attribute chains give their root)."""
    return [n.value for n in subexpressions(node) if isinstance(n, cst.Name)]


def binary_ops(node: cst.CSTNode | None, *ops: type) -> list[cst.BinaryOperation]:
    """The binary operations with one of ``ops`` inside an expression (calls' arguments included)."""
    out = []
    stack = [node] if node is not None else []
    while stack:
        n = stack.pop()
        if isinstance(n, cst.BinaryOperation):
            if isinstance(n.operator, ops):
                out.append(n)
            stack += [n.left, n.right]
        elif isinstance(n, cst.Call):
            stack += [a.value for a in n.args]
            if isinstance(n.func, cst.Attribute):  # ``np.interp(ni, xi, [1, nbs / bs]).round()``
                stack.append(n.func.value)
        elif isinstance(n, (cst.List, cst.Tuple)):
            stack += [e.value for e in n.elements]
        elif isinstance(n, cst.UnaryOperation):
            stack.append(n.expression)
    return out
