"""Doctor runs for tests whose subject is what the doctor finds in a script.

A fresh ``pitstop doctor`` child spends most of a tiny run importing: ``import torch`` is about
2 CPU-seconds on the 2-core AMD EPYC that runs this suite, and ``torch._dynamo`` (imported by
torch's own optimizer at the script's first ``Optimizer``) about 1.5 more, against a few tenths
of a second of training. Tests that read a diagnosis therefore fork their runs from one warm
worker per test process: :class:`pitstop.tune.warm.WarmRunner`, the worker ``pitstop tune``
forks its runs from, which runs the same child bootstrap as a fresh child
(:func:`pitstop.doctor.run.child.run_in_process`: seeding, instrumentation, ``runpy`` of the
script). The report is built as the CLI builds it (``diagnose``, then the JSON codec), so the
dictionary is what ``pitstop doctor --format json`` prints.

What still needs a fresh process stays on the CLI (``conftest.run_cli``): command-line parsing
and exit codes, signals and timeouts of the process itself, torchrun jobs, and anything torch
reads from the environment at import (``ONEDNN_MAX_CPU_ISA``, ``OMP_NUM_THREADS``): the worker
imported torch before the test ran. Where ``fork`` does not exist, runs start fresh children.
"""

from __future__ import annotations

import json
from pathlib import Path

__all__ = ["WarmDoctor", "WarmReport"]


class WarmReport:
    """One run's report: ``data`` (the ``--format json`` document), ``exit_code`` (what
    ``pitstop doctor`` would have exited with), ``stderr`` (what the script wrote there) and
    ``diagnosis`` (the typed :class:`Diagnosis` the document was made from, for renderers)."""

    def __init__(self, data: dict, exit_code: int, stderr: str) -> None:
        self.data, self.exit_code, self.stderr = data, exit_code, stderr
        self.diagnosis = None


class WarmDoctor:
    """Runs ``RunSpec``s forked from one warm worker (or as fresh children without ``fork``)."""

    def __init__(self) -> None:
        from pitstop.tune.warm import WarmRunner

        # different scripts share the worker: it must not import one script's packages for the next
        self.runner = WarmRunner(learn_packages=False) if WarmRunner.available() else None
        if self.runner is not None:
            self.runner.start()

    def report(self, script: str | Path | None, *args: str, module: str | None = None, steps: int = 10,
               warmup: int = 2, probes: bool = True, timeout: float = 600.0, seed: int | None = 0,
               trace_dir: str | None = None, memory_budget: int | None = None,
               cpuinfo: str | Path | None = None) -> WarmReport:
        """What ``pitstop doctor --format json [--no-probes] --steps S --warmup W SCRIPT -- ARGS``
        reports (``-m MODULE`` with ``script=None, module=...``; ``--memory-budget`` in bytes), from a
        run forked from the warm worker."""
        from pitstop.doctor.analysis.diagnosis import diagnose
        from pitstop.doctor.run.spec import RunSpec
        from pitstop.jsoncodec import dumps

        spec = RunSpec(script=None if script is None else str(script), module=module, args=tuple(args), steps=steps, warmup=warmup, timeout=timeout, seed=seed,
                       probes=probes, trace_dir=trace_dir, stdout="stderr", memory_budget=memory_budget,
                       cpuinfo=None if cpuinfo is None else str(cpuinfo))
        result, stderr = self.run(spec)
        diag = diagnose(result)
        report = WarmReport(json.loads(dumps(diag.to_dict())), diag.exit_code, stderr)
        report.diagnosis = diag
        return report

    def run(self, spec) -> tuple:
        """``(RunResult, stderr)`` of ``spec`` (a ``RunSpec``), forked from the warm worker (a fresh
        child where ``fork`` does not exist), as ``pitstop tune`` runs it."""
        from pitstop.doctor.run.runner import run_script

        if self.runner is None:
            return run_script(spec), ""
        return self.runner.run(spec), "\n".join(self.runner.last_stderr)

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
