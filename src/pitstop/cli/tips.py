"""``pitstop tips``, ``pitstop explain`` and ``pitstop docs``: the catalog on the command line."""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from pitstop.cli import EXIT_OK, CliError, Command, check_writable_dir


def _load():
    from pitstop import catalog

    return catalog


class TipsCommand(Command):
    name = "tips"
    help = "List the tip catalog (code, slug, faces, title)."
    order = 10

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--category", help="only this category (data, sync, precision, memory, ...)")
        parser.add_argument("--face", help="only tips declaring this face letter (L D K E B H) or name (lint, doctor, ...)")
        parser.add_argument("--format", choices=("text", "json"), default="text")

    def run(self, args: argparse.Namespace) -> int:
        from pitstop.catalog import FACES

        tips = _load()
        selected = tips.all_tips()
        if args.category:
            cats = sorted(set(tips.CATEGORIES.values()))
            if args.category not in cats:
                raise CliError(f"unknown category {args.category!r}; choose from {', '.join(cats)}")
            selected = [t for t in selected if t.category() == args.category]
        if args.face:
            by_name = {v: k for k, v in FACES.items()}
            letter = args.face.upper() if args.face.upper() in FACES else by_name.get(args.face.lower())
            if letter is None:
                raise CliError(f"unknown face {args.face!r}; choose from {', '.join(f'{k} ({v})' for k, v in FACES.items())}")
            selected = [t for t in selected if letter in t.faces or letter in t.implemented_faces()]
        if args.format == "json":
            from pitstop.report.tipdoc import tip_json

            print(json.dumps([tip_json(t) for t in selected], indent=2))
            return EXIT_OK
        from pitstop.report import make_console
        from pitstop.report.tipdoc import print_tips

        print_tips(selected, make_console(width=140))
        return EXIT_OK


class ExplainCommand(Command):
    name = "explain"
    help = "Show the full documentation of a tip, by code (PIT301) or slug (mixed-precision)."
    order = 11

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("tip", metavar="CODE|SLUG")
        parser.add_argument("--format", choices=("text", "markdown", "json"), default="text")
        parser.add_argument("--where", action="store_true",
                            help="print where the tip lives in the code: file:line of its module and each face")

    def run(self, args: argparse.Namespace) -> int:
        tips = _load()
        try:
            tip = tips.get(args.tip)
        except tips.UnknownTipError as exc:
            raise CliError(str(exc)) from None
        from pitstop.report.tipdoc import tip_markdown, where_text

        if args.where:
            from pitstop.catalog_locate import locate

            places = locate(tip)
            if args.format == "json":
                print(json.dumps({"code": tip.code, "where": [p.to_dict() for p in places]}, indent=2))
            else:
                sys.stdout.write(where_text(tip, places, Path.cwd()))
        elif args.format == "json":
            from pitstop.report.tipdoc import tip_json

            print(json.dumps(tip_json(tip), indent=2))
        elif args.format == "markdown" or not sys.stdout.isatty():
            sys.stdout.write(tip_markdown(tip))
        else:
            from rich.markdown import Markdown

            from pitstop.report import make_console

            make_console().print(Markdown(tip_markdown(tip)))
        return EXIT_OK


class DocsCommand(Command):
    name = "docs"
    help = "Generate the Markdown docs pages of the catalog (one per tip plus an index)."
    order = 90

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--out", type=Path, default=Path("docs/tips"), help="output folder (default: docs/tips)")
        parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if the pages are out of date")

    def run(self, args: argparse.Namespace) -> int:
        from pitstop.atomic import write_atomic
        from pitstop.report.tipdoc import index_markdown, tip_markdown

        tips = _load()
        all_tips = tips.all_tips()
        pages = {f"{t.code}.md": GENERATED + tip_markdown(t) for t in all_tips}
        pages["README.md"] = GENERATED + index_markdown(all_tips, tips.CATEGORY_TITLES)
        out = args.out
        if out.exists() and not out.is_dir():
            raise CliError(f"--out {out}: is not a directory (give the folder for the pages, e.g. docs/tips)")
        stale = [name for name, text in pages.items() if _read(out / name) != text]
        # only pages this command generated (named PITnnn.md and carrying the marker) are ever removed
        extra = sorted(p.name for p in out.glob("PIT*.md") if p.name not in pages and _generated(p)) if out.is_dir() else []
        if args.check:
            for name in stale:
                print(f"{out / name}: out of date (run `pitstop docs`)")
            for name in extra:
                print(f"{out / name}: no tip has this page")
            return 1 if stale or extra else EXIT_OK
        foreign = [name for name in stale if (out / name).exists() and not _generated(out / name)]
        if foreign:
            raise CliError(f"--out {out}: {', '.join(foreign)} exist(s) and were not generated by pitstop docs (no "
                           "generated-file marker); not overwriting them: move them or choose another --out")
        check_writable_dir(out, "--out")
        for name in stale:
            write_atomic(out / name, pages[name])
        for name in extra:
            (out / name).unlink()
        print(f"{len(pages)} pages in {out} ({len(stale)} written, {len(extra)} removed)")
        return EXIT_OK


#: the first line of every page ``pitstop docs`` writes; only files starting with it are ever
#: overwritten or removed (a user's own notes in the same folder are left alone)
GENERATED = "<!-- generated by `pitstop docs` from src/pitstop/tips/: edit the tip module, not this file -->\n"
_OLD_NAME = re.compile(r"^PIT\d{3}\.md$")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _generated(path: Path) -> bool:
    if not (path.name == "README.md" or _OLD_NAME.match(path.name)) or path.is_symlink() or not path.is_file():
        return False
    try:
        with open(path, encoding="utf-8") as f:
            head = [f.readline() for _ in range(3)]
    except (OSError, UnicodeDecodeError):
        return False
    if head[0] == GENERATED:
        return True
    # pages written before the marker existed: a tip page's own heading, or the index's note
    return (head[0].startswith(f"# {path.stem} ") if path.name != "README.md"
            else "by `pitstop docs`; do not edit by hand" in "".join(head))
