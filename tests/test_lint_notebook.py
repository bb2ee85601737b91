"""``pitstop lint`` on Jupyter notebooks (cell by cell, like ruff), on files it cannot lint (in
every output format), and on Python 3.12+ syntax run on an older interpreter."""

from __future__ import annotations

import json
import sys

import jsonschema
import pytest

from pitstop.cli import main
from pitstop.lint.notebook import read_notebook

from conftest import FIXTURES


def _cell(source, kind="code", **extra):
    cell = {"cell_type": kind, "metadata": {}, "source": source, **extra}
    if kind == "code":
        cell.setdefault("execution_count", None)
        cell.setdefault("outputs", [])
    return cell


CELLS = [
    _cell(["# Training\n", "Some *markdown*."], kind="markdown"),
    _cell(["%matplotlib inline\n", "!pip install torch\n", "import torch\n", "from torch.utils.data import DataLoader"]),
    _cell(["%%bash\n", "echo torch.zeros(3).cuda()\n"]),
    _cell(["x = torch.zeros(3).cuda()\n", "files = !ls\n", "def f():\n", "    !echo inside\n",
           "    return torch.ones(2).cuda()\n", "torch.zeros?"],
          outputs=[{"output_type": "stream", "name": "stdout", "text": ["tensor([0., 0., 0.])\n"]}], execution_count=3),
    _cell("state = torch.load('m.pt')\nprint('loaded %s'\n      % (state,))\n"),
]
NOTEBOOK = {"cells": CELLS, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
                                         "language_info": {"name": "python"}}, "nbformat": 4, "nbformat_minor": 5}


