"""``pitstop selftest``: its stages in the terminal, and the bench page it fills."""

from __future__ import annotations

from typing import Any

from rich.console import Console

__all__ = ["render", "bench_page"]

_MARK = {"ok": "[green]ok[/]", "failed": "[red]FAILED[/]", "skipped": "[yellow]skipped[/]"}


def render(report: Any, console: Console) -> None:
    if report.skipped:
        console.print(f"pitstop selftest --device {report.device}: skipped: {report.skipped}", soft_wrap=True)
        return
    console.print(f"[bold]pitstop selftest --device {report.device}[/]  (files in {report.out_dir})")
    for s in report.stages:
        console.print(f"  {s.name:<8} {_MARK.get(s.status, s.status):<8} {s.seconds:6.1f} s  {s.detail}", soft_wrap=True)
        if s.status == "failed" and s.command:
            console.print(f"           [dim]{s.command}[/]")
    total = f" in {report.seconds:.1f} s"
    console.print(f"all stages passed{total}" if report.ok else f"[red]some stages failed[/] ({total.strip()})")


def bench_page(device: str, command: str, body: str) -> str:
    """The Markdown page of a selftest's bench run (``docs/bench/gpu.md`` on CUDA)."""
    where = "a GPU" if device == "cuda" else "this CPU"
    return (f"# `pitstop bench` on {where}\n\n"
            f"Written by `{command}` (its bench stage: `pitstop bench --device {device} --format markdown`); "
            "the raw report with every sample is the JSON file beside this page.\n\n" + body.rstrip() + "\n")
