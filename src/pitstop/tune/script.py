"""Script mode: every run is the user's unmodified script in a fresh child process.

Built on the doctor's runner (:func:`pitstop.doctor.run_script`): the child bootstrap seeds
python/numpy/torch the same way for every run, installs the light instrumentation (optimizer
step hooks for step boundaries and wall times, the ``backward`` wrapper for the loss), runs
the setup callables, then the script as ``__main__``, and stops it after
``warmup + steps`` optimizer steps. A trial's knobs are the setups: one
``pitstop.tune.child:apply_knob`` call per knob, in the knobs' ``order``.

Before the search, one *survey* run in the doctor's full mode (a couple of steps, no probes)
observes the training, so knobs can say whether they apply. The script's own output is
discarded during tuning (it would repeat for every run); a failing run's traceback is kept.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import Any

from pitstop.tune.context import context_from_observations
from pitstop.tune.knob import Context, Knob, Setting
from pitstop.tune.run import Run, SetupSplit
from pitstop.tune.options import TuneError

__all__ = ["SURVEY_STEPS", "ScriptBackend", "run_from_result", "TuneInputError", "passive_omp_reason", "setup_split"]

_OOM_MARKERS = ("OutOfMemoryError", "out of memory", "MemoryError", "Cannot allocate memory")


class TuneInputError(ValueError):
    """The target cannot run at all: missing script or module, syntax error."""


def _doctor():
    from pitstop.doctor.run import runner, spec

    return runner, spec


def run_from_result(result: Any, steps: int) -> Run:
    """A :class:`Run` from the doctor's :class:`RunResult`."""
    recs = [s for s in result.steps if s.kind in ("warmup", "observed")]
    observed = [s for s in recs if s.kind == "observed"]
    # the losses of the training steps in the order they ran: a full-mode run's bare steps (between
    # its last observed ones) trained too, so the i-th loss is the i-th step's in any run mode
    trained = [s for s in result.steps if s.kind in ("warmup", "observed", "bare")][:len(recs)]
    run = Run(status="ok", step_times=[s.wall for s in observed],
              warmup_times=[s.wall for s in recs if s.kind == "warmup"], losses=[s.loss for s in trained],
              peak_memory=result.peak_memory, elapsed=result.elapsed, message=result.message,
              traceback=result.traceback,
              cpu_times=[None if s.cpu is None else s.cpu + (s.cpu_children or 0.0) for s in observed],
              run_delays=[s.run_delay for s in observed], actives=[s.main_active for s in observed],
              gpu_times=[s.gpu for s in observed])
    run.warmup_s = sum(run.warmup_times)
    run.compile = result.compile
    run.batch_size = next((s.batch_size for s in recs if s.batch_size), None)
    status = result.status
    text = f"{result.message}\n{result.traceback or ''}"
    if status == "stopped":
        return run
    if status in ("finished", "exited") and run.step_times and not (status == "exited" and result.exit_code):
        run.message = f"{result.message} ({len(run.step_times)} of {steps} steps measured)"
        return run
    if status == "error":
        run.status = "oom" if any(m in text for m in _OOM_MARKERS) else "error"
    elif status in ("finished", "exited"):
        run.status = "error" if status == "exited" and result.exit_code else "too_few_steps"
    elif status == "crashed" and result.returncode == -9:
        run.status = "crashed"
        run.message = f"{result.message} (SIGKILL: the system may have run out of memory)"
    else:
        run.status = status if status in ("timeout", "setup_error", "crashed") else "error"
    return run


def setup_split(marks: dict[str, float], stamp: float, run: Run) -> SetupSplit | None:
    """Where ``run``'s set-up went, from the child's ``marks`` (:func:`pitstop.tune.child.mark_setup`)
    and ``stamp``, the parent's ``time.monotonic()`` when it asked for the run (None: unmarked)."""
    script, forward = marks.get("script"), marks.get("forward")
    if script is None or forward is None:
        return None
    imports = min(marks.get("imports", 0.0), max(0.0, forward - script))
    compile_s = run.compile.compile_s if run.compile is not None else 0.0
    first = None
    if marks.get("step") is not None:
        first = max(0.0, marks["step"] - forward - compile_s - (run.median_step or 0.0))
    return SetupSplit(start=max(0.0, script - stamp), imports=imports, build=max(0.0, forward - script - imports),
                      first_step=first, compile=compile_s)


