"""Conditions that make code run less often than the loop around it (issue 42): interval guards
(``if step % N == 0:``), predicates named for it (``if should_log:``, ``if self.metrics.should_log(step):``,
``if is_logging_step:``), once-guards (``if i == 0:``, ``if ni == 0:``), and guard clauses that end the
block early on such a condition (``if step % N: return``, ``if not should_log: return``), after which the
rest of the block runs only every N steps (or once).

Two readers share these rules: the walk over the syntax tree (:func:`classify`, for the frequencies of
one file) and the line scan of the project index (:func:`line_kind`, for the call names of every file).

- *periodic*: the test contains ``%``; or names a predicate or flag for logging, printing, evaluating,
  saving or checkpointing (``should_log``, ``is_logging_step``, ``do_eval``, ``time_to_save``); or is a
  local name bound to such a test (``should_log = step == 1 or step % log_freq == 0``).
- *once*: ``<counter> == <small int>`` (``i == 0``, ``ni == 0``, ``step == 1``, ``epoch == start_epoch``
  is not: its right side is no literal), the counter being a loop target or a name that counts steps,
  iterations, batches or epochs.

Polarity: the body of ``if <periodic>:`` runs every N steps; a guard clause ``if <test>: return`` (or
``continue``/``raise``) makes the rest of its block periodic when the test is the negation of a periodic
one (``not should_log``, ``step % N != 0``, a bare ``step % N``), and once when it negates a once-test
(``i != 0``).
"""

from __future__ import annotations

import re

import libcst as cst

from pitstop.lint.nodes import subexpressions

__all__ = ["PERIODIC", "ONCE", "classify", "clause", "line_kind", "line_clause", "split_statements", "PREDICATE", "COUNTER"]

PERIODIC, ONCE = "periodic", "once"

#: a predicate or flag named for an every-N-steps action
PREDICATE = re.compile(
    r"(?:^|_)(?:should|is|do|time_to|need|needs|must)_(?:log|logging|print|report|display|eval|evaluate|evaluation|"
    r"val|validate|validation|save|checkpoint|ckpt|sample|sampling|profile|visuali[sz]e|plot|write)(?:_|$)|"
    r"^(?:is_)?(?:log|logging|eval|save|checkpoint)_(?:step|iter|iteration|time|now)$", re.I)
#: names that count steps, iterations, batches or epochs (the left side of a once-test)
COUNTER = re.compile(r"^(?:i|j|k|n|ni|it|idx|ix|step|steps|iter|iters|iteration|epoch|batch_idx|batch_i|"
                     r"global_step|n_iter|num_iter|cur_iter|cur_step|curr_step|train_step|micro_step|bi|b)$|"
                     r"(?:^|_)(?:step|iter|iteration|epoch|batch)(?:_?idx|_?num|_?count)?$", re.I)
_SMALL = frozenset({"0", "1"})


def _name(expr) -> str | None:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    if isinstance(expr, cst.Call):
        return _name(expr.func)
    return None


def _has_mod(expr) -> bool:
    return any(isinstance(n, cst.BinaryOperation) and isinstance(n.operator, cst.Modulo) for n in subexpressions(expr))


def _once_test(expr, targets) -> bool:
    """``<counter> == 0`` (or ``1``), either side."""
    if not (isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1
            and isinstance(expr.comparisons[0].operator, cst.Equal)):
        return False
    left, right = expr.left, expr.comparisons[0].comparator
    for a, b in ((left, right), (right, left)):
        if isinstance(b, cst.Integer) and b.value in _SMALL:
            name = _name(a) if not isinstance(a, cst.Call) else None
            if name is not None and (name in targets or COUNTER.search(name)):
                return True
    return False


