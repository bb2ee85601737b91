"""The ``pitstop`` command line.

Each module of this package defines one :class:`Command` subclass; it registers itself
(``__init_subclass__``) and :func:`main` discovers the modules, so adding a command means
adding a file. Command modules import only argparse-level things at import time: the work
(and torch) is imported inside ``run``, so ``pitstop lint`` never loads torch.

Exit codes: 0 success / nothing found, 1 findings, 2 usage or input errors, 1 also for an
unexpected internal error (one line and a hint to report it; the traceback with
``--verbose``), 128 + N when stopped by signal N (SIGTERM, SIGHUP: cleanup runs first), 130
on Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import pkgutil
import sys
import traceback
from pathlib import Path
from typing import ClassVar

__all__ = ["Command", "CliError", "main", "split_at_double_dash", "check_writable_dir", "check_output_file",
           "check_number", "EXIT_OK", "EXIT_FINDINGS", "EXIT_USAGE",
           "EXIT_INTERNAL"]

EXIT_OK, EXIT_FINDINGS, EXIT_USAGE = 0, 1, 2
EXIT_INTERNAL = 1  # an unexpected error inside pitstop (a bug): one line, the traceback with --verbose

_COMMANDS: dict[str, type[Command]] = {}


class CliError(Exception):
    """A usage or input error: printed as ``pitstop: error: ...`` and exit code 2."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(message)
        self.code = code


class Command:
    """One subcommand. Subclasses set ``name`` and ``help`` and implement the two methods."""

    name: ClassVar[str]
    help: ClassVar[str]
    order: ClassVar[int] = 50  # position in ``pitstop --help``

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        if cls.name in _COMMANDS:
            raise ValueError(f"command {cls.name!r} defined twice")
        _COMMANDS[cls.name] = cls

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Declare this command's options."""

    def run(self, args: argparse.Namespace) -> int:
        raise NotImplementedError


def check_number(option: str, value: float | None, *, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False) -> None:
    """CliError unless ``value`` (None passes) is a finite number in the given range."""
    if value is None:
        return
    rng = ("(" if low_open else "[") + ("-inf" if low is None else f"{low:g}") + ", " + (
        "inf" if high is None else f"{high:g}") + (")" if high_open else "]")
    if not math.isfinite(value):
        raise CliError(f"{option} must be a finite number in {rng}, got {value}")
    if low is not None and (value < low or (low_open and value == low)):
        raise CliError(f"{option} must be in {rng}, got {value:g}")
    if high is not None and (value > high or (high_open and value == high)):
        raise CliError(f"{option} must be in {rng}, got {value:g}")


def check_writable_dir(path: Path, option: str) -> None:
    """Create ``path`` (and parents) if needed; CliError unless it is a writable directory."""
    from pitstop.atomic import writable_dir_problem

    problem = writable_dir_problem(path)
    if problem is not None:
        raise CliError(f"{option}: {problem}")


def check_output_file(path: Path, option: str) -> None:
    """An output file named on the command line, checked before any work is done: not a
    directory, its folder creatable and writable, the file itself writable if it exists."""
    if path.is_dir():
        raise CliError(f"{option}: {str(path)!r} is a directory; give a file path")
    check_writable_dir(path.parent if str(path.parent) else Path("."), option)
    if path.exists() and not os.access(path, os.W_OK):
        raise CliError(f"{option}: {str(path)!r} exists and is not writable")


def _discover() -> None:
    for info in pkgutil.iter_modules(__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{__name__}.{info.name}")


def build_parser() -> argparse.ArgumentParser:
    from pitstop import __version__

    _discover()
    parser = argparse.ArgumentParser(
        prog="pitstop",
        description="A pit crew for PyTorch training: lint, doctor, tune, engine and bench, one code per tip.",
    )
    parser.add_argument("--version", action="version", version=f"pitstop {__version__}")
    parser.add_argument("--verbose", action="store_true", help="show the traceback of an unexpected error")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for cls in sorted(_COMMANDS.values(), key=lambda c: (c.order, c.name)):
        cmd = cls()
        p = sub.add_parser(cls.name, help=cls.help, description=cls.help)
        p.add_argument("--verbose", action="store_true", default=argparse.SUPPRESS,
                       help="show the traceback of an unexpected error")
        cmd.add_arguments(p)
        p.set_defaults(_command=cmd)
    return parser


def main(argv: list[str] | None = None) -> int:
    from pitstop.lifecycle import exit_on_signals

    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_command", None) is None:
        parser.print_help()
        return EXIT_USAGE
    try:
        with exit_on_signals():  # SIGTERM/SIGHUP: finally blocks run (children killed, temp files removed)
            return args._command.run(args)
    except CliError as exc:
        print(f"pitstop {args.command}: error: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print("pitstop: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # last resort: one line, not a traceback
        if args.verbose:
            traceback.print_exc()
        detail = str(exc).splitlines()[0] if str(exc) else ""
        print(f"pitstop {args.command}: internal error: {type(exc).__name__}" + (f": {detail}" if detail else "")
              + " (a bug in pitstop: please report it" + ("" if args.verbose else "; --verbose shows the traceback")
              + ")", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


def split_at_double_dash(parser: argparse.ArgumentParser) -> None:
    """For commands that run a user's script (doctor, tune): everything after the first ``--``
    goes to ``ns.script_args`` whatever it looks like, and the command's own options may stand
    before or after SCRIPT (argparse alone refuses ``SCRIPT --steps 3 -- ARGS`` once the
    positional slots are filled)."""
    original = parser.parse_known_args

    def parse_known_args(args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        tail: list[str] = []
        if "--" in args:
            i = args.index("--")
            args, tail = args[:i], args[i + 1:]
        ns, extras = original(args, namespace)
        ns.script_args = [*(ns.script_args or []), *tail]
        return ns, extras

    parser.parse_known_args = parse_known_args  # type: ignore[method-assign]