def passive_omp_reason() -> str | None:
    """Why runs should wait passively at OpenMP barriers, or None. On a busy machine the
    OpenMP threads of a step spin at every barrier while a peer waits for a core: the spinning
    steals the cores from the work and inflates CPU time (measured here under load ~11 on a
    2-thread conv step: bf16 vs fp32 0.82x on CPU time with spinning, 1.38x with
    ``OMP_WAIT_POLICY=PASSIVE``, 1.81x single-threaded; with two spinning processes started
    just before the search, which the 1-minute load average did not show yet, bf16 came out
    0.73x "slower"). Busy: a 1-minute load average above the usable cores, or other tasks
    runnable right now on at least half of them."""
    from pitstop.machine import machine_load, runnable_others, usable_cores

    load, cores = machine_load(), usable_cores()
    if load is not None and load[0] > load[1]:
        why = f"load average {load[0]:.1f} on {load[1]} cores"
    else:
        others = runnable_others()
        if others is None or others < max(1.0, cores / 2):
            return None
        why = f"{others:g} other tasks runnable on {cores} cores"
    return (f"the machine was busy at the start ({why}): every run, baseline included, waits passively at "
            "OpenMP barriers (OMP_WAIT_POLICY=PASSIVE) so that threads waiting for a core do not spin")


#: observed steps of the survey: its breakdown gives the phase shares knobs are pruned by (two
#: steps put the CNN's SGD step at 7% of the step and its DataLoader waits at 15%; five, as a
#: 10-step doctor run does: 0.5% and 24%)
SURVEY_STEPS = 5


