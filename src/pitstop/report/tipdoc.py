"""Render catalog entries: the ``pitstop tips`` table, Markdown for ``pitstop explain`` and the
generated docs pages."""

from __future__ import annotations

from pathlib import Path

from pitstop.catalog import FACES

__all__ = ["faces_label", "print_tips", "tip_markdown", "index_markdown", "where_text", "lint_label", "lint_lines",
           "tip_json"]


def faces_label(tip) -> str:
    """``L D K e b``: implemented faces upper case, planned (declared, not built) lower case."""
    done = set(tip.implemented_faces())
    letters = [f for f in FACES if f in done or f in tip.faces]
    return " ".join(f if f in done else f.lower() for f in letters)


def _figures(tip) -> list:
    """The measured figures of the tip's lint rule (main pattern first), or [] without a lint face."""
    if "L" not in tip.implemented_faces():
        return []
    from pitstop.lint.defaults import figures_of_code

    return figures_of_code(tip.code)


def lint_label(tip) -> str:
    """``on 1.00/62`` (on by default, precision over right+wrong labelled findings) or ``preview 0.86/14``;
    a sub-pattern with another status adds ``+1 preview`` / ``+1 on``; "" without a lint face."""
    figs = _figures(tip)
    if not figs:
        return ""
    main = figs[0]
    n = main.right + main.wrong
    text = f"{'on' if main.stable else 'preview'} {main.precision:.2f}/{n}" if n else \
        ("on" if main.stable else "preview") + " -/0"
    others = [f for f in figs[1:] if f.stable != main.stable]
    if others:
        text += f" +{len(others)} {'on' if others[0].stable else 'preview'}"
    return text


def lint_lines(tip) -> list[str]:
    """``pitstop explain``'s lines on the lint rule's measured precision and default status, one per sub-pattern."""
    from pitstop.lint.defaults import status_line

    return [f"{'Lint' if not f.pattern else f'Lint sub-pattern `{f.pattern}`'}: {status_line(f)}" for f in _figures(tip)]


def tip_json(tip) -> dict:
    """``tip.to_dict()`` plus, for a tip with a lint face, each rule/sub-pattern's measured figure and status."""
    out = tip.to_dict()
    figs = _figures(tip)
    if figs:
        out["lint"] = [{"rule": f.rule, "default": f.stable, "right": f.right, "wrong": f.wrong,
                        "debatable": f.debatable, "precision": f.precision,
                        "pending": f.pending_right + f.pending_wrong + f.pending_debatable} for f in figs]
    return out


def print_tips(tips: list, console) -> None:
    """The ``pitstop tips`` table (code, slug, faces, lint default and measured precision, title) and the legends."""
    from rich.table import Table

    table = Table(title=f"pitstop tips ({len(tips)})", title_justify="left")
    for col in ("code", "slug", "faces", "lint", "title"):
        table.add_column(col, overflow="fold")
    for t in tips:
        table.add_row(t.code, t.slug, faces_label(t), lint_label(t), t.title)
    console.print(table)
    console.print("faces: upper case implemented, lower case planned; "
                  + ", ".join(f"{k}={v}" for k, v in FACES.items()))
    console.print("lint: on by default or preview (`pitstop lint --preview`), then the measured precision over the "
                  "right and wrong labelled real findings (`pitstop explain CODE` says more)")


def tip_markdown(tip) -> str:
    done = tip.implemented_faces()
    planned = tip.planned_faces()
    face_line = ", ".join(f"{FACES[f]} ({f})" for f in done) or "none yet"
    lines = [
        f"# {tip.code} {tip.slug}",
        "",
        f"**{tip.title}**",
        "",
        f"- Category: {tip.category()}",
        f"- Faces: {face_line}" + (f"; planned: {', '.join(f'{FACES[f]} ({f})' for f in planned)}" if planned else ""),
        f"- Seeds: {', '.join(tip.seeds) if tip.seeds else 'beyond the seeds'}",
    ]
    lines += [f"- {line}" for line in lint_lines(tip)]
    if tip.engine:
        lines.append(f"- Engine: {tip.engine}")
    if tip.helpers:
        lines.append(f"- Helpers: {', '.join(f'`pitstop.{h}`' for h in tip.helpers)}")
    if tip.truth:
        lines += ["", f"> **What is true today:** {tip.truth}"]
    for heading, body in tip.docs().items():
        lines += ["", f"## {heading}", "", body]
    return "\n".join(lines) + "\n"


def index_markdown(tips, category_titles: dict[str, str]) -> str:
    lines = [
        "# The pitstop tip catalog",
        "",
        "Generated from `src/pitstop/tips/` by `pitstop docs`; do not edit by hand.",
        "Faces: upper case = implemented, lower case = planned. "
        + ", ".join(f"{k} {v}" for k, v in FACES.items()) + ".",
    ]
    current = None
    for tip in tips:
        if tip.category() != current:
            current = tip.category()
            lines += ["", f"## {category_titles[current]}", "", "| code | slug | faces | title |", "|---|---|---|---|"]
        lines.append(f"| [{tip.code}]({tip.code}.md) | {tip.slug} | {faces_label(tip)} | {tip.title} |")
    return "\n".join(lines) + "\n"


def where_text(tip, places, cwd: Path) -> str:
    """``pitstop explain CODE --where``: one ``face  file:line  name (kind)`` line per place
    (:class:`pitstop.catalog_locate.Location`), paths relative to ``cwd`` when under it."""
    def shown(file: str) -> str:
        path = Path(file)
        return str(path.relative_to(cwd)) if path.is_relative_to(cwd) else str(path)

    rows = [(FACES.get(p.face, p.face), f"{shown(p.file)}:{p.line}", f"{p.name} ({p.kind})") for p in places]
    width = max(len(r[1]) for r in rows)
    lines = [f"{tip.code} {tip.slug}"] + [f"  {face:<7} {loc:<{width}}  {what}" for face, loc, what in rows]
    planned = tip.planned_faces()
    if planned:
        lines.append("  planned: " + ", ".join(f"{FACES[f]} ({f})" for f in planned))
    return "\n".join(lines) + "\n"
