"""The doctor on compiled models (issue 22): it observes without changing the user's graphs,
and reports the user's graph breaks (PIT608) and recompiles (PIT609) with their lines.

The scripts in ``fixtures/compile/`` compile their model as users do; the tests pass
``--backend aot_eager``: graph breaks and recompiles are dynamo's decisions, made before any
backend runs, and Inductor's C++ compile would take tens of seconds per graph here.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from conftest import FIXTURES, run_cli
from pitstop.doctor.analysis.check import Thresholds
from pitstop.doctor.analysis.compile_records import CompileRecord, GraphBreak, LimitHit, Recompile
from pitstop.doctor.record.compile_watch import parse_graph_break, parse_limit_hit, parse_recompile
from pitstop.doctor.analysis.observations import Observations
from pitstop.doctor.analysis.records import Site, StepTime

SCRIPTS = FIXTURES / "compile"
TORCH = "/venv/lib/python3.11/site-packages/torch/"
PITSTOP = str(__import__("pitstop").__file__).rsplit("/", 1)[0] + "/"


# -- parsing dynamo's reports (torch-free strings, as torch 2.13 prints them) -----------------
BREAK_213 = textwrap.dedent(f"""\
    Graph break in user code at /u/train.py:22
    Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):

    Unsupported Tensor.item() call with capture_scalar_outputs=False
      Explanation: Dynamo does not support tracing `Tensor.item()` with config.capture_scalar_outputs=False.

    User code traceback:
      File "/u/train.py", line 32, in <module>
        loss = nn.functional.cross_entropy(model(x), y)
      File "{TORCH}nn/modules/module.py", line 1778, in _wrapped_call_impl
        return self._call_impl(*args, **kwargs)
      File "/u/train.py", line 22, in forward
        if h.abs().max().item() > 10:
    """)


def test_a_break_is_the_users_innermost_line_with_dynamos_reason():
    b = parse_graph_break(BREAK_213, TORCH)
    assert b == GraphBreak(reason="Unsupported Tensor.item() call with capture_scalar_outputs=False",
                           where="/u/train.py:22", function="forward", source="if h.abs().max().item() > 10:")


def test_a_break_in_the_doctors_own_frame_is_not_the_users():
    text = BREAK_213.replace("    User code traceback:", "User code traceback:") + \
        f'  File "{PITSTOP}doctor/record/syncs.py", line 37, in wrapper\n    return original(self, *args, **kwargs)\n'
    assert parse_graph_break(text, TORCH) is None


def test_older_and_duplicate_break_formats():
    old = 'Graph break: call_method TensorVariable() item () {} from user code at:\n  File "/u/m.py", line 5, in forward\n    y = x.item()\n'
    b = parse_graph_break(old, TORCH)
    assert (b.reason, b.where) == ("call_method TensorVariable() item () {}", "/u/m.py:5")
    dup = ("Graph break (user stack suppressed due to duplicate graph break) in user code at /u/m.py:5\n"
           "Graph Break Reason: Unsupported Tensor.item() call")
    assert parse_graph_break(dup, TORCH).where == "/u/m.py:5"


def test_recompile_and_limit_messages():
    msg = ("Recompiling function forward in /u/lm.py:21\n    triggered by the following guard failure(s):\n"
           "    - 1/1: tensor 'ids' size mismatch at index 1. expected 9, actual 10\n"
           "    - 1/0: tensor 'ids' size mismatch at index 1. expected 8, actual 10")
    assert parse_recompile(msg) == ("forward", "/u/lm.py:21", "tensor 'ids' size mismatch at index 1. expected 9, actual 10")
    assert parse_recompile(msg.replace("/u/lm.py", PITSTOP + "doctor/record/memory.py")) is None
    warn = ("torch._dynamo hit config.recompile_limit (8)\n   function: 'forward' (/u/lm.py:21)\n"
            "   last reason: 1/7: tensor 'ids' size mismatch at index 1. expected 15, actual 16\n")
    assert parse_limit_hit(warn) == LimitHit(function="forward", where="/u/lm.py:21", limit_name="recompile_limit",
                                             limit=8, last_reason="tensor 'ids' size mismatch at index 1. expected 15, actual 16")


# -- the checks, on typed observations ------------------------------------------------------------
def _findings(code: str, rec: CompileRecord, **kw) -> list:
    from pitstop import catalog

    obs = Observations(compile=rec, steps_observed=10, step_time=StepTime(median=0.1, mean=0.1), **kw)
    (cls,) = [c for c in catalog.implementations("D") if c.tip == code and hasattr(c, "check")]
    check = cls()
    assert check.skip_reason(obs) is None
    return list(check.check(obs, Thresholds()))


ITEM = GraphBreak(reason="Unsupported Tensor.item() call", where="/u/train.py:22", function="forward",
                  source="if h.max().item() > 10:  # note")


def test_pit608_names_the_line_and_the_fix_that_fits_and_ranks_by_the_sync_it_costs():
    (f,) = _findings("PIT608", CompileRecord(compiled=True, graph_breaks=1, breaks=[ITEM], calls=12))
    assert f.where == ("/u/train.py:22",) and "train.py:22" in f.title and "torch.where" in f.fix
    assert f.severity == "medium" and f.impact_share is None and "# note" not in f.evidence
    (g,) = _findings("PIT608", CompileRecord(compiled=True, graph_breaks=1, breaks=[ITEM]),
                     syncs=[Site(where="/u/train.py:22", kind="item", calls=10, seconds=0.2)])
    assert g.impact_share == pytest.approx(0.2) and g.severity == "high"


def test_pit608_and_pit609_quiet_on_a_clean_compiled_model():
    clean = CompileRecord(compiled=True, graph_breaks=0, compilations=2, compile_s=1.0)
    assert _findings("PIT608", clean) == [] and _findings("PIT609", clean) == []


def test_pit609_limit_hit_is_high_with_the_guard_and_the_fix():
    rec = CompileRecord(compiled=True, graph_breaks=0, compile_s=5.0, compile_s_observed=0.5,
                        recompiles=[Recompile(function="forward", where="/u/lm.py:21", guard="tensor 'ids' size mismatch at index 1",
                                              example="tensor 'ids' size mismatch at index 1. expected 8, actual 9", count=8)],
                        limit_hits=[LimitHit(function="forward", where="/u/lm.py:21", limit=8,
                                             last_reason="tensor 'ids' size mismatch at index 1. expected 15, actual 16")])
    (f,) = _findings("PIT609", rec)
    assert f.severity == "high" and f.where == ("/u/lm.py:21",) and "runs eagerly" in f.title
    assert "mark_dynamic(ids, 1)" in f.fix and f.impact_share == pytest.approx(0.5)
    few = CompileRecord(compiled=True, recompiles=[Recompile(function="f", where=None, guard="g", example="g", count=2)])
    assert _findings("PIT609", few) == []


# -- real runs ---------------------------------------------------------------------------------------------
def _doctor(script: str, *script_args: str, steps: int = 3, html: str) -> dict:
    """Through the CLI (``--html``: the report page's compile section)."""
    out = run_cli("doctor", "--no-probes", "--format", "json", "--steps", str(steps), "--warmup", "1", "--html", html,
                  str(SCRIPTS / script), "--", "--backend", "aot_eager", *script_args, timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _warm(warm_doctor, script: str, *script_args: str, probes: bool = False) -> dict:
    """Forked from the test process's warm worker (``tests/doctor_warm.py``): torch and dynamo
    are imported there, nothing compiled, so the run's dynamo counters start at zero."""
    run = warm_doctor.report(SCRIPTS / script, "--backend", "aot_eager", *script_args, steps=3, warmup=1,
                             probes=probes, timeout=400)
    assert run.exit_code == 0, run.stderr[-3000:]
    return run.data


#: the scripts whose graph breaks are counted alone (no pitstop in the process), script arguments included
ALONE = (("clean_mlp.py", "--how", "module"), ("clean_mlp.py", "--how", "method"), ("item_branch.py",))


@pytest.fixture(scope="module")
def alone() -> dict[tuple, int]:
    """Graph breaks dynamo counts when each script of ``ALONE`` runs alone (no pitstop in the
    process): one process runs them in turn, dynamo's caches and counters reset before each
    (one torch import instead of one per script)."""
    code = ("import json, runpy, sys, torch._dynamo\n"
            "from torch._dynamo.utils import counters\n"
            "out = []\n"
            "for argv in json.loads(sys.argv[1]):\n"
            "    torch._dynamo.reset(); counters.clear(); sys.argv = argv\n"
            "    runpy.run_path(argv[0], run_name='__main__')\n"
            "    out.append(sum(counters['graph_break'].values()))\n"
            "print(json.dumps(out))")
    runs = [[str(SCRIPTS / script), "--backend", "aot_eager", "--steps", "5", *args] for script, *args in ALONE]
    out = subprocess.run([sys.executable, "-c", code, json.dumps(runs)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return dict(zip(ALONE, json.loads(out.stdout.splitlines()[-1]), strict=True))


def _compile_codes(d: dict) -> set[str]:
    return {f["code"] for f in d["findings"]} & {"PIT601", "PIT608", "PIT609"}


@pytest.mark.slow
@pytest.mark.parametrize("how", ["module", "method"])
def test_a_clean_compiled_mlp_has_no_break_under_the_doctor_as_alone(how, alone, warm_doctor):
    d = _warm(warm_doctor, "clean_mlp.py", "--how", how)
    c = d["observations"]["compile"]
    assert c["compiled"] and c["graph_breaks"] == 0 == alone["clean_mlp.py", "--how", how]
    assert c["recompiles"] == [] and c["limit_hits"] == []
    assert _compile_codes(d) == set()
    assert d["observations"]["forwards"]["train"] >= 4  # seen at the compiled module's boundary


@pytest.mark.slow
def test_an_item_branch_is_pit608_at_its_line(alone, warm_doctor):
    d = _warm(warm_doctor, "item_branch.py")
    c = d["observations"]["compile"]
    assert c["graph_breaks"] == 1 == alone["item_branch.py",]
    line = next(n for n, t in enumerate((SCRIPTS / "item_branch.py").read_text().splitlines(), 1) if t.rstrip().endswith("# PIT608"))
    (f,) = [f for f in d["findings"] if f["code"] == "PIT608"]
    assert f["where"] == [f"{SCRIPTS / 'item_branch.py'}:{line}"] and "item()" in f["evidence"]


@pytest.mark.slow
def test_a_new_length_every_step_is_pit609_with_the_failing_guard_and_the_limit(tmp_path):
    d = _doctor("new_length.py", steps=9, html=str(tmp_path / "report.html"))
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert "<h2>torch.compile</h2>" in page and "hit recompile_limit=8" in page
    c = d["observations"]["compile"]
    assert c["limit_hits"] and c["limit_hits"][0]["function"] == "forward"
    (r,) = c["recompiles"]
    assert r["guard"] == "tensor 'ids' size mismatch at index 1" and r["count"] >= 8
    (f,) = [f for f in d["findings"] if f["code"] == "PIT609"]
    assert f["severity"] == "high" and "mark_dynamic(ids, 1)" in f["fix"]
    assert "PIT608" not in _compile_codes(d)
    assert "PIT202" not in {f["code"] for f in d["findings"]}  # the new graphs hold the nodes, not the script


@pytest.mark.slow
def test_the_compile_probe_times_the_compiled_model_against_eager_without_recompiling(warm_doctor):
    d = _warm(warm_doctor, "clean_mlp.py", probes=True)
    p = d["observations"]["probes"]["compile"]
    assert "skipped" not in p and "error" not in p, p
    assert set(p["seconds"]) == {"eager", "compiled"} and all(s > 0 for s in p["seconds"].values())
    assert d["observations"]["compile"]["recompiles"] == []
    # whichever is faster here (never assumed), PIT608/PIT609 have nothing to say
    assert _compile_codes(d) <= {"PIT601"}
