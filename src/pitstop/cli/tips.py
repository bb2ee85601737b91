"""``pitstop tips``, ``pitstop explain`` and ``pitstop docs``: the catalog on the command line."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pitstop.cli import EXIT_OK, CliError, Command


def _load():
    from pitstop import tips

    return tips


class TipsCommand(Command):
    name = "tips"
    help = "List the tip catalog (code, slug, faces, title)."
    order = 10

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--category", help="only this category (data, sync, precision, memory, ...)")
        parser.add_argument("--face", help="only tips declaring this face letter (L D K E B H) or name (lint, doctor, ...)")
        parser.add_argument("--format", choices=("text", "json"), default="text")

    def run(self, args: argparse.Namespace) -> int:
        from pitstop.registry import FACES

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
            print(json.dumps([t.to_dict() for t in selected], indent=2))
            return EXIT_OK
        from rich.table import Table

        from pitstop.report import make_console
        from pitstop.report.tipdoc import faces_label

        table = Table(title=f"pitstop tips ({len(selected)})", title_justify="left")
        for col in ("code", "slug", "faces", "title"):
            table.add_column(col, overflow="fold")
        for t in selected:
            table.add_row(t.code, t.slug, faces_label(t), t.title)
        console = make_console(width=140)
        console.print(table)
        console.print("faces: upper case implemented, lower case planned; "
                      + ", ".join(f"{k}={v}" for k, v in FACES.items()))
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
            from pitstop.tips.locate import locate

            places = locate(tip)
            if args.format == "json":
                print(json.dumps({"code": tip.code, "where": [p.to_dict() for p in places]}, indent=2))
            else:
                sys.stdout.write(where_text(tip, places, Path.cwd()))
        elif args.format == "json":
            print(json.dumps(tip.to_dict(), indent=2))
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
        from pitstop.report.tipdoc import index_markdown, tip_markdown

        tips = _load()
        all_tips = tips.all_tips()
        pages = {f"{t.code}.md": tip_markdown(t) for t in all_tips}
        pages["README.md"] = index_markdown(all_tips, tips.CATEGORY_TITLES)
        stale = [name for name, text in pages.items()
                 if not (args.out / name).is_file() or (args.out / name).read_text(encoding="utf-8") != text]
        extra = sorted(p.name for p in args.out.glob("*.md") if p.name not in pages) if args.out.is_dir() else []
        if args.check:
            for name in stale:
                print(f"{args.out / name}: out of date (run `pitstop docs`)")
            for name in extra:
                print(f"{args.out / name}: no tip has this page")
            return 1 if stale or extra else EXIT_OK
        args.out.mkdir(parents=True, exist_ok=True)
        for name in stale:
            (args.out / name).write_text(pages[name], encoding="utf-8")
        for name in extra:
            (args.out / name).unlink()
        print(f"{len(pages)} pages in {args.out} ({len(stale)} written, {len(extra)} removed)")
        return EXIT_OK
