"""Which files ``pitstop lint PATH ...`` lints.

Directories are walked for ``*.py`` and ``*.ipynb`` files, skipping VCS folders, virtualenvs (any folder with
a ``pyvenv.cfg``), ``build/`` and tool caches, and whatever ``.gitignore`` files exclude. The
gitignore semantics come from ``pathspec`` (git's wildmatch rules, nested .gitignore files,
negation): it works in folders that are not git checkouts, needs no git binary, and costs no
subprocess. Paths named explicitly are always linted. Symlinked folders are not followed (no
loops); a broken or looping symlink to a file is reported, not skipped silently. Like ruff
(astral-sh/ruff#280), symlinks to files are followed and linted; one found in a walked folder
whose target lies outside that folder is listed in ``outside`` (``--fix`` does not write
through it). Entries that are not regular files (a FIFO or socket named ``*.py``) are never
opened (reading a FIFO blocks forever): they are listed in ``skipped`` with the reason.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import pathspec

__all__ = ["discover", "excluded", "Discovered", "Excludes", "SKIP_DIRS", "LINTED_SUFFIXES"]

LINTED_SUFFIXES = (".py", ".ipynb")  # a walk lints these; files named explicitly are linted whatever their name

SKIP_DIRS = frozenset({".git", ".hg", ".svn", ".bzr", "__pycache__", "build", ".venv", "venv", ".tox", ".nox",
                       ".mypy_cache", ".pytest_cache", ".ruff_cache", ".hypothesis", "node_modules",
                       "site-packages", ".eggs", "__pypackages__", ".ipynb_checkpoints"})


@dataclass(frozen=True)
class Excludes:
    """``[tool.pitstop.lint] exclude`` / ``extend-exclude`` (ruff's semantics): gitignore-style
    patterns relative to ``root`` (the pyproject's folder); ``patterns`` replaces the default
    folder names (:data:`SKIP_DIRS`), ``extend`` adds to them. A walk skips what they match;
    files named explicitly are still linted unless ``--force-exclude``."""

    root: Path = field(default_factory=Path.cwd)
    patterns: tuple[str, ...] | None = None  # None: SKIP_DIRS
    extend: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        lines = [*(self.patterns or ()), *self.extend]
        object.__setattr__(self, "_spec", pathspec.GitIgnoreSpec.from_lines(lines) if lines else None)
        object.__setattr__(self, "_names", SKIP_DIRS if self.patterns is None else frozenset())

    def skips(self, path: Path, is_dir: bool) -> bool:
        """Whether ``path`` (absolute) is excluded: by name (the defaults) or by a pattern."""
        if is_dir and path.name in self._names:
            return True
        rel = self._relative(path) if self._spec is not None else None
        return rel is not None and self._spec.match_file(rel + ("/" if is_dir else ""))

    def within(self, folder: Path) -> Excludes:
        """For walking ``folder`` named explicitly: like ruff, a folder named on the command line
        is linted even when a pattern excludes it, so the patterns matching it are dropped
        (the others still apply beneath it)."""
        rel = self._relative(folder)
        if rel is None or not self.skips(folder, True):
            return self
        keep = [p for p in (*(self.patterns or ()), *self.extend)
                if p.lstrip().startswith("!") or not pathspec.GitIgnoreSpec.from_lines([p]).match_file(rel + "/")]
        return Excludes(self.root, tuple(keep) if self.patterns is not None else None,
                        () if self.patterns is not None else tuple(keep))

    def _relative(self, path: Path) -> str | None:
        for candidate in (path, Path(os.path.realpath(path))):
            try:
                rel = candidate.relative_to(self.root).as_posix()
            except ValueError:
                continue
            return None if rel in ("", ".") else rel
        return None  # outside the configuration's folder: its patterns do not apply


@dataclass
class Discovered:
    files: list[Path]
    errors: list[tuple[str, str]]  # (path, reason)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (path, reason): not regular files
    outside: set[Path] = field(default_factory=set)  # walked symlinks whose target is outside the folder


def _not_regular(p: Path) -> str | None:
    """Why ``p`` (followed if a link) is not a regular file, or None when it is one."""
    try:
        mode = p.stat().st_mode
    except OSError:
        return None  # reported elsewhere (broken link) or gone
    if stat.S_ISREG(mode):
        return None
    kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else
            "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a directory" if stat.S_ISDIR(mode) else
            "not a regular file")
    return f"skipped: {kind}, not a regular file"


def _gitignore(d: Path):
    f = d / ".gitignore"
    try:
        if f.is_file():
            return pathspec.GitIgnoreSpec.from_lines(f.read_text(encoding="utf-8", errors="replace").splitlines())
    except OSError:
        return None
    return None


def _parent_specs(start: Path) -> list[tuple[Path, object]]:
    """.gitignore files of the folders above ``start`` up to the checkout root."""
    specs = []
    for d in start.parents:
        spec = _gitignore(d)
        if spec is not None:
            specs.append((d, spec))
        if (d / ".git").exists():
            break
    return list(reversed(specs))


def _ignored(path: Path, is_dir: bool, specs) -> bool:
    ignored = False
    for base, spec in specs:
        try:
            rel = path.relative_to(base).as_posix()
        except ValueError:
            continue
        result = spec.check_file(rel + ("/" if is_dir else ""))
        if result.include is not None:
            ignored = bool(result.include)
    return ignored


def excluded(p: Path, excludes: Excludes | None = None) -> bool:
    """Whether a walk would skip ``p`` (for ``--force-exclude`` on explicitly named files)."""
    excludes = excludes if excludes is not None else Excludes()
    absp = p.absolute()
    if excludes.skips(absp, False) or any(excludes.skips(d, True) for d in absp.parents):
        return True
    return _ignored(absp, False, _parent_specs(absp))


def discover(paths: list[Path], force_exclude: bool = False, excludes: Excludes | None = None) -> Discovered:
    files: list[Path] = []
    errors: list[tuple[str, str]] = []
    skipped: list[tuple[str, str]] = []
    outside: set[Path] = set()
    seen: set[Path] = set()
    excludes = excludes if excludes is not None else Excludes()

    def add(p: Path) -> None:
        key = p.absolute()
        if key not in seen:
            seen.add(key)
            files.append(p)

    for root in paths:
        if root.is_symlink() and not root.exists():
            errors.append((str(root), _link_error(root)))
            continue
        if root.is_file():
            if not (force_exclude and excluded(root, excludes)):
                add(root)
            continue
        if not root.is_dir():
            why = _not_regular(root) if root.exists() else None
            if why is not None:
                skipped.append((str(root), why))
            else:
                errors.append((str(root), "cannot read: No such file or directory"))
            continue
        realroot = os.path.realpath(root)
        absroot = root.absolute()
        if force_exclude and excludes.skips(absroot, True):
            continue
        walk_excludes = excludes.within(absroot)
        specs = _parent_specs(absroot)
        own = _gitignore(absroot)
        if own is not None:
            specs.append((absroot, own))
        stack = [(root, specs)]
        while stack:
            d, dspecs = stack.pop()
            try:
                entries = sorted(os.scandir(d), key=lambda e: e.name)
            except OSError as exc:
                errors.append((str(d), f"cannot read: {exc.strerror or exc}"))
                continue
            subdirs = []
            for e in entries:
                p = Path(e.path)
                try:
                    is_dir = e.is_dir(follow_symlinks=False)
                except OSError:
                    is_dir = False
                if is_dir:
                    if (walk_excludes.skips(p.absolute(), True) or (p / "pyvenv.cfg").exists()
                            or _ignored(p.absolute(), True, dspecs)):
                        continue
                    subdirs.append(p)
                elif (e.name.endswith(LINTED_SUFFIXES) and not walk_excludes.skips(p.absolute(), False)
                      and not _ignored(p.absolute(), False, dspecs)):
                    if e.is_symlink() and not p.exists():
                        errors.append((str(p), _link_error(p)))
                    elif (why := _not_regular(p)) is not None:
                        skipped.append((str(p), why))
                    else:
                        if e.is_symlink() and os.path.commonpath([realroot, os.path.realpath(p)]) != realroot:
                            outside.add(p)
                        add(p)
            for sd in reversed(subdirs):
                spec = _gitignore(sd)
                stack.append((sd, dspecs + [(sd.absolute(), spec)] if spec is not None else dspecs))
    return Discovered(files, errors, skipped, outside)


def _link_error(p: Path) -> str:
    try:
        p.stat()
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    return "cannot read: broken symbolic link"
