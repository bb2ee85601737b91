"""The CLI's promises on bad input and unexpected errors (issue 14): one clear line, exit 2
for bad input, exit 1 and a hint for an internal error (the traceback with --verbose)."""

from __future__ import annotations

import pytest

from pitstop.cli import main
from pitstop.cli.tips import TipsCommand


def _boom(self, args):
    raise KeyError("deep inside")


def test_unexpected_exception_is_one_line_and_exit_1(monkeypatch, capsys):
    monkeypatch.setattr(TipsCommand, "run", _boom)
    assert main(["tips"]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert "internal error: KeyError" in err and "report" in err and "--verbose" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [["--verbose", "tips"], ["tips", "--verbose"]])
def test_verbose_shows_the_traceback(monkeypatch, capsys, argv):
    monkeypatch.setattr(TipsCommand, "run", _boom)
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "_boom" in err and "internal error: KeyError" in err
