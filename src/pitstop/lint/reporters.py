"""Output formats of ``pitstop lint``: text (ruff-like), JSON, SARIF 2.1.0, GitHub annotations."""

from __future__ import annotations

import json
from collections import Counter

from pitstop.lint.findings import FileError, LintFinding

__all__ = ["text", "statistics", "json_report", "sarif", "github", "summary", "unlinted", "shown", "hidden_note"]

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def _fixable(f: LintFinding, unsafe: bool) -> bool:
    return f.fix is not None and (f.fix.applicability == "safe" or unsafe)


#: text order and SARIF/GitHub level per frequency (severity follows frequency)
_ORDER = {"step": 0, "epoch": 1, "unknown": 2, "once": 3}
_LEVEL = {"step": "error", "epoch": "warning", "once": "note", "unknown": "note"}
_GITHUB = {"step": "error", "epoch": "warning", "once": "notice", "unknown": "notice"}
_WHEN = {"step": "", "epoch": "[per epoch/eval] ", "once": "[once] ", "unknown": "[frequency unknown] "}


def shown(findings: list[LintFinding], view) -> list[LintFinding]:
    """The findings every output prints (``view``: :class:`pitstop.lint.view.View`): per-step ones first, then
    per-epoch ones, one-time cost findings only with ``--all``."""
    kept = [f for f in findings if view.shows(f)]
    return sorted(kept, key=lambda f: (_ORDER.get(f.frequency, 0), f.sort_key()))


def hidden_note(hidden: int) -> str:
    """The summary line counting one-time findings left out ("" when none)."""
    return (f"{hidden} finding{'s' * (hidden != 1)} in code that runs once or whose frequency is unknown "
            "(setup, converters, exports) not shown: `--all` shows them.") if hidden else ""


def text(findings: list[LintFinding], unsafe: bool = False) -> str:
    """``path:line:col: CODE [*] message``; ``[*]``: fixable with the current options; code run per
    epoch or once says so (``[per epoch/eval]``, ``[once]``) before the message."""
    return "".join(f"{f.location}:{f.line}:{f.column}: {f.code} {'[*] ' if _fixable(f, unsafe) else ''}"
                   f"{_WHEN.get(f.frequency, '')}{f.message}\n" for f in findings)


def unlinted(errors: int) -> str:
    """The line saying how many files could not be linted ("" when none)."""
    if not errors:
        return ""
    return (f"{errors} file{'s' * (errors != 1)} could not be linted "
            "(the `cannot parse` lines on stderr say why).")


def summary(findings: list[LintFinding], fixed: int, unsafe: bool, errors: int = 0, hidden: int = 0) -> str:
    """The closing lines: counts, fixable counts, one-time findings not shown, files that could not be
    linted, and where to read more. "All checks passed!" only when every file was linted and nothing was found."""
    lines = []
    if fixed:
        lines.append(f"Fixed {fixed} error{'s' * (fixed != 1)}.")
    n = len(findings)
    if n == 0:
        if hidden:
            lines.append(hidden_note(hidden))
        elif not fixed and not errors:
            lines.append("All checks passed!")
        if errors:
            lines.append(unlinted(errors))
        return "\n".join(lines) + "\n"
    if fixed:
        lines.append(f"Found {n} remaining error{'s' * (n != 1)}.")
    else:
        lines.append(f"Found {n} error{'s' * (n != 1)}.")
    if hidden:
        lines.append(hidden_note(hidden))
    safe = sum(1 for f in findings if f.fix and f.fix.applicability == "safe")
    # a fix that changes a state_dict layout is never offered (issue 42): --unsafe-fixes applies it, its
    # message says what silently breaks
    hidden = sum(1 for f in findings if f.fix and f.fix.applicability == "unsafe" and not f.fix.layout)
    if unsafe:
        safe, hidden = safe + hidden, 0
    if safe or hidden:
        s = f"[*] {safe} fixable with the `--fix` option" if safe else "No fixes available"
        if hidden:
            s += f" ({hidden} hidden fix{'es' * (hidden != 1)} can be enabled with the `--unsafe-fixes` option)"
        lines.append(s + ".")
    codes = sorted({f.code for f in findings})
    lines.append(f"Why and what to do instead: `pitstop explain CODE` ({', '.join(codes)}).")
    if errors:
        lines.append(unlinted(errors))
    return "\n".join(lines) + "\n"


