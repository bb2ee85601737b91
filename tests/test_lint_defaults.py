"""Issue 42: lint rules earn their defaults. Each rule (or sub-pattern) carries its measured precision over the
hand-labelled real findings; it runs by default only at >= 0.95 over >= 10 right-or-wrong labelled findings of
confirmed rounds; the rest run with --preview or an exact --select. One view: text, JSON, SARIF and --fix act on
the same findings; wrong results, unsafe loads and deprecated calls are never hidden as one-time; a fix that
changes a state_dict layout is never offered."""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap

import pytest

from pitstop.cli import main
from pitstop.lint.defaults import MIN_FINDINGS, MIN_PRECISION, Figure, figure_of, is_stable
from pitstop.lint.defaults import FIGURES, NEWEST_ROUND

from conftest import ROOT

_spec = importlib.util.spec_from_file_location("lint_precision", ROOT / "benchmarks" / "lint_precision.py")
lp = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("lint_precision", lp)
_spec.loader.exec_module(lp)


def test_the_measured_table_is_what_the_labels_give():
    """src/pitstop/lint/defaults/measured.py is generated from tests/lint_corpus/labels.toml (never typed by hand): the
    labels and the MANIFEST's rounds give exactly its figures (`benchmarks/lint_precision.py --write-figures`)."""
    rows = lp.figures(lp.load_labels())
    assert [Figure(**r) for r in rows] == list(FIGURES)
    assert lp.figures_module(rows) == (ROOT / "src" / "pitstop" / "lint" / "defaults" / "measured.py").read_text(encoding="utf-8")
    assert NEWEST_ROUND == max(lp.repo_rounds()[lab.path.split("/", 1)[0]] for lab in lp.load_labels())


def test_a_rule_is_on_by_default_only_when_its_confirmed_labels_hold():
    on = Figure("PIT999", confirmed_right=10)
    assert on.stable and on.precision == 1.0
    assert not Figure("PIT999", confirmed_right=9).stable  # too few labelled findings
    assert not Figure("PIT999", confirmed_right=9, pending_right=5).stable  # the newest round cannot turn it on
    assert not Figure("PIT999", confirmed_right=18, confirmed_wrong=2).stable  # 0.90 < 0.95
    assert Figure("PIT999", confirmed_right=19, confirmed_wrong=1).stable  # 0.95
    assert not Figure("PIT999", confirmed_right=19, confirmed_wrong=1, pending_wrong=1).stable  # it can turn it off
    assert Figure("PIT999", confirmed_right=10, confirmed_debatable=30).stable  # debatable ones are left out
    assert not Figure("PIT999", confirmed_right=10, silenced_wrong=3).confirmed_wrong  # removed wrong ones: apart
    assert (MIN_FINDINGS, MIN_PRECISION) == (10, 0.95)
    for fig in FIGURES:
        n = fig.confirmed_right + fig.confirmed_wrong
        assert fig.stable == (n >= 10 and fig.confirmed_right / n >= 0.95 and fig.right / (fig.right + fig.wrong) >= 0.95)
    assert figure_of("PIT999") == Figure("PIT999") and not is_stable("PIT999")


def test_explain_and_tips_show_each_rules_figure_and_status(capsys):
    stable = next(f for f in FIGURES if f.stable and not f.pattern)
    preview = next(f for f in FIGURES if not f.stable and f.right + f.wrong and not f.pattern)
    for fig, status in ((stable, "on by default"), (preview, "preview")):
        assert main(["explain", fig.code, "--format", "markdown"]) == 0
        out = capsys.readouterr().out
        n = fig.right + fig.wrong
        assert f"- Lint: {status}" in out and f"precision {fig.precision:.2f} over {n} labelled finding" in out
    assert main(["tips", "--face", "L", "--format", "json"]) == 0
    rows = {t["code"]: t for t in json.loads(capsys.readouterr().out)}
    assert rows[stable.code]["lint"][0] == {"rule": stable.rule, "default": True, "right": stable.right,
                                            "wrong": stable.wrong, "debatable": stable.debatable,
                                            "precision": stable.precision,
                                            "pending": stable.pending_right + stable.pending_wrong + stable.pending_debatable}
    assert rows[preview.code]["lint"][0]["default"] is False


_SCRIPT = textwrap.dedent('''\
    import torch
    from torch.utils.data import DataLoader

    def main(model, data, opt):
        scaler = torch.cuda.amp.GradScaler()
        state = torch.load("ckpt.pt", weights_only=False)
        buf = torch.zeros(3).cuda()
        loader = DataLoader(data, batch_size=64, shuffle=True)
        for epoch in range(10):
            for x in loader:
                x = x.cuda()
                loss = model(x).sum()
                loss.backward()
                opt.step()
                print(loss.item())

    main(None, None, None)
''')


