"""pitstop doctor: run an unmodified training script under instrumentation (face D).

Layout (each module small; this package imports nothing heavy until a name is used):

- ``spec``: :class:`RunSpec`, :class:`Setup`, :class:`RunResult`, :class:`StepRecord` (torch-free)
- ``runner``: :func:`run_script` -- the parent side (torch-free)
- ``child``: the bootstrap run as ``python -m pitstop.doctor.run.child``
- ``instrument``, ``syncs``, ``memory``, ``profiled``, ``probes``, ``collect``: measurements
- ``observations``: :class:`Observations`, the plain data the checks read (torch-free)
- ``check``: :class:`Check` (base of every tip's doctor face), :class:`Finding`, :class:`Thresholds`
- ``probe``: :class:`Probe` (base of a tip's doctor probe, same face, torch-free), :class:`ProbeSkip`;
  ``probes`` runs every registered probe in the child
- ``diagnosis``: :func:`diagnose` -- run the registered checks, rank findings
- ``api``: :func:`doctor` -- the same instrumentation around a step function

Runner API (what ``pitstop tune`` builds on)
--------------------------------------------
::

    from pitstop.doctor import RunSpec, Setup, run_script

    spec = RunSpec(
        script="train.py",            # or module="pkg.train" (python -m); exactly one
        args=("--lr", "3e-4"),        # the script's own arguments
        steps=20, warmup=3,           # observed optimizer steps after warmup
        timeout=600,                  # seconds; the child is killed past it (+ grace)
        setups=(Setup("pitstop.tune.child:set_threads", {"n": 2}),),
        seed=0,                       # python/numpy/torch seeded in the child (None: off)
        mode="light",                 # "light": step wall times + losses only; "full": everything
        probes=False,                 # full mode only: the hardware probes (seconds each)
        stdout="devnull",             # "inherit" | "stderr" | "devnull" | a file path
    )
    result = run_script(spec)         # RunResult; never raises for the script's own failures

- (a) ``setups``: importable ``"module:function"`` callables with JSON-able kwargs, run in
  the child in order *after* the instrumentation is installed and seeding is done, and
  *before* the script starts (patch ``DataLoader.__init__`` defaults, wrap a forward in
  autocast, force ``fused=True`` ...). A setup that raises ends the run with status
  ``setup_error`` and its traceback.
- (b) ``seed`` (default 0): ``pitstop.seed_everything(seed)`` in the child before setups.
- (c) ``result.steps``: one :class:`StepRecord` per optimizer step of the primary
  optimizer (the first that stepped), warmup included (``kind``: ``warmup``,
  ``observed``, ``profiled``, ``traced``), each with ``wall`` seconds and ``loss`` -- the sum of
  the tensors ``.backward()`` was called on in that step (unscaled when a ``GradScaler``
  scaled them), kept detached on the device and read once at the end: no per-step sync.
  ``result.observed``, ``result.steps_per_s`` (observed steps / their total wall time),
  ``result.losses`` and ``result.peak_memory`` (CUDA max allocated, else peak RSS) are there.
- (d) ``mode="light"``: only the optimizer step hooks and the ``backward`` / ``GradScaler.scale``
  wrappers are installed (no module hooks, no sync patches, no saved-tensor hooks, no
  profiled step), so A/B trials are not slowed by the instrumentation; the compile watch
  (``torch.compile`` / ``Module.compile`` wrapped to arm it, nothing else until the script
  compiles) is installed in both modes, and ``result.compile`` is what dynamo reported
  (:class:`~pitstop.doctor.analysis.compile_records.CompileRecord`, ``None`` when nothing compiled).
- (e) :class:`RunResult` is a dataclass; ``to_dict()`` / ``from_dict()`` round-trip JSON.
  ``status`` is one of ``stopped`` (normal: the doctor stopped the script after the planned
  steps), ``finished``, ``exited`` (``exit_code``), ``error`` (``traceback``), ``timeout``,
  ``setup_error``, ``crashed``.

:func:`run_script` raises only :class:`ScriptNotFoundError` / :class:`ScriptSyntaxError`
(checked in the parent before any child starts; pass ``check=False`` to skip).
"""

from __future__ import annotations

from pitstop._lazy import lazy_exports, make_callable

_LAZY = {
    "RunSpec": "pitstop.doctor.run.spec",
    "Setup": "pitstop.doctor.run.spec",
    "RunResult": "pitstop.doctor.run.spec",
    "StepRecord": "pitstop.doctor.run.spec",
    "run_script": "pitstop.doctor.run.runner",
    "check_target": "pitstop.doctor.run.runner",
    "ScriptNotFoundError": "pitstop.doctor.run.runner",
    "ScriptSyntaxError": "pitstop.doctor.run.runner",
    "Observations": "pitstop.doctor.analysis.observations",
    "Check": "pitstop.doctor.analysis.check",
    "Finding": "pitstop.doctor.analysis.check",
    "Thresholds": "pitstop.doctor.analysis.check",
    "Probe": "pitstop.doctor.analysis.probe",
    "ProbeSkip": "pitstop.doctor.analysis.probe",
    "Diagnosis": "pitstop.doctor.analysis.diagnosis",
    "diagnose": "pitstop.doctor.analysis.diagnosis",
    "EXIT_CODES": "pitstop.doctor.analysis.diagnosis",
    "DoctorReport": "pitstop.api",
    "DoctorSession": "pitstop.doctor.record.session",
}

__all__ = ["doctor", *_LAZY]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY, itself="doctor")
make_callable(__name__, "pitstop.api:doctor",
              "Run the doctor around a step function: see :func:`pitstop.api.doctor`.")