def classify(test, lookup=None, targets: frozenset = frozenset(), _depth: int = 0) -> tuple[str | None, bool]:
    """(kind, positive) of an ``if`` test: kind ``"periodic"``, ``"once"`` or None; ``positive`` False when the
    test is the negation of such a condition (true on the steps it skips). ``lookup(name)``: the expression a
    local name is bound to (None: unknown); ``targets``: the names the enclosing loops bind."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        kind, positive = classify(test.expression, lookup, targets, _depth + 1)
        return kind, not positive
    if isinstance(test, cst.BooleanOperation):  # ``step == 1 or step % N == 0``: periodic if either side is
        a, b = classify(test.left, lookup, targets, _depth + 1), classify(test.right, lookup, targets, _depth + 1)
        if isinstance(test.operator, cst.Or) and (a == (PERIODIC, True) or b == (PERIODIC, True)):
            return PERIODIC, True
        if isinstance(test.operator, cst.And) and (ONCE, True) in (a, b):
            return ONCE, True  # ``if ni == 0 and self.tb:``: at most once
        if isinstance(test.operator, cst.And) and (PERIODIC, True) in (a, b):
            return PERIODIC, True
        return None, True
    if _has_mod(test):
        if isinstance(test, cst.Comparison) and len(test.comparisons) == 1:
            op = test.comparisons[0].operator
            if isinstance(op, cst.NotEqual):
                return PERIODIC, False
            if isinstance(op, cst.Equal):
                return PERIODIC, True
        if isinstance(test, cst.BinaryOperation):  # a bare ``step % N``: true off the interval
            return PERIODIC, False
        return PERIODIC, True
    if _once_test(test, targets):
        return ONCE, True
    if isinstance(test, cst.Comparison) and len(test.comparisons) == 1 and \
            isinstance(test.comparisons[0].operator, cst.NotEqual):
        flipped = test.with_changes(comparisons=[test.comparisons[0].with_changes(operator=cst.Equal())])
        if _once_test(flipped, targets):
            return ONCE, False
    name = _name(test)
    if name is not None and PREDICATE.search(name):
        return PERIODIC, True
    if isinstance(test, cst.Name) and lookup is not None and _depth < 3:
        bound = lookup(test.value)
        if bound is not None:
            return classify(bound, lookup, targets, _depth + 1)
    return None, True


_EXITS = (cst.Return, cst.Continue, cst.Raise)


def clause(node, lookup=None, targets: frozenset = frozenset()) -> str | None:
    """The kind the rest of the block takes after ``node`` (an ``if`` statement): ``"periodic"`` or ``"once"``
    when ``node`` is a guard clause that leaves the block unless such a condition holds, else None."""
    if not isinstance(node, cst.If) or node.orelse is not None:
        return None
    body = node.body.body if isinstance(node.body, cst.IndentedBlock) else ()
    last = body[-1] if body else None
    small = last.body[-1] if isinstance(last, cst.SimpleStatementLine) and last.body else None
    if isinstance(node.body, cst.SimpleStatementSuite):
        small = node.body.body[-1] if node.body.body else None
    if not isinstance(small, _EXITS):
        return None
    kind, positive = classify(node.test, lookup, targets)
    return kind if kind is not None and not positive else None


# -- the line scan's reading of the same tests --------------------------------------------------------
_IF = re.compile(r"^\s*(?:el)?if\s+(.+?):\s*(.*)$")
_WORD = re.compile(r"[A-Za-z_]\w*")
_ONCE_LINE = re.compile(r"(?<![\w.])(?:self\.)?([A-Za-z_]\w*)\s*==\s*[01]\b(?!\.)")
_EXIT_LINE = re.compile(r"^\s*(?:return|continue|raise)\b")


def line_kind(code: str, periodic_names=frozenset()) -> tuple[str | None, bool]:
    """(kind, positive) of an ``if``/``elif`` line's test, read from its text (see :func:`classify`);
    ``periodic_names``: local names assigned a periodic test earlier in the function."""
    m = _IF.match(code)
    if m is None:
        return None, True
    test = m[1].strip()
    negated = test.startswith("not ")
    bare = test[4:].strip() if negated else test
    if "%" in bare:
        if "!=" in bare:
            return PERIODIC, negated
        if "==" in bare:
            return PERIODIC, not negated
        return PERIODIC, negated  # a bare ``step % N``: true off the interval
    once = _ONCE_LINE.search(bare)
    if once and COUNTER.search(once[1]) and " or " not in bare and (not negated or " and " not in bare):
        return ONCE, not negated
    words = _WORD.findall(bare)
    if words and (PREDICATE.search(words[-1]) or any(PREDICATE.search(w) for w in words if w != "self")
                  or len(words) == 1 and words[0] in periodic_names):
        return PERIODIC, not negated
    return None, True


def line_clause(code: str, next_code: str | None, periodic_names=frozenset()) -> str | None:
    """The kind the rest of the block takes after an ``if`` line that is a guard clause (its body, on the
    same line or the next, is ``return``/``continue``/``raise``), else None."""
    m = _IF.match(code)
    if m is None or code.lstrip().startswith("elif"):
        return None
    same_line = m[2].strip()
    if not (_EXIT_LINE.match(same_line) if same_line else next_code is not None and _EXIT_LINE.match(next_code)):
        return None
    kind, positive = line_kind(code, periodic_names)
    return kind if kind is not None and not positive else None


_ASSIGN = re.compile(r"^([A-Za-z_]\w*)\s*=(?!=)\s*(.+)$")


def split_statements(stmts: list) -> tuple[list, list, list]:
    """The statements of a block (objects with ``indent`` and ``code``, continuation lines joined) split into
    (those that run whenever the block does, those that run every N steps, those under a once-guard), by the
    ``if`` tests and guard clauses around them (:func:`line_kind`, :func:`line_clause`)."""
    plain: list = []
    periodic: list = []
    once: list = []
    names: set = set()  # locals bound to a periodic test: ``should_log = step % 10 == 0``
    regions: list = []  # (indent, kind, strict): strict covers deeper statements, else the same level too
    for k, st in enumerate(stmts):
        while regions and not (st.indent > regions[-1][0] or not regions[-1][2] and st.indent == regions[-1][0]):
            regions.pop()
        kinds = {r[1] for r in regions}
        (once if ONCE in kinds else periodic if PERIODIC in kinds else plain).append(st)
        m = _ASSIGN.match(st.code)
        if m and line_kind(f"if {m[2]}:", names)[0] == PERIODIC:
            names.add(m[1])
        if not st.code.startswith(("if ", "if(", "elif ")):
            continue
        kind, positive = line_kind(st.code, names)
        if kind is not None and positive:
            regions.append((st.indent, kind, True))
        nxt = stmts[k + 1].code if k + 1 < len(stmts) and stmts[k + 1].indent > st.indent else None
        after = line_clause(st.code, nxt, names)
        if after is not None:
            regions.append((st.indent, after, False))
    return plain, periodic, once
