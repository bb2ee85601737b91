"""The README's two fresh-machine commands stay true, and CI runs exactly the test one."""

from __future__ import annotations

import re

from conftest import ROOT


def _commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = text.split("## Quick start (fresh machine)", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", section, flags=re.S)


def test_readme_has_exactly_two_setup_commands_pinning_torch():
    cmds = _commands()
    assert len(cmds) == 2, cmds
    for cmd in cmds:
        assert "\n" not in cmd and "pip install torch==2.13.0" in cmd
        assert cmd.index("torch==2.13.0") < cmd.index("pip install -e")  # torch first: no CUDA wheels
    assert "pitstop " in cmds[0]
    assert "pytest" in cmds[1]


def test_ci_runs_exactly_the_readme_test_command():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    test_cmd = _commands()[1]
    assert test_cmd in ci.splitlines(), f"{test_cmd!r} is not a line of .ci/run"