class ScriptBackend:
    mode = "script"

    def __init__(self, script: str | None = None, module: str | None = None, args: Sequence[str] = (), *,
                 seed: int = 0, cwd: str | None = None, survey_steps: int = SURVEY_STEPS, timeout: float = 300.0,
                 python: str = sys.executable, threads: int | None = None, warm: bool = True,
                 passive_omp: bool | None = None, worker: Any = None) -> None:
        """``worker``: a :class:`pitstop.tune.warm.WarmRunner` the caller owns, to fork every run
        from instead of starting one for this search (several searches in one process then import
        torch once); it is left open after the search, and its environment, set when it started,
        is the runs' (``OMP_WAIT_POLICY`` included)."""
        runner, spec = _doctor()
        if module is None and script is None:
            raise TuneInputError("give a script path or a module name")
        self._spec = dict(script=script, module=module, args=tuple(args), seed=seed, cwd=cwd, python=python)
        try:
            runner.check_target(spec.RunSpec(**self._spec))
        except (runner.ScriptNotFoundError, runner.ScriptSyntaxError) as exc:
            raise TuneInputError(str(exc)) from None
        self.target = script if script is not None else f"-m {module}"
        self.survey_steps, self.timeout, self.threads = survey_steps, timeout, threads
        self.ctx: Context | None = None
        self.survey: Any = None
        self._marks: str | None = None  # folder of the runs' set-up marks (pitstop.tune.child.mark_setup)
        self._count = 0
        self.worker: Any = None
        self.worker_kind = "a fresh python process per run"
        self.own_worker = worker is None
        #: why runs wait passively at OpenMP barriers (None: the library's default)
        self.passive_omp: str | None = None
        if worker is not None:  # its environment was fixed when it started: the runs' policy is its
            worker.start()
            self.worker = worker
            self.worker_kind = f"{worker.kind}, shared with other searches"
            if (worker.omp_wait_policy or "").upper() == "PASSIVE":
                self.passive_omp = ("every run waits passively at OpenMP barriers (OMP_WAIT_POLICY=PASSIVE in the "
                                    "shared warm worker's environment)")
        else:
            self.passive_omp = passive_omp_reason() if passive_omp is None else (
                "asked for" if passive_omp else None)
        if worker is None and warm and python == sys.executable:
            from pitstop.tune.warm import WarmRunner

            if WarmRunner.available():
                env = {"OMP_WAIT_POLICY": "PASSIVE"} if self.passive_omp else None
                self.worker = WarmRunner(python=python, cwd=cwd, env=env)
                self.worker_kind = WarmRunner.kind
        if self.worker is None:
            self.passive_omp = None  # fresh processes run with the library's default

    def _run_spec(self, rs: Any) -> tuple[Any, list[str]]:
        """Run ``rs`` in the warm worker (a fresh process when it cannot be used)."""
        runner, _ = _doctor()
        if self.worker is not None:
            try:
                return self.worker.run(rs), list(self.worker.last_stderr)
            except OSError as exc:
                if self.own_worker:
                    self.worker.close()
                self.worker = None
                self.worker_kind = f"a fresh python process per run (the warm worker failed: {exc})"
        return runner.run_script(rs, check=False), []

    def close(self) -> None:
        if self.worker is not None and self.own_worker:
            self.worker.close()
        self.worker = None
        if self._marks is not None:
            import shutil

            shutil.rmtree(self._marks, ignore_errors=True)
            self._marks = None

    def context(self) -> Context:
        runner, spec = _doctor()
        rs = spec.RunSpec(**self._spec, steps=self.survey_steps, warmup=1, timeout=self.timeout, mode="full",
                          probes=False, stdout="devnull", setups=self._base_setups())
        result, _ = self._run_spec(rs)
        self.survey = result
        if result.status not in ("stopped", "finished", "exited") or not result.observations:
            raise TuneError(f"the script could not be surveyed ({result.status}): {result.message}"
                            + (f"\n{result.traceback}" if result.traceback else ""))
        if not result.observed:
            raise TuneError(f"the script ran no optimizer step ({result.message}): nothing to tune")
        self.ctx = context_from_observations(result.observations)
        return self.ctx

    def survey_run(self) -> Run | None:
        """The survey as a :class:`Run` (what a run of this script costs: set-up, steps), or
        None before the survey. Its elapsed runs from the child's instrumentation to its last
        step: the script's set-up and every step (the fork before and the full-mode report after
        left out, the survey's own cost, not a run's)."""
        if self.survey is None:
            return None
        run = run_from_result(self.survey, self.survey_steps)
        run.elapsed = sum(run.warmup_times) + sum(run.step_times)
        return run

    def _base_setups(self) -> tuple[Any, ...]:
        from pitstop.tune.child import THREADS_TARGET

        _, spec = _doctor()
        return (spec.Setup(THREADS_TARGET, {"n": self.threads}),) if self.threads else ()

    def setups(self, settings: Sequence[Setting], knobs: Sequence[Knob]) -> tuple[Any, ...]:
        from pitstop.tune.child import TARGET, setup_kwargs

        _, spec = _doctor()
        index = {(k.tip, k.name): k for k in knobs}
        pairs = sorted(((index[(s.code, s.knob)], s.value) for s in settings), key=lambda kv: (kv[0].order, kv[0].tip))
        ctx = self.ctx or Context()
        return self._base_setups() + tuple(spec.Setup(TARGET, setup_kwargs(k, v, ctx)) for k, v in pairs)

    def profile(self, settings: tuple[Setting, ...], knobs: Sequence[Knob], *, steps: int = 1, warmup: int = 2,
                timeout: float = 300.0) -> Any:
        """One short run in the doctor's full mode (no probes) with ``settings``: the doctor's
        :class:`RunResult`, whose observations hold the profiled memory step (``memory_profile``;
        the memory-budget search, :mod:`pitstop.tune.memfit.script`)."""
        _, spec = _doctor()
        rs = spec.RunSpec(**self._spec, steps=steps, warmup=warmup, timeout=timeout, setups=self.setups(settings, knobs),
                          mode="full", probes=False, stdout="devnull")
        return self._run_spec(rs)[0]

    def _marks_path(self) -> str:
        import os
        import tempfile

        if self._marks is None:
            self._marks = tempfile.mkdtemp(prefix=f"pitstop-doctor-{os.getpid()}-marks-")
        self._count += 1
        return os.path.join(self._marks, f"run{self._count}.json")

    def run(self, settings: tuple[Setting, ...], knobs: Sequence[Knob], *, round: int = 0, timeout: float = 300.0,
            steps: int = 10, warmup: int = 3) -> Run:
        from pitstop.tune.child import MARKS_TARGET, read_marks

        runner, spec = _doctor()
        marks = self._marks_path()
        rs = spec.RunSpec(**self._spec, steps=steps, warmup=warmup, timeout=timeout,
                          setups=self.setups(settings, knobs) + (spec.Setup(MARKS_TARGET, {"path": marks}),),
                          mode="light", probes=False, stdout="devnull")
        started, stamp = time.perf_counter(), time.monotonic()
        result, stderr = self._run_spec(rs)
        run = run_from_result(result, steps)
        run.elapsed = time.perf_counter() - started  # with the child's start-up: what the budget pays
        if run.warmup_times:  # the first step's wall also holds the script's own set-up before it
            first = run.warmup_times[0] - (run.median_step or 0.0)
            run.warmup_s = max(0.0, run.warmup_s - first)
        run.setup_s = max(0.0, run.elapsed - (run.warmup_s or 0.0) - sum(run.step_times))
        run.split = setup_split(read_marks(marks), stamp, run)
        run.stderr_lines = stderr
        if run.batch_size is None and self.ctx is not None:
            run.batch_size = self.ctx.batch_size
        run.round = round
        return run
