"""Shared test fixtures: paths, a CLI runner, the TIPS.md spec snapshot, and the isolation every
test runs under (the suite runs in parallel: ``python -m pytest -n auto``, see ``isolation``)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
# tests/lint_corpus holds the corpus manifest and labels only (the code is built outside the repository)
collect_ignore = ["lint_corpus"]


@dataclass(frozen=True)
class SpecRow:
    code: str
    slug: str
    faces: str
    seeds: str
    truth: str


def parse_tips_spec(path: Path = FIXTURES / "TIPS.md") -> list[SpecRow]:
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\|\s*(PIT\d{3})\s*\|\s*([a-z0-9-]+)\s*\|\s*([A-Z ]+)\s*\|[^|]*\|\s*([^|]*)\|\s*([^|]*)\|", line)
        if m:
            rows.append(SpecRow(m[1], m[2], m[3].replace(" ", ""), m[4].strip(), m[5].strip()))
    return rows


@pytest.fixture(scope="session")
def spec() -> list[SpecRow]:
    rows = parse_tips_spec()
    assert len(rows) >= 40, "the TIPS.md snapshot no longer parses"
    return rows


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, cwd: Path | None = None, timeout: float = 300, env: dict | None = None) -> Result:
    """Run ``python -m pitstop ARGS`` in a subprocess (the real entry point, real exit code)."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "pitstop", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=timeout, env=full_env)
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def warm_doctor():
    """Doctor reports from runs forked from one warm worker per test process, for tests whose
    subject is the diagnosis, not the CLI or a process's life (``tests/doctor_warm.py`` says
    what stays on the CLI). Set up before ``isolation`` takes its list of child processes, so the
    worker is not counted as a leak; closed at the end of the session."""
    from doctor_warm import WarmDoctor

    doctor = WarmDoctor()
    yield doctor
    doctor.close()


# -- isolation: each test owns the conditions it assumes ------------------------------------
#
# The suite runs under pytest-xdist (``-n auto``): tests of one worker run one after another in
# one process, two workers side by side. A test that needs something sets it up and restores it:
#
# - environment variables: ``monkeypatch.setenv`` (or pass ``env=`` to the subprocess);
# - working directory: ``monkeypatch.chdir`` / ``cwd=`` of the subprocess;
# - temporary files: ``tmp_path`` (unique per test and per worker), never a fixed name in /tmp;
# - a TCP port: the ``free_port`` fixture (never a fixed port: the other worker may hold it);
# - signal handlers: restore what ``signal.signal`` returned, in ``finally``;
# - a subprocess it will signal: start it through ``default_signals(argv)``, so SIGHUP/SIGTERM/
#   SIGINT/SIGQUIT are at their default action whatever the suite inherited (``nohup`` ignores
#   SIGHUP, a shell's ``&`` ignores SIGINT), and wait for (or kill) every process it started;
# - a test that must have the machine to itself (it cannot share the cores or a global resource
#   with another test): ``@pytest.mark.serial``: no other test runs on any worker meanwhile;
# - an expensive module-scoped fixture (a whole tune search, a doctor run shared by several
#   tests): list the module in ``ONE_WORKER_MODULES``, so all its tests run on one worker and the
#   fixture runs once, not once per worker (the CNN tune search ran on both, 88 s + 114 s).
#
# ``isolation`` (autouse) checks the first five after every test: a test that leaves a child
# process running, or changes the environment, the working directory or a signal handler, fails
# (teardown error) and the change is undone, so the next test of that worker starts clean.

#: signals whose handlers a test must restore (not SIGCHLD: torch's DataLoader sets its handler
#: once per process, chaining the previous one, by design)
_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP", "SIGINT", "SIGQUIT", "SIGUSR1", "SIGUSR2",
                                              "SIGALRM") if hasattr(signal, n))
#: helpers that live as long as the process that started them, by design (not a test's leak)
_LONG_LIVED = ("multiprocessing.resource_tracker", "multiprocessing.forkserver", "torch._inductor.compile_worker")
_LEAK_GRACE_S = 5.0
#: set by pytest itself for each phase of each test
_PYTEST_ENV = ("PYTEST_CURRENT_TEST",)
#: set once per process by a library, for the rest of the process, by design: torch.compile's
#: inductor shares its cache folder with its compile workers through the environment, and
#: ``import lightning`` sets two variables (lightning/fabric/__init__.py)
_LIBRARY_ENV_PREFIXES = ("TORCHINDUCTOR_", "_TORCHINDUCTOR_", "PYTORCH_NVML_BASED_CUDA_CHECK", "USE_LIBUV")

