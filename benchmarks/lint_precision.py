"""Precision and recall of `pitstop lint` on the labelled real-code corpus.

The corpus is built outside the repository by benchmarks/lint_corpus_build.py (pinned commits and
hashes in tests/lint_corpus/MANIFEST.toml; cache: $PITSTOP_LINT_CORPUS or ~/.cache/pitstop/lint-corpus).

    python benchmarks/lint_precision.py                      # the pitstop this interpreter imports
    python benchmarks/lint_precision.py --src main=/work/main/src --src branch=src
    python benchmarks/lint_precision.py --markdown           # the README table
    python benchmarks/lint_precision.py --unlabelled         # findings nobody has judged yet, with context

Lints the corpus with every rule (a subprocess per `--src`, so several versions of the rules can be
compared in one run), matches each finding to the verdicts in tests/lint_corpus/labels.toml and
prints, per rule: findings, how many were judged true / false / debatable / not yet, precision with
debatable findings left out and counted as wrong, and recall (labelled-true findings, known misses
included, that are reported). tests/test_lint_corpus.py uses the same matching.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import lint_corpus_build  # noqa: E402

CORPUS = lint_corpus_build.corpus_dir()
LABELS = ROOT / "tests" / "lint_corpus" / "labels.toml"
VERDICTS = ("true", "false", "debatable")


@dataclass(frozen=True)
class Label:
    path: str
    code: str
    line: int
    column: int
    anchor: str
    verdict: str
    reason: str
    bad_fix: bool = False
    missed: bool = False
    cell: int | None = None  # notebooks: lines count within this cell
    pattern: str = ""  # the rule's sub-pattern that reports it ("" for the main one)
    quiet: bool = False  # the current rules do not report it (a wrong finding removed since, or a known miss)


@dataclass(frozen=True)
class Reported:
    """One finding of a lint run, reduced to what matching needs."""

    path: str
    code: str
    line: int
    column: int
    anchor: str
    message: str
    fixable: bool
    cell: int | None = None
    frequency: str = "step"  # "step" / "epoch" / "once" / "unknown" (issues 31, 42)
    pattern: str = ""
    concern: str = "cost"
    fix: str | None = None  # the applicability of the fix it offers ("safe" / "unsafe"), None without one

    @property
    def default(self) -> bool:
        """Shown by a default ``pitstop lint`` run: a stable rule or sub-pattern (pitstop.lint.defaults), and not a
        cost finding in code that runs once or whose frequency is unknown."""
        from pitstop.lint.defaults import is_stable

        return is_stable(self.code, self.pattern) and not (self.concern == "cost" and self.frequency in ("once", "unknown"))


@dataclass
class Matching:
    matched: list[tuple[Reported, Label]] = field(default_factory=list)
    unlabelled: list[Reported] = field(default_factory=list)
    absent: list[Label] = field(default_factory=list)  # labels no finding matched


@dataclass(frozen=True)
class Score:
    code: str
    findings: int
    true: int
    false: int
    debatable: int
    unlabelled: int
    labelled_true: int  # every labelled-true problem, known misses included
    found_true: int

    @property
    def precision(self) -> float | None:
        """Right / (right + wrong), debatable findings left out."""
        n = self.true + self.false
        return self.true / n if n else None

    @property
    def precision_strict(self) -> float | None:
        """Right / every judged finding: debatable ones count as wrong."""
        n = self.true + self.false + self.debatable
        return self.true / n if n else None

    @property
    def recall(self) -> float | None:
        return self.found_true / self.labelled_true if self.labelled_true else None


def load_labels(path: Path = LABELS) -> list[Label]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    labels = []
    for i, row in enumerate(data.get("finding", [])):
        if row.get("verdict") not in VERDICTS:
            raise ValueError(f"{path}: finding #{i + 1} ({row.get('path')}:{row.get('line')}): verdict must be one of "
                             f"{', '.join(VERDICTS)}, got {row.get('verdict')!r}")
        labels.append(Label(row["path"], row["code"], int(row["line"]), int(row.get("column", 0)), row["anchor"],
                            row["verdict"], row.get("reason", ""), bool(row.get("bad_fix")), bool(row.get("missed")),
                            row.get("cell"), row.get("pattern", ""), bool(row.get("quiet"))))
    return labels


def source_lines(path: Path, cell: int | None = None) -> list[str]:
    """The lines a finding's line number counts in: the file's, or a notebook cell's."""
    try:
        text = path.read_text(encoding="utf-8")
        if cell is None:
            return text.splitlines()
        src = json.loads(text)["cells"][cell - 1]["source"]
        return ("".join(src) if isinstance(src, list) else src).splitlines()
    except (OSError, UnicodeDecodeError, ValueError, LookupError, TypeError):
        return []