@pytest.fixture
def nb(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "train.ipynb"
    path.write_text(json.dumps(NOTEBOOK, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def lint(capsys, *args):
    code = main(["lint", "--isolated", "--all", "--preview", *args])  # snippets run once: --all; every rule: --preview
    out, err = capsys.readouterr()
    return code, out, err


def test_findings_name_the_cell_and_the_line_in_it(nb, capsys):
    code, out, _ = lint(capsys, "train.ipynb")
    assert code == 1
    lines = [line for line in out.splitlines() if line.startswith("train.ipynb")]
    assert lines[0].startswith("train.ipynb:cell 4:1:5: PIT106 [*]")
    assert lines[1].startswith("train.ipynb:cell 4:5:12: PIT106 [*]")
    assert lines[2].startswith("train.ipynb:cell 5:1:9: PIT404")
    assert len(lines) == 3  # the %%bash cell and the IPython lines are not Python: nothing there
    _, out, _ = lint(capsys, "--format", "json", "train.ipynb")
    data = json.loads(out)
    assert [(d["code"], d["cell"], d["line"], d["column"]) for d in data] == [
        ("PIT106", 4, 1, 5), ("PIT106", 4, 5, 12), ("PIT404", 5, 1, 9)]
    assert data[1]["fix"]["edits"][0]["location"] == {"row": 5, "column": 12}


def test_fix_rewrites_only_the_changed_cells_and_keeps_valid_json(nb, capsys):
    code, out, _ = lint(capsys, "--fix", "train.ipynb")
    assert "Fixed 2 errors." in out
    after = json.loads(nb.read_text(encoding="utf-8"))
    assert after["cells"][3]["source"] == ["x = torch.zeros(3, device=\"cuda\")\n", "files = !ls\n", "def f():\n",
                                           "    !echo inside\n", "    return torch.ones(2, device=\"cuda\")\n",
                                           "torch.zeros?"]
    for i in (0, 1, 2, 4):
        assert after["cells"][i] == NOTEBOOK["cells"][i]  # untouched, magics and shell lines included
    assert after["cells"][3]["outputs"] == NOTEBOOK["cells"][3]["outputs"] and after["metadata"] == NOTEBOOK["metadata"]
    assert nb.read_text(encoding="utf-8").startswith('{\n "cells": [')  # its own indentation (1)
    before = nb.read_bytes()
    code, out, _ = lint(capsys, "--fix", "train.ipynb")
    assert "Fixed" not in out and nb.read_bytes() == before


def test_a_notebook_fix_that_cannot_be_written_is_reported_and_not_counted(nb, capsys, monkeypatch):
    import pitstop.lint.runner as runner  # notebooks are written by runner.write_fixed, as .py files

    def read_only(*a, **kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(runner, "write_atomic", read_only)  # chmod does not stop root: fail the write itself
    before = nb.read_bytes()
    code, out, err = lint(capsys, "--fix", "train.ipynb")
    assert code == 2 and "Fixed" not in out and "cannot write the fixed file: Permission denied" in err
    assert "train.ipynb:cell 4:1:5: PIT106" in out  # the findings stand
    assert nb.read_bytes() == before


def test_diff_shows_cells_and_writes_nothing(nb, capsys):
    before = nb.read_bytes()
    code, out, err = lint(capsys, "--diff", "train.ipynb")
    assert code == 1 and nb.read_bytes() == before
    assert "--- a/train.ipynb:cell 4" in out and '+x = torch.zeros(3, device="cuda")' in out
    assert "Would fix 2 errors in 1 file." in err


def test_ipython_lines_are_masked_but_python_continuations_are_not():
    nb = read_notebook(json.dumps(NOTEBOOK))
    assert "!ls" not in nb.python and "%matplotlib" not in nb.python and "echo" not in nb.python
    assert "      % (state,))" in nb.python  # a continuation line that starts with % is Python
    compile(nb.python, "<nb>", "exec")


def test_walk_finds_notebooks_but_not_checkpoints(nb, capsys):
    (nb.parent / ".ipynb_checkpoints").mkdir()
    (nb.parent / ".ipynb_checkpoints" / "train-checkpoint.ipynb").write_text(nb.read_text())
    code = main(["lint", "--isolated", "--show-files", "."])
    assert capsys.readouterr().out.split() == ["train.ipynb"]


@pytest.mark.parametrize("text, reason", [
    ("{not json", "not a notebook: invalid JSON"),
    ('{"cells": 3}', "not a notebook: no list of cells"),
    ('{"cells": [], "metadata": {"language_info": {"name": "R"}}}', "not a Python notebook"),
])
def test_bad_notebooks_are_reported_not_linted(tmp_path, monkeypatch, capsys, text, reason):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.ipynb").write_text(text)
    code, out, err = lint(capsys, "bad.ipynb")
    assert code == 2 and err.startswith("bad.ipynb: cannot parse: ") and reason in err


# -- files that cannot be linted, in every format --------------------------------------------
@pytest.fixture
def broken(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.py").write_text("def f(:\n    pass\n")
    (tmp_path / "ok.py").write_text("import torch\nx = torch.zeros(3).cuda()\n")
    return tmp_path


def test_unlintable_files_appear_in_json_with_a_null_code(broken, capsys):
    code, out, err = lint(capsys, "--format", "json", "bad.py", "ok.py")
    assert code == 2 and "bad.py: cannot parse: SyntaxError" in err
    data = json.loads(out)
    bad = [d for d in data if d["filename"] == "bad.py"]
    assert len(bad) == 1 and bad[0]["code"] is None and bad[0]["message"].startswith("cannot parse: SyntaxError")
    assert (bad[0]["line"], bad[0]["column"]) == (1, 7)
    assert [d["code"] for d in data if d["filename"] == "ok.py"] == ["PIT106"]


def test_unlintable_files_appear_in_sarif_with_their_line(broken, capsys):
    code, out, _ = lint(capsys, "--format", "sarif", "bad.py", "ok.py")
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads((FIXTURES / "lint" / "sarif" / "sarif-schema-2.1.0.json").read_text()))
    (note,) = doc["runs"][0]["invocations"][0]["toolExecutionNotifications"]
    loc = note["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "bad.py" and loc["region"]["startLine"] == 1
    assert "SyntaxError" in note["message"]["text"]


@pytest.mark.parametrize("fmt", ["text", "json", "sarif", "github"])
def test_exit_zero_exits_zero_even_with_unlintable_files(broken, capsys, fmt):
    code, out, err = lint(capsys, "--exit-zero", "--format", fmt, "bad.py", "ok.py")
    assert code == 0 and "bad.py: cannot parse" in err
    code, _, _ = lint(capsys, "--exit-zero", "--diff", "bad.py", "ok.py")
    assert code == 0


# -- newer syntax on an older interpreter ----------------------------------------------------
NEW_SYNTAX = '''\
import torch

type Pair = tuple[torch.Tensor, torch.Tensor]


def first[T](xs: list[T]) -> T:
    return xs[0]


d = {"k": 1}
print(f"{d["k"]}")
x = torch.zeros(3).cuda()
'''


def test_python_312_syntax_is_linted_and_fixed_only_where_it_compiles(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "new.py").write_text(NEW_SYNTAX)
    code, out, err = lint(capsys, "new.py")
    assert code == 1 and "new.py:12:5: PIT106" in out and err == ""
    code, out, err = lint(capsys, "--fix", "new.py")
    if sys.version_info < (3, 12):  # the fixed text could not be compiled here to check it
        assert (tmp_path / "new.py").read_text() == NEW_SYNTAX
        assert "fixes not applied: the file uses syntax newer than Python 3." in err
    else:
        assert 'torch.zeros(3, device="cuda")' in (tmp_path / "new.py").read_text()


def test_deep_nesting_is_still_refused_before_libcst(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "deep.py").write_text("x = " + "(" * 300 + "1" + ")" * 300 + "\n")
    code, _, err = lint(capsys, "deep.py")
    assert code == 2 and "deep.py: cannot parse:" in err


def test_notebook_findings_in_sarif_and_github(nb, capsys):
    _, out, _ = lint(capsys, "--format", "sarif", "train.ipynb")
    doc = json.loads(out)
    jsonschema.validate(doc, json.loads((FIXTURES / "lint" / "sarif" / "sarif-schema-2.1.0.json").read_text()))
    first = doc["runs"][0]["results"][0]
    assert first["properties"]["cell"] == 4 and first["properties"]["frequency"] in ("step", "epoch", "once") and first["locations"][0]["physicalLocation"]["region"]["startLine"] == 1
    _, out, _ = lint(capsys, "--format", "github", "train.ipynb")
    assert "train.ipynb%3Acell 4" not in out and "::train.ipynb:cell 4:1:5: PIT106" in out


def test_project_index_scans_a_notebooks_code_not_its_json(tmp_path):
    """The project index (other files' classes, imports, calls) reads a notebook's code cells:
    its JSON text would hide every ``class``/``def`` line behind a quote."""
    from pitstop.lint.index.project import build_index, clear_caches

    cells = [_cell(["import torch.nn as nn\n", "from mylib.data import Frames\n", "!pip install x\n"]),
             _cell(["class Net(nn.Module):\n", "    def forward(self, x):\n", "        return x\n"]),
             _cell(["loader.sampler.set_epoch(3)"])]
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps({**NOTEBOOK, "cells": cells}, indent=1), encoding="utf-8")
    broken = tmp_path / "broken.ipynb"
    broken.write_text('{"cells": [', encoding="utf-8")
    clear_caches()
    index = build_index([str(path), str(broken)])
    info = index.modules[str(path)]
    assert "Net" in info.classes and "forward" in info.functions
    assert "set_epoch" in info.method_calls and "Frames" in info.imports
    assert not index.modules[str(broken)].classes  # unreadable notebook: an empty entry, no error


TIMED = [
    _cell(["import torch\n", "device = torch.device('cuda')\n"]),
    _cell(["%%time\n", "for x, y in loader:\n", "    loss = model(x.to(device)).sum()\n", "    loss.backward()\n",
           "    opt.step()\n", "    print(loss.item())\n"]),
    _cell(["%%capture out\n", "y = torch.zeros(3).cuda()\n"]),
    _cell(["%%writefile helper.py\n", "z = torch.zeros(3).cuda()\n"]),
]


def test_cells_under_python_cell_magics_are_linted_and_fixed_below_the_magic(tmp_path, monkeypatch, capsys):
    """%%time / %%capture run their body as Python (issue 31): it is linted, and a fix keeps the magic
    line; %%writefile's body is not run here and stays unlinted."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "timed.ipynb"
    path.write_text(json.dumps({**NOTEBOOK, "cells": TIMED}), encoding="utf-8")
    _, out, _ = lint(capsys, "--format", "json", "timed.ipynb")
    found = {(d["code"], d["cell"], d["line"], d["frequency"]) for d in json.loads(out)}
    assert ("PIT201", 2, 6, "step") in found and ("PIT106", 3, 2, "once") in found
    assert not any(cell == 4 for _, cell, _, _ in found)
    lint(capsys, "--fix", "timed.ipynb")
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert cells[2]["source"] == ["%%capture out\n", "y = torch.zeros(3, device=\"cuda\")\n"]
    assert cells[3]["source"] == TIMED[3]["source"]
