"""Render catalog entries: the ``pitstop tips`` table, Markdown for ``pitstop explain`` and the
generated docs pages."""

from __future__ import annotations

from pathlib import Path

from pitstop.catalog import FACES

__all__ = ["faces_label", "print_tips", "tip_markdown", "index_markdown", "where_text"]


def faces_label(tip) -> str:
    """``L D K e b``: implemented faces upper case, planned (declared, not built) lower case."""
    done = set(tip.implemented_faces())
    letters = [f for f in FACES if f in done or f in tip.faces]
    return " ".join(f if f in done else f.lower() for f in letters)


def print_tips(tips: list, console) -> None:
    """The ``pitstop tips`` table (code, slug, faces, title) and the faces legend."""
    from rich.table import Table

    table = Table(title=f"pitstop tips ({len(tips)})", title_justify="left")
    for col in ("code", "slug", "faces", "title"):
        table.add_column(col, overflow="fold")
    for t in tips:
        table.add_row(t.code, t.slug, faces_label(t), t.title)
    console.print(table)
    console.print("faces: upper case implemented, lower case planned; "
                  + ", ".join(f"{k}={v}" for k, v in FACES.items()))


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