def statistics(findings: list[LintFinding], unsafe: bool = False) -> str:
    counts = Counter(f.code for f in findings)
    fixable = {f.code for f in findings if _fixable(f, unsafe)}
    names = {f.code: f.name for f in findings}
    width = max((len(str(c)) for c in counts.values()), default=1)
    return "".join(f"{n:>{width}}\t{code}\t[{'*' if code in fixable else ' '}] {names[code]}\n"
                   for code, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def json_report(findings: list[LintFinding], errors: list[FileError] = ()) -> str:
    """The findings, and one entry with ``"code": null`` per file that could not be linted."""
    entries = [f.to_dict() for f in findings] + [e.to_dict() for e in errors]
    entries.sort(key=lambda d: (d["filename"], d.get("cell") or 0, d["line"], d["column"], d["code"] or ""))
    return json.dumps(entries, indent=2) + "\n"


def _region(line, column, end_line, end_column) -> dict:
    return {"startLine": line, "startColumn": column, "endLine": end_line, "endColumn": end_column}


def sarif(findings: list[LintFinding], errors: list[FileError], rules: list[tuple[str, str, str]], version: str) -> str:
    """SARIF 2.1.0: one run, the enabled rules as reportingDescriptors, fixes as replacements.
    A rule's help is the ``pitstop explain CODE`` command; no helpUri (no published docs site)."""
    index = {code: i for i, (code, _, _) in enumerate(rules)}
    results = []
    for f in findings:
        result = {
            "ruleId": f.code,
            "ruleIndex": index.get(f.code, -1),
            "level": _LEVEL.get(f.frequency, "error"),
            "message": {"text": f.message},
            "properties": {"frequency": f.frequency, "severity": f.severity},
            "locations": [{"physicalLocation": {
                "artifactLocation": {"uri": f.filename.replace("\\", "/")},
                "region": _region(f.line, f.column, f.end_line, f.end_column)}}],
        }
        if f.cell is not None:  # SARIF has no cells: lines are within this one
            result["properties"]["cell"] = f.cell
        if f.fix:
            result["fixes"] = [{
                "description": {"text": f"{f.fix.message} ({f.fix.applicability})"},
                "artifactChanges": [{
                    "artifactLocation": {"uri": f.filename.replace("\\", "/")},
                    "replacements": [{"deletedRegion": _region(e.line, e.column, e.end_line, e.end_column),
                                      "insertedContent": {"text": e.content}} for e in f.fix.edits]}]}]
        if result["ruleIndex"] < 0:
            del result["ruleIndex"]
        results.append(result)
    driver = {
        "name": "pitstop",
        "version": version,
        "rules": [{"id": code, "name": name, "shortDescription": {"text": title},
                   "help": {"text": f"pitstop explain {code}"}}
                  for code, name, title in rules],
    }
    invocation = {"executionSuccessful": not errors, "toolExecutionNotifications": [
        {"level": "error", "message": {"text": f"cannot parse: {e.reason}"},
         "locations": [{"physicalLocation": {"artifactLocation": {"uri": e.filename.replace("\\", "/")},
                                             **({"region": {"startLine": e.line, "startColumn": e.column or 1}}
                                                if e.line else {})}}]}
        for e in errors]}
    doc = {"$schema": SARIF_SCHEMA, "version": "2.1.0",
           "runs": [{"tool": {"driver": driver}, "invocations": [invocation], "results": results}]}
    return json.dumps(doc, indent=2) + "\n"


def _escape(s: str, prop: bool = False) -> str:
    s = s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
    return s.replace(":", "%3A").replace(",", "%2C") if prop else s


def github(findings: list[LintFinding], errors: list[FileError]) -> str:
    """GitHub Actions workflow commands: one annotation per finding (``::error`` per step, ``::warning``
    per epoch, ``::notice`` once)."""
    out = []
    for f in findings:
        props = (f"title={_escape(f'pitstop ({f.code})', True)},file={_escape(f.filename, True)},line={f.line},"
                 f"col={f.column},endLine={f.end_line},endColumn={f.end_column}")
        out.append(f"::{_GITHUB.get(f.frequency, 'error')} {props}::{_escape(f'{f.location}:{f.line}:{f.column}: {f.code} {f.message}')}\n")
    for e in errors:
        out.append(f"::error title=pitstop,file={_escape(e.filename, True)}::{_escape(str(e))}\n")
    return "".join(out)