@pytest.fixture
def script(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.py").write_text(_SCRIPT)
    return tmp_path / "train.py"


def _codes(capsys, *args) -> list[tuple[int, str]]:
    main(["lint", "--isolated", "--format", "json", *args, "train.py"])
    return sorted((d["line"], d["code"]) for d in json.loads(capsys.readouterr().out))


def test_defaults_preview_and_exact_select(script, capsys):
    preview = _codes(capsys, "--preview")
    default = _codes(capsys)
    assert default == [c for c in preview if is_stable(c[1])]  # the stable rules' findings, no other
    assert (15, "PIT201") in default and (11, "PIT103") in default  # per step: stable rules
    assert not is_stable("PIT101") and (8, "PIT101") in preview and (8, "PIT101") not in default
    assert _codes(capsys, "--select", "PIT101") == [(8, "PIT101")]  # an exact code runs a preview rule
    assert _codes(capsys, "--select", "PIT1") == [c for c in default if c[1].startswith("PIT1")]  # a prefix: stable only
    assert _codes(capsys, "--select", "PIT1", "--preview") == [c for c in preview if c[1].startswith("PIT1")]


def test_security_correctness_and_deprecation_are_never_hidden_as_one_time(script, capsys):
    """PIT903 (unsafe load) and PIT302 (deprecated GradScaler) sit in setup code that runs once: shown anyway;
    PIT106 (a cost) there is hidden unless --all."""
    found = {d["code"]: d for d in json.loads(_json(capsys, "--preview"))}
    assert found["PIT903"]["frequency"] == "once" and found["PIT903"]["concern"] == "security"
    assert found["PIT302"]["frequency"] == "once" and found["PIT302"]["concern"] == "deprecation"
    assert "PIT106" not in found
    assert "PIT106" in {d["code"] for d in json.loads(_json(capsys, "--preview", "--all"))}


def _json(capsys, *args) -> str:
    main(["lint", "--isolated", "--format", "json", *args, "train.py"])
    return capsys.readouterr().out


def test_text_json_sarif_and_fix_act_on_the_same_findings(script, capsys):
    for extra in ((), ("--all",), ("--preview",), ("--preview", "--all")):
        main(["lint", "--isolated", "-q", *extra, "train.py"])
        text = sorted((int(line.split(":")[1]), line.split()[1]) for line in capsys.readouterr().out.splitlines())
        js = sorted((d["line"], d["code"]) for d in json.loads(_json(capsys, *extra)))
        main(["lint", "--isolated", "--format", "sarif", *extra, "train.py"])
        results = json.loads(capsys.readouterr().out)["runs"][0]["results"]
        sarif = sorted((r["locations"][0]["physicalLocation"]["region"]["startLine"], r["ruleId"]) for r in results)
        assert text == js == sarif, extra
    # --fix without --all leaves the one-time PIT106 (a safe fix) alone; with --all it rewrites it
    main(["lint", "--isolated", "--preview", "--fix", "--exit-zero", "train.py"])
    capsys.readouterr()
    src = script.read_text()
    assert "torch.zeros(3).cuda()" in src and "x.cuda(non_blocking=True)" in src
    main(["lint", "--isolated", "--preview", "--all", "--fix", "--exit-zero", "train.py"])
    capsys.readouterr()
    assert 'torch.zeros(3, device="cuda")' in script.read_text()


_CONV_BN = textwrap.dedent('''\
    import torch.nn as nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(64, 64, 3)
            self.bn = nn.BatchNorm2d(64)

        def forward(self, x):
            return self.bn(self.conv(x))
''')


def test_a_state_dict_layout_fix_is_never_offered_and_says_what_breaks(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.py").write_text(_CONV_BN)
    main(["lint", "--isolated", "--select", "PIT603", "net.py"])
    out = capsys.readouterr().out
    assert "PIT603" in out and "fixable" not in out and "hidden fix" not in out  # not advertised
    main(["lint", "--isolated", "--select", "PIT603", "--format", "json", "net.py"])
    fix = json.loads(capsys.readouterr().out)[0]["fix"]
    assert fix["applicability"] == "unsafe" and fix["state_dict_layout"] is True
    assert "strict=False load silently drops" in fix["message"]
    main(["lint", "--isolated", "--select", "PIT603", "--fix", "net.py"])
    assert (tmp_path / "net.py").read_text() == _CONV_BN  # not applied without --unsafe-fixes
    capsys.readouterr()
