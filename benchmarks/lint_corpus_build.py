"""Build the lint corpus outside the repository, from the pinned commits of tests/lint_corpus/MANIFEST.toml.

The repository holds no third-party code: the manifest names every file of the corpus by
repository, commit, path and sha256, and this script materializes those files into a cache
folder (checking every hash), where tests/test_lint_corpus.py, benchmarks/lint_precision.py,
benchmarks/doctor_real_scripts.py and tests/test_doctor_real_scripts.py read them.

    python benchmarks/lint_corpus_build.py                    # git over the network (github.com)
    python benchmarks/lint_corpus_build.py --mirror DIR       # local mirrors: DIR/<owner>+<name>/repo
    python benchmarks/lint_corpus_build.py --if-possible      # CI: build when mirrors or network allow, else skip quietly
    python benchmarks/lint_corpus_build.py --check-repo       # no file of this repository is a corpus file

The cache folder is ``--out DIR``, else ``$PITSTOP_LINT_CORPUS``, else ``~/.cache/pitstop/lint-corpus``;
``<cache>/<name>/<path>`` holds each repository's files and its LICENSE. ``--mirror`` defaults to
``$PITSTOP_LINT_MIRROR`` when set. A build is complete when ``<cache>/.manifest-sha256`` matches the
manifest (written last, after every hash checked).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
MANIFEST = ROOT / "tests" / "lint_corpus" / "MANIFEST.toml"
STAMP = ".manifest-sha256"
BUILD_HINT = "python benchmarks/lint_corpus_build.py [--mirror DIR]"


class BuildError(RuntimeError):
    pass


def corpus_dir(explicit: str | Path | None = None) -> Path:
    """Where the corpus lives: ``explicit``, else $PITSTOP_LINT_CORPUS, else ~/.cache/pitstop/lint-corpus."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("PITSTOP_LINT_CORPUS")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "pitstop" / "lint-corpus"


def load_manifest(path: Path = MANIFEST) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _manifest_digest(path: Path = MANIFEST) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def is_built(out: Path | None = None) -> bool:
    stamp = corpus_dir(out) / STAMP
    return stamp.is_file() and stamp.read_text(encoding="utf-8").strip() == _manifest_digest()


def skip_reason(out: Path | None = None) -> str:
    """The one-line reason tests give when the corpus is absent."""
    return f"lint corpus not built at {corpus_dir(out)}: run `{BUILD_HINT}`"


def lint_repos(manifest: dict | None = None) -> list[str]:
    """Names of the repositories the lint corpus tests lint (``lint = false`` ones serve the doctor only)."""
    return [r["name"] for r in (manifest or load_manifest())["repo"] if r.get("lint", True)]


def _git(gitdir: Path, *args: str) -> bytes:
    proc = subprocess.run(["git", f"--git-dir={gitdir}", *args], capture_output=True)
    if proc.returncode != 0:
        raise BuildError(f"git {' '.join(args[:2])} in {gitdir}: {proc.stderr.decode(errors='replace').strip()[:300]}")
    return proc.stdout


def _gitdir(repo: dict, mirror: Path | None, tmp: Path) -> Path:
    if mirror is not None:
        gitdir = mirror / repo["github"].replace("/", "+") / "repo"
        if not gitdir.is_dir():
            raise BuildError(f"no mirror of {repo['github']} at {gitdir}")
        return gitdir
    dest = tmp / repo["name"]
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0"}
    for cmd in (["git", "init", "-q", "--bare", str(dest)],
                ["git", f"--git-dir={dest}", "-c", "http.lowSpeedLimit=1000", "-c", "http.lowSpeedTime=30",
                 "fetch", "-q", "--depth", "1",
                 f"https://github.com/{repo['github']}", repo["commit"]]):
        proc = subprocess.run(cmd, capture_output=True, env=env, timeout=900)
        if proc.returncode != 0:
            raise BuildError(f"cannot fetch {repo['github']}@{repo['commit'][:12]}: "
                             f"{proc.stderr.decode(errors='replace').strip()[:300]}")
    return dest


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build(out: Path, mirror: Path | None = None, manifest: dict | None = None, log=print) -> int:
    """Materialize every manifest file under ``out``; raise BuildError on a missing file or a wrong hash."""
    manifest = manifest or load_manifest()
    out.mkdir(parents=True, exist_ok=True)
    (out / STAMP).unlink(missing_ok=True)
    total = 0
    with tempfile.TemporaryDirectory() as tmp:
        for repo in manifest["repo"]:
            gitdir = _gitdir(repo, mirror, Path(tmp))
            names = _git(gitdir, "ls-tree", "--name-only", repo["commit"]).decode().splitlines()
            licence = [n for n in names if n.upper().startswith(("LICENSE", "LICENCE", "COPYING"))][:1]
            dest = out / repo["name"]
            shutil.rmtree(dest, ignore_errors=True)
            for path, digest in repo["files"].items():
                data = _git(gitdir, "show", f"{repo['commit']}:{path}")
                if _sha(data) != digest:
                    raise BuildError(f"{repo['name']}/{path}: sha256 {_sha(data)[:16]}... != manifest {digest[:16]}...")
                (dest / path).parent.mkdir(parents=True, exist_ok=True)
                (dest / path).write_bytes(data)
            for name in licence:
                (dest / "LICENSE").write_bytes(_git(gitdir, "show", f"{repo['commit']}:{name}"))
            total += len(repo["files"])
            log(f"{repo['name']}: {len(repo['files'])} files ({repo['github']}@{repo['commit'][:12]})")
    (out / STAMP).write_text(_manifest_digest() + "\n", encoding="utf-8")
    return total


