"""Lint configuration: ``[tool.pitstop.lint]`` in pyproject.toml plus command-line options,
resolved into one frozen :class:`LintConfig` at the CLI edge.

Selection works like ruff's: selectors are codes or prefixes (``PIT2``, ``PIT20``, ``ALL``);
for each rule the most specific matching selector of ``select``/``extend-select``/``ignore``
decides (a tie goes to ignore). Unknown selectors are errors, never silently dropped.
"""

from __future__ import annotations

import fnmatch
import sys
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["LintConfig", "ConfigError", "load_pyproject", "resolve_selection", "find_pyproject"]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class LintConfig:
    select: tuple[str, ...] | None = None  # None: every rule
    extend_select: tuple[str, ...] = ()
    ignore: tuple[str, ...] = ()
    per_file_ignores: tuple[tuple[str, tuple[str, ...]], ...] = ()
    root: Path = field(default_factory=Path.cwd)  # per-file-ignores patterns are relative to it
    max_file_size: int | None = None
    exclude: tuple[str, ...] | None = None  # gitignore-style, relative to root; None: discovery's defaults
    extend_exclude: tuple[str, ...] = ()  # added to exclude (or to the defaults)
    source: str = ""  # the pyproject.toml it came from, "" for defaults
    preview: bool = False  # run the rules and sub-patterns that are not on by default (pitstop.lint.defaults)


def _short(value: object) -> str:
    try:
        text = repr(value)
    except RecursionError:
        return "(nested too deeply)"
    return text if len(text) <= 40 else text[:37] + "..."


def _codes(value, where: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: expected a list of rule codes, got {_short(value)}")
    return tuple(v.strip().upper() for v in value if v.strip())


def _patterns(value, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of gitignore-style patterns, got {_short(value)}")
    return tuple(v for v in value if v.strip())


def find_pyproject(start: Path) -> Path | None:
    for d in (start.resolve(), *start.resolve().parents):
        p = d / "pyproject.toml"
        if p.is_file():
            return p
    return None


def load_pyproject(path: Path) -> LintConfig:
    """Read ``[tool.pitstop.lint]`` of ``path`` (defaults when the table is absent)."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: cannot read: not UTF-8 (byte 0x{exc.object[exc.start]:02x} at offset "
                          f"{exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: cannot read: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: cannot read: nested too deeply") from None
    table = data
    for depth, key in enumerate(("tool", "pitstop", "lint")):
        table = table.get(key, {})
        if not isinstance(table, dict):
            name = ".".join(("tool", "pitstop", "lint")[:depth + 1])
            raise ConfigError(f"{path}: `{name}` must be a table, got {type(table).__name__} {_short(table)}")
    known = {"select", "extend-select", "ignore", "per-file-ignores", "max-file-size", "exclude", "extend-exclude",
             "preview"}
    unknown = sorted(set(table) - known)
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) in [tool.pitstop.lint]: {', '.join(unknown)}; "
                          f"known: {', '.join(sorted(known))}")
    where = f"{path}: [tool.pitstop.lint]"
    pfi = table.get("per-file-ignores", {})
    if not isinstance(pfi, dict):
        raise ConfigError(f"{where} per-file-ignores must be a table of pattern = [codes]")
    preview = table.get("preview", False)
    if not isinstance(preview, bool):
        raise ConfigError(f"{where} preview must be true or false, got {_short(preview)}")
    size = table.get("max-file-size")
    if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 0):
        raise ConfigError(f"{where} max-file-size must be a number of bytes (0: no limit), got {_short(size)}")
    return LintConfig(
        select=_codes(table["select"], f"{where} select") if "select" in table else None,
        extend_select=_codes(table.get("extend-select", []), f"{where} extend-select"),
        ignore=_codes(table.get("ignore", []), f"{where} ignore"),
        per_file_ignores=tuple((pat, _codes(codes, f"{where} per-file-ignores[{pat!r}]")) for pat, codes in pfi.items()),
        root=path.parent.resolve(),
        max_file_size=size,
        exclude=_patterns(table["exclude"], f"{where} exclude") if "exclude" in table else None,
        extend_exclude=_patterns(table.get("extend-exclude", []), f"{where} extend-exclude"),
        source=str(path),
        preview=preview,
    )


def _check(selectors, known: list[str], where: str) -> None:
    for s in selectors:
        if s != "ALL" and not any(code.startswith(s) for code in known):
            hint = ""
            if s.startswith("PIT") and len(s) == 6:
                hint = " (no lint rule has this code: `pitstop tips --face L` lists them)"
            raise ConfigError(f"{where}: unknown rule selector {s!r}{hint}")


def _specificity(selector: str) -> int:
    return 0 if selector == "ALL" else len(selector)


def resolve_selection(known: list[str], config: LintConfig, *, select=None, extend_select=(), ignore=()) -> set[str]:
    """Enabled codes among ``known``: command-line ``select`` replaces the config's; the
    ``extend_select`` and ``ignore`` lists of both add up. Raises ConfigError on unknown codes."""
    where = config.source or "configuration"
    _check(config.select or (), known, where)
    _check(config.extend_select, known, where)
    _check(config.ignore, known, where)
    for _, codes in config.per_file_ignores:
        _check(codes, known, where + " per-file-ignores")
    _check(select or (), known, "--select")
    _check(extend_select, known, "--extend-select")
    _check(ignore, known, "--ignore")
    chosen = tuple(select) if select else (config.select if config.select is not None else ("ALL",))
    on = (*chosen, *config.extend_select, *extend_select)
    off = (*config.ignore, *ignore)
    enabled = set()
    for code in known:
        best_on = max((_specificity(s) for s in on if s == "ALL" or code.startswith(s)), default=-1)
        best_off = max((_specificity(s) for s in off if s == "ALL" or code.startswith(s)), default=-1)
        if best_on > best_off:
            enabled.add(code)
    return enabled


def ignored_for(path: Path, config: LintConfig, known: list[str]) -> set[str]:
    """Codes that ``per-file-ignores`` switches off for ``path``."""
    if not config.per_file_ignores:
        return set()
    try:
        rel = path.resolve().relative_to(config.root).as_posix()
    except ValueError:
        rel = path.as_posix()
    out: set[str] = set()
    for pattern, codes in config.per_file_ignores:
        target = rel if "/" in pattern else path.name
        if fnmatch.fnmatchcase(target, pattern) or fnmatch.fnmatchcase(rel, pattern):
            out |= {c for c in known for s in codes if s == "ALL" or c.startswith(s)}
    return out