def anchor(root: Path, path: str, line: int, cell: int | None = None, cache: dict | None = None) -> str:
    """The stripped source line a finding (or label) points at."""
    cache = {} if cache is None else cache
    if (path, cell) not in cache:
        cache[(path, cell)] = source_lines(root / path, cell)
    lines = cache[(path, cell)]
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def reported(json_findings: list[dict], root: Path = CORPUS) -> list[Reported]:
    """The findings of ``pitstop lint --format json`` run with ``root`` as the working folder."""
    cache: dict = {}
    out = []
    for f in json_findings:
        path = Path(f["filename"]).as_posix()
        cell = f.get("cell")
        out.append(Reported(path, f["code"], f["line"], f["column"], anchor(root, path, f["line"], cell, cache),
                            f["message"], (f.get("fix") or {}).get("applicability") == "safe", cell,
                            f.get("frequency", "step"), f.get("pattern", ""), f.get("concern", "cost"),
                            (f.get("fix") or {}).get("applicability")))
    return out


def match(findings: list[Reported], labels: list[Label]) -> Matching:
    """Pair findings with labels: same path, code and anchor; then the same column; then the nearest line."""
    pool: dict[tuple[str, str, str], list[Label]] = defaultdict(list)
    for lab in labels:
        pool[(lab.path, lab.code, lab.anchor)].append(lab)
    result = Matching()
    for f in sorted(findings, key=lambda f: (f.path, f.line, f.column, f.code)):
        candidates = pool.get((f.path, f.code, f.anchor))
        if not candidates:
            result.unlabelled.append(f)
            continue
        best = min(candidates, key=lambda lab: (lab.cell != f.cell, lab.column != f.column, abs(lab.line - f.line)))
        candidates.remove(best)
        result.matched.append((f, best))
    result.absent = [lab for group in pool.values() for lab in group]
    return result


def score(m: Matching, labels: list[Label]) -> dict[str, Score]:
    """Per rule code, plus ``"all"``."""
    codes = sorted({f.code for f, _ in m.matched} | {f.code for f in m.unlabelled} | {lab.code for lab in labels})
    scores = {}
    for code in codes + ["all"]:
        def mine(c: str) -> bool:
            return code == "all" or c == code
        verdicts = [lab.verdict for f, lab in m.matched if mine(f.code)]
        scores[code] = Score(
            code=code,
            findings=sum(1 for f, _ in m.matched if mine(f.code)) + sum(1 for f in m.unlabelled if mine(f.code)),
            true=verdicts.count("true"), false=verdicts.count("false"), debatable=verdicts.count("debatable"),
            unlabelled=sum(1 for f in m.unlabelled if mine(f.code)),
            labelled_true=sum(1 for lab in labels if lab.verdict == "true" and mine(lab.code)),
            found_true=sum(1 for f, lab in m.matched if lab.verdict == "true" and mine(f.code)))
    return scores


def run_lint(src: str | None = None, corpus: Path = CORPUS, extra: tuple[str, ...] = ()) -> list[dict]:
    """Lint ``corpus`` with every rule in a subprocess; ``src`` is the PYTHONPATH holding pitstop."""
    env = dict(os.environ)
    if src is not None:
        env["PYTHONPATH"] = str(Path(src).resolve())
    proc = subprocess.run([sys.executable, "-m", "pitstop", "lint", "--isolated", "--format", "json", "--exit-zero",
                           "--all", "--preview", *extra, *lint_corpus_build.lint_repos()], cwd=corpus, env=env,
                          capture_output=True, text=True)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"pitstop lint failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}") from None