def verify(out: Path, manifest: dict | None = None) -> list[str]:
    """Files of a built corpus that are missing or differ from the manifest."""
    bad = []
    for repo in (manifest or load_manifest())["repo"]:
        for path, digest in repo["files"].items():
            f = out / repo["name"] / path
            if not f.is_file() or _sha(f.read_bytes()) != digest:
                bad.append(f"{repo['name']}/{path}")
    return bad


def copies_in_repository(manifest: dict | None = None) -> list[str]:
    """Tracked files of this repository whose bytes equal a corpus file (there must be none)."""
    empty = _sha(b"")  # an empty file (an empty __init__.py) copies nothing
    hashes = {d: f"{r['github']}@{r['commit'][:12]}:{p}" for r in (manifest or load_manifest())["repo"]
              for p, d in r["files"].items() if d != empty}
    try:
        proc = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True)
    except OSError:
        proc = None
    if proc is not None and proc.returncode == 0:
        names = [n for n in proc.stdout.decode().split("\0") if n]
    else:  # not a git checkout: every file but virtual environments and caches
        skip = {".git", ".venv", "venv", "__pycache__", ".pytest_cache", ".ruff_cache", "node_modules"}
        names = [f.relative_to(ROOT).as_posix() for f in ROOT.rglob("*")
                 if f.is_file() and not skip & set(f.relative_to(ROOT).parts)]
    found = []
    for name in names:
        f = ROOT / name
        if f.is_file() and _sha(f.read_bytes()) in hashes:
            found.append(f"{name} == {hashes[_sha(f.read_bytes())]}")
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, help="cache folder (default $PITSTOP_LINT_CORPUS or ~/.cache/pitstop/lint-corpus)")
    p.add_argument("--mirror", type=Path, default=os.environ.get("PITSTOP_LINT_MIRROR") or None,
                   help="folder of <owner>+<name>/repo git directories (default $PITSTOP_LINT_MIRROR; else the network)")
    p.add_argument("--if-possible", action="store_true",
                   help="when the corpus cannot be built (no mirror, no network), say so in one line and exit 0")
    p.add_argument("--force", action="store_true", help="rebuild even when the cache is complete")
    p.add_argument("--verify", action="store_true", help="re-check every hash of the built corpus")
    p.add_argument("--check-repo", action="store_true", help="fail when a tracked file of this repository is a corpus file")
    args = p.parse_args(argv)
    out = corpus_dir(args.out)
    if args.check_repo:
        found = copies_in_repository()
        print("\n".join(found) if found else "no corpus file is tracked in this repository")
        return 1 if found else 0
    if args.verify:
        bad = verify(out)
        print(f"{len(bad)} file(s) missing or changed" + "".join(f"\n  {b}" for b in bad) if bad else f"{out}: every hash matches")
        return 1 if bad else 0
    if is_built(out) and not args.force:
        print(f"lint corpus already built at {out}")
        return 0
    try:
        n = build(out, args.mirror)
    except (BuildError, OSError, subprocess.SubprocessError) as e:
        if args.if_possible:
            print(f"lint corpus not built ({str(e).splitlines()[0][:200]}); the tests that need it skip")
            return 0
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"lint corpus: {n} files at {out}, every sha256 checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