_DEFAULT_SIGNALS_BOOT = ("import os, signal, sys\n"
                         "for name in ('SIGHUP', 'SIGTERM', 'SIGINT', 'SIGQUIT'):\n"
                         "    if hasattr(signal, name):\n"
                         "        signal.signal(getattr(signal, name), signal.SIG_DFL)\n"
                         "os.execv(sys.argv[1], sys.argv[1:])\n")


def default_signals(argv: list[str]) -> list[str]:
    """``argv`` started with SIGHUP, SIGTERM, SIGINT and SIGQUIT at their default action (a
    tiny Python that resets them and ``exec``s ``argv``: same pid, no ``preexec_fn``), whatever
    this process inherited: under ``nohup`` SIGHUP arrives ignored, and an ignored signal stays
    ignored across ``exec``."""
    return [sys.executable, "-c", _DEFAULT_SIGNALS_BOOT, *argv]


def find_free_port() -> int:
    """A TCP port on the loopback address that nothing listens on now (the kernel's pick)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: test modules whose tests share an expensive module-scoped fixture: each runs whole on one
#: xdist worker (``tests/conftest.py::pytest_xdist_make_scheduler``), every other test goes to
#: whichever worker is free
ONE_WORKER_MODULES = frozenset(f"tests/{name}.py" for name in (
    "test_bench_runner", "test_compare", "test_doctor_compile", "test_doctor_examples", "test_doctor_fsdp",
    "test_doctor_hardware", "test_doctor_misc_problems", "test_engine_fsdp", "test_engine_resume", "test_frameworks_scripts", "test_lint_corpus", "test_trace_job",
    "test_tune_api", "test_tune_load", "test_tune_script", "test_tune_stagewise_script"))


#: OpenMP threads that wait at a barrier sleep instead of spinning (unless the caller chose a
#: policy): see :func:`pytest_configure`
_OMP_WAIT_POLICY = "PASSIVE"


def pytest_configure(config: pytest.Config) -> None:
    """Before any worker starts (the workers and every process a test starts inherit both):

    - ``OMP_WAIT_POLICY=PASSIVE`` unless already set. The suite runs more processes than cores
      (the xdist workers, each test's doctor, tune and torchrun children, each with one OpenMP
      thread per core), and by default an OpenMP thread that reaches a barrier first spins while
      the thread it waits for has no core: measured here (2-core AMD EPYC), three doctor runs of
      the bundled CNN side by side used 30.5-31.5 s of CPU in 17.2-17.5 s by default, 21.0-22.9 s
      in 12.0-13.1 s with the policy (the single-run cost is ~5% either way); four copies of
      ``test_doctor_planted_loops.py`` side by side (warm-worker runs): 102 CPU-s in 52 s by
      default, 81 CPU-s in 41 s with the policy, 80 in 41 with one thread. No test asserts a
      speed, and pitstop tune applies the same policy to its own runs when the machine is busy
      (:func:`pitstop.tune.script.passive_omp_reason`).
    - pitstop's sources and the test fixtures' modules compiled to bytecode once. Where
      ``PYTHONDONTWRITEBYTECODE`` is set (the development machines here set it), Python reads a
      ``.pyc`` but never writes one, so every doctor, tune and torchrun child would compile
      pitstop's modules again: measured here, about 0.6 s of CPU per doctor run of a tiny
      script, over the suite's few hundred child processes."""
    if hasattr(config, "workerinput"):
        return  # the controller did it
    os.environ.setdefault("OMP_WAIT_POLICY", _OMP_WAIT_POLICY)
    import compileall

    for folder in (ROOT / "src" / "pitstop", FIXTURES):
        compileall.compile_dir(str(folder), quiet=2)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: one worker per usable core, plus one. Many tests spend seconds waiting on a
    child (a planted hang until its timeout, a killed node's peers, a rank sleeping in a loader,
    a tune pair's other half): the extra worker runs other tests meanwhile instead of leaving a
    core idle. One extra, not two: every test starts processes of its own, and more runnable
    processes than that cost CPU per test (caches, switches). Measured on the 2-core AMD EPYC,
    whole suite in one checkout, one run each at c7c6e7d: 2 workers 520 s (878 CPU-s: cores
    idle while tests wait), 3 workers 460 s (861 CPU-s); 4 workers 492 s (927 CPU-s) at 683c864."""
    from pitstop.machine import usable_cores

    return usable_cores() + 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest first: the one-worker modules, then the other ``slow`` tests, then the rest (a
    stable sort, so each module keeps its order). xdist hands tests out in this order, so the
    long ones start early and the quick ones fill the end instead of one worker idling while the
    other finishes a 2-minute tune search."""
    def rank(item: pytest.Item) -> int:
        if item.nodeid.split("::", 1)[0] in ONE_WORKER_MODULES:
            return 0
        return 1 if item.get_closest_marker("slow") is not None else 2
    items.sort(key=rank)


try:
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pytest without pytest-xdist: one process, nothing to schedule
    LoadScopeScheduling = None

if LoadScopeScheduling is not None:
    class _OneWorkerModules(LoadScopeScheduling):
        """xdist's scope scheduling where a scope is a whole module for ``ONE_WORKER_MODULES`` and
        a single test otherwise. (``--dist loadgroup`` with ``xdist_group`` marks does this job,
        but with pytest 9.2 its marks are silently ignored: pytest-dev/pytest-xdist#1386.)"""

        def _split_scope(self, nodeid: str) -> str:  # the hook LoadScopeScheduling's subclasses override
            module = nodeid.split("::", 1)[0]
            return module if module in ONE_WORKER_MODULES else nodeid

    def pytest_xdist_make_scheduler(config: pytest.Config, log):
        """``-n auto``'s default ``--dist load``, with the modules above kept on one worker."""
        if config.getvalue("dist") != "load":
            return None  # an explicit --dist mode is left as asked
        return _OneWorkerModules(config, log)


@pytest.fixture
def free_port() -> int:
    """A free loopback TCP port for this test (never a fixed one: another worker may hold it)."""
    return find_free_port()


def _children(pid: int) -> list[int]:
    """The live (non-zombie) processes below ``pid`` (Linux ``/proc``; empty elsewhere)."""
    out, todo, seen = [], [pid], {pid}
    while todo:
        p = todo.pop()
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{p}/task/{tid}/children", encoding="ascii") as f:
                    kids = [int(x) for x in f.read().split()]
            except (OSError, ValueError):
                continue
            for k in kids:
                if k not in seen:
                    seen.add(k)
                    todo.append(k)
                    out.append(k)
    return [p for p in out if _state(p) not in ("Z", "X", "")]


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        return data[data.rindex(b")") + 2:][:1].decode()
    except (OSError, ValueError):
        return ""


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _leaked_children(before: set[int]) -> dict[int, str]:
    """Processes below this one that were not there before the test and are still alive after a
    short grace (a process being killed needs a moment), with their command lines."""
    deadline = time.monotonic() + _LEAK_GRACE_S
    while True:
        new = {p: _cmdline(p) for p in _children(os.getpid()) if p not in before}
        new = {p: c for p, c in new.items() if not any(k in c for k in _LONG_LIVED)}
        if not new or time.monotonic() > deadline:
            return new
        time.sleep(0.1)


def _serial_lock_dir(config: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    """The folder every xdist worker of this run shares (None when not under xdist)."""
    if not hasattr(config, "workerinput"):
        return None
    return tmp_path_factory.getbasetemp().parent


@contextlib.contextmanager
def _turn(folder: Path | None, alone: bool):
    """Readers-writer lock across xdist workers: a normal test holds it shared, a ``serial`` one
    exclusively; a turnstile lets a waiting serial test in before the next normal ones."""
    if folder is None:
        yield
        return
    import fcntl

    with open(folder / "serial.turnstile", "a") as gate, open(folder / "serial.lock", "a") as lock:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _environ() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _PYTEST_ENV and not k.startswith(_LIBRARY_ENV_PREFIXES)}


@pytest.fixture(autouse=True)
def isolation(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Fail a test that leaks a child process, an environment change, a working directory or a
    signal handler (and undo the leak); run ``serial`` tests alone across xdist workers."""
    alone = request.node.get_closest_marker("serial") is not None
    with _turn(_serial_lock_dir(request.config, tmp_path_factory), alone):
        env, cwd = _environ(), os.getcwd()
        handlers = {sig: signal.getsignal(sig) for sig in _SIGNALS}
        before = set(_children(os.getpid()))
        yield
        problems = []
        leaked = _leaked_children(before)
        for pid in leaked:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)  # read from /proc a moment ago as our descendant
        if leaked:
            problems.append("left child processes running (killed now): "
                            + "; ".join(f"{p}: {c[:200]}" for p, c in leaked.items()))
        now = _environ()
        if now != env:
            changed = sorted(k for k in set(env) | set(now) if env.get(k) != now.get(k))
            for k in changed:
                if k in env:
                    os.environ[k] = env[k]
                else:
                    del os.environ[k]
            problems.append(f"changed environment variables (restored now): {', '.join(changed)}")
        if os.getcwd() != cwd:
            problems.append(f"changed the working directory to {os.getcwd()} (restored now)")
            os.chdir(cwd)
        moved = [sig for sig, h in handlers.items() if signal.getsignal(sig) != h]
        for sig in moved:
            signal.signal(sig, handlers[sig])
        if moved:
            problems.append("changed signal handlers (restored now): "
                            + ", ".join(signal.Signals(s).name for s in moved))
        if problems:
            pytest.fail(f"{request.node.nodeid} does not clean up after itself: " + " | ".join(problems),
                        pytrace=False)