def sync_labels(m: Matching, path: Path = LABELS) -> list[str]:
    """Rewrite ``quiet``/``pattern`` of the labels in ``path`` from a lint run's matching ``m``: a matched label
    takes its finding's sub-pattern and is not quiet; a label no finding matched becomes quiet when it is wrong,
    debatable or a known miss. Returns the labelled-right findings that went missing (not marked: a regression,
    to fix or to label ``missed`` with a reason)."""
    matched = {(lab.path, lab.code, lab.line, lab.column, lab.cell): f.pattern for f, lab in m.matched}
    lost = []
    blocks = path.read_text(encoding="utf-8").split("\n[[finding]]\n")
    out = [blocks[0]]
    labels = load_labels(path)
    assert len(labels) == len(blocks) - 1, "one [[finding]] table per label"
    for lab, block in zip(labels, blocks[1:]):
        lines = [ln for ln in block.split("\n") if not ln.startswith(("quiet = ", "pattern = "))]
        key = (lab.path, lab.code, lab.line, lab.column, lab.cell)
        extra = []
        if key in matched:
            if matched[key]:
                extra.append(f'pattern = "{matched[key]}"')
        elif lab.verdict != "true" or lab.missed:
            extra.append("quiet = true")
            if lab.pattern:
                extra.append(f'pattern = "{lab.pattern}"')
        else:
            lost.append(f"{lab.path}:{lab.line}: {lab.code} {lab.anchor}")
            if lab.pattern:
                extra.append(f'pattern = "{lab.pattern}"')
        at = next((i for i, ln in enumerate(lines) if ln.startswith("reason = ")), len(lines) - 1)
        lines[at + 1:at + 1] = extra
        out.append("\n".join(lines))
    from pitstop.atomic import write_atomic

    write_atomic(path, "\n[[finding]]\n".join(out))
    return lost


def _stable(lab: Label) -> bool:
    from pitstop.lint.defaults import is_stable

    return is_stable(lab.code, lab.pattern)


def repo_rounds() -> dict[str, int]:
    """Repository name -> the round its labels were gathered in (MANIFEST.toml ``round``)."""
    return {r["name"]: int(r.get("round", 1)) for r in lint_corpus_build.load_manifest()["repo"]}


def figures(labels: list[Label], rounds: dict[str, int] | None = None) -> list[dict]:
    """Per rule and sub-pattern (``PIT201``, ``PIT201/chain``): the labels of findings the current rules report
    (not ``quiet``), right / wrong / debatable, split into confirmed rounds and the newest round (pending), and
    the wrong findings of confirmed rounds a later change removed. What pitstop.lint.defaults.measured holds."""
    rounds = rounds or repo_rounds()
    newest = max((rounds.get(lab.path.split("/", 1)[0], 1) for lab in labels), default=1)
    out: dict[str, dict] = {}
    for lab in labels:
        rule = f"{lab.code}/{lab.pattern}" if lab.pattern else lab.code
        row = out.setdefault(rule, {"rule": rule, **{f"{w}_{v}": 0 for w in ("confirmed", "pending")
                                                     for v in ("right", "wrong", "debatable")}, "silenced_wrong": 0})
        pending = rounds.get(lab.path.split("/", 1)[0], 1) >= newest and newest > 1
        verdict = {"true": "right", "false": "wrong", "debatable": "debatable"}[lab.verdict]
        if lab.quiet:
            if verdict == "wrong" and not pending:
                row["silenced_wrong"] += 1
            continue
        row[f"{'pending' if pending else 'confirmed'}_{verdict}"] += 1
    return [out[k] for k in sorted(out)]


