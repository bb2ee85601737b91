"""Step boundaries without a torch optimizer: manual parameter updates.

Mixed into :class:`~pitstop.doctor.instrument.Instrumentation`. Until a ``torch.optim``
optimizer steps, each backward call remembers a few values of one parameter reached from
the loss's graph; when they have changed by the next backward call while no optimizer
stepped, the script updates its parameters by hand (``p.data.add_(p.grad, alpha=-lr)``,
word_language_model's default): from then on every backward call ends a step, the report
says so (``step_boundary == "backward"`` and a note), and the run does not wait for its
timeout. Gradient accumulation with an optimizer leaves the parameters unchanged between
its backward calls, so it is never taken for manual updates. Works in light mode too (the
parameter comes from the graph, not from the forward hooks).
"""

from __future__ import annotations

import time

import torch

__all__ = ["ManualUpdates", "graph_param"]

perf = time.perf_counter
cpu_clock = time.process_time


def graph_param(t: torch.Tensor, limit: int = 256) -> torch.Tensor | None:
    """A leaf tensor that requires grad (a parameter) reached from ``t``'s autograd graph."""
    fn = getattr(t, "grad_fn", None)
    seen, todo = 0, [fn] if fn is not None else []
    while todo and seen < limit:
        node = todo.pop()
        seen += 1
        var = getattr(node, "variable", None)
        if isinstance(var, torch.Tensor) and var.requires_grad:
            return var
        todo.extend(n for n, _ in node.next_functions if n is not None)
    return None


class ManualUpdates:
    """See the module docstring; state lives in ``Instrumentation.__init__``."""

    def _snapshot(self, p: torch.Tensor) -> None:
        """Remember a few values of one trained parameter (until an optimizer steps)."""
        if p.grad is not None and p.numel():
            self._snap = (p, p.detach().reshape(-1)[:256].clone())
            self._mark = (perf(), cpu_clock(), dict(self.cur.phases))

    def _check_manual_update(self) -> None:
        p, before = self._snap
        if torch.equal(p.detach().reshape(-1)[:256], before):
            return
        self._snap = None
        self.boundary = "backward"
        self.notes.append("no torch.optim optimizer stepped, but the parameters changed between backward calls (a "
                          "manual update such as p.data.add_(p.grad, alpha=-lr)): each backward call ends a step, "
                          "and the update's time is counted in 'host' (before the next forward)")
        t, c, phases = self._mark
        new = type(self.cur)()
        for k, v in self.cur.phases.items():
            if v - phases.get(k, 0.0) > 0:
                new.phases[k] = v - phases.get(k, 0.0)
        new.pending = [q for q in self.cur.pending if not q.reached[0]]
        self.cur, self.step_start, self.cpu_start = new, t, c