def figures_module(rows: list[dict], rounds: dict[str, int] | None = None) -> str:
    """The text of src/pitstop/lint/defaults/measured.py for ``rows`` (:func:`figures`)."""
    rounds = rounds or repo_rounds()
    newest = max(rounds.values(), default=1)
    lines = ['"""Measured precision of every lint rule and sub-pattern: GENERATED by',
             '``python benchmarks/lint_precision.py --write-figures`` from tests/lint_corpus/labels.toml (do not edit;',
             'tests/test_lint_defaults.py checks it against the labels). See :mod:`pitstop.lint.defaults`."""', "",
             "from __future__ import annotations", "", "from pitstop.lint.defaults.figure import Figure", "",
             '__all__ = ["FIGURES", "NEWEST_ROUND"]', "",
             "#: the newest round of labels (its labels are pending: they can turn a rule off, never on)",
             f"NEWEST_ROUND = {newest}", "", "FIGURES: tuple[Figure, ...] = ("]
    for r in rows:
        args = ", ".join(f"{k}={v}" for k, v in r.items() if k != "rule" and v)
        lines.append(f'    Figure("{r["rule"]}"{", " + args if args else ""}),')
    lines.append(")")
    return "\n".join(lines) + "\n"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def table(scores: dict[str, Score], markdown: bool = False) -> str:
    head = ["rule", "findings", "true", "false", "debatable", "unlabelled", "precision", "precision (debatable = wrong)",
            "recall"]
    rows = [[s.code, s.findings, s.true, s.false, s.debatable, s.unlabelled, _pct(s.precision),
             _pct(s.precision_strict), f"{_pct(s.recall)} ({s.found_true}/{s.labelled_true})"]
            for s in scores.values() if s.findings or s.labelled_true]
    rows = [r for r in rows if r[0] != "all"] + [r for r in rows if r[0] == "all"]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(f"**{c}**" if r[0] == "all" else str(c) for c in r) + " |" for r in rows]
        return "\n".join(lines) + "\n"
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    return "".join("  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip() + "\n" for r in [head, *rows])


def comparison(named: dict[str, dict[str, Score]]) -> str:
    """One Markdown table, a column group per rule version: findings, precision (debatable left
    out / counted wrong), recall."""
    names = list(named)
    codes = sorted({c for sc in named.values() for c, s in sc.items() if c != "all" and (s.findings or s.labelled_true)})
    head = ["rule"] + [f"{n}: {k}" for n in names for k in ("findings", "precision", "recall")]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for code in codes + ["all"]:
        cells = [f"**{code}**" if code == "all" else code]
        for n in names:
            s = named[n].get(code)
            if s is None:
                cells += ["0", "-", "-"]
                continue
            cells += [str(s.findings), f"{_pct(s.precision)} / {_pct(s.precision_strict)}",
                      f"{_pct(s.recall)} ({s.found_true}/{s.labelled_true})"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _context(f: Reported, before: int = 4, after: int = 2) -> str:
    lines = source_lines(CORPUS / f.path, f.cell)
    lo, hi = max(0, f.line - 1 - before), min(len(lines), f.line + after)
    return "".join(f"{'>' if i == f.line - 1 else ' '}{i + 1:5d} {lines[i]}\n" for i in range(lo, hi))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--src", action="append", metavar="NAME=DIR",
                   help="lint with the pitstop under DIR (a src/ folder); repeat to compare versions")
    p.add_argument("--markdown", action="store_true", help="print Markdown tables")
    p.add_argument("--unlabelled", action="store_true", help="also list unlabelled findings with their context")
    p.add_argument("--absent", action="store_true", help="also list labelled-true findings that are not reported")
    p.add_argument("--default-output", action="store_true",
                   help="score what `pitstop lint` shows by default (stable rules and sub-patterns, one-time cost "
                        "findings left out); recall over the labels of the stable ones")
    p.add_argument("--sync-labels", action="store_true",
                   help="mark in labels.toml which labels the current rules report (quiet, pattern), then exit")
    p.add_argument("--write-figures", action="store_true",
                   help="write src/pitstop/lint/defaults/measured.py (each rule's measured precision) from the labels and exit")
    args = p.parse_args(argv)
    if args.write_figures:
        from pitstop.atomic import write_atomic

        write_atomic(ROOT / "src" / "pitstop" / "lint" / "defaults" / "measured.py", figures_module(figures(load_labels())))
        print("wrote src/pitstop/lint/defaults/measured.py")
        return 0
    if not lint_corpus_build.is_built(CORPUS):
        print(lint_corpus_build.skip_reason(CORPUS))
        return 2
    labels = load_labels()
    if args.sync_labels:
        lost = sync_labels(match(reported(run_lint()), labels))
        print(f"labels synced; {len(lost)} labelled-right finding(s) no longer reported" + "".join(f"\n  {x}" for x in lost))
        return 1 if lost else 0
    variants = [tuple(s.split("=", 1)) if "=" in s else (s, s) for s in args.src or []] or [("this", None)]
    failed = 0
    named: dict[str, dict[str, Score]] = {}
    for name, src in variants:
        print(f"\n## {name}" + (f" ({src})" if src else "") + "\n")
        try:
            found = reported(run_lint(src))
            if args.default_output:
                found = [f for f in found if f.default]
                labels = [lab for lab in labels if _stable(lab)]  # recall of what the default set covers
            m = match(found, labels)
        except RuntimeError as exc:
            print(exc)
            failed += 1
            continue
        named[name] = score(m, labels)
        print(table(named[name], args.markdown))
        bad = sorted({(lab.path, lab.line, lab.code) for f, lab in m.matched if lab.bad_fix and f.fixable})
        if bad:
            print(f"findings that offer a fix labelled harmful: {len(bad)}: "
                  + ", ".join(f"{p}:{ln} {c}" for p, ln, c in bad))
        if args.absent:
            for lab in m.absent:
                if lab.verdict == "true":
                    print(f"not reported: {lab.path}:{lab.line}: {lab.code} {lab.anchor}  ({lab.reason})")
        if args.unlabelled:
            for f in m.unlabelled:
                where = f.path if f.cell is None else f"{f.path}:cell {f.cell}"
                print(f"\n{where}:{f.line}:{f.column}: {f.code} {f.message}\n{_context(f)}", end="")
    if args.markdown and len(named) > 1:
        print("\n## side by side (precision: debatable left out / counted wrong)\n")
        print(comparison(named))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
