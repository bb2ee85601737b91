"""Fake knobs and a fake runner for unit tests of the tune search (``pitstop.tune.protocol.search``):
a step waits for its batch and computes, so its time is ``max(data, compute)`` (the loader
prefetches); each fake knob scales the data time, the compute time, or both."""

from __future__ import annotations

from pitstop.tune.knob import Context, Knob
from pitstop.tune.result import Run

__all__ = ["FakeKnob", "fake_knob", "BottleneckBackend"]


class FakeKnob(Knob, register=False):
    modes = ("api",)
    data = 1.0       # data-time multiplier
    compute = 1.0    # compute-time multiplier
    field = "channels_last"
    own_phases: tuple[str, ...] = ()

    def recipe_fields(self, value, ctx):
        return {self.field: True}

    def phases(self, value, ctx):
        return self.own_phases

    def snippet(self, value, ctx):
        return f"# {self.name} on\n"


def fake_knob(name, tip, *, field, phases=(), data=1.0, compute=1.0, expensive=False):
    """A one-off knob class (its own tip code) and its instance."""
    attrs = {"name": name, "title": name, "data": data, "compute": compute, "field": field, "own_phases": phases,
             "expensive": expensive}
    return type(name, (FakeKnob,), attrs, tip=tip, register=False)()


class BottleneckBackend:
    """``max(data, compute)`` per step, seconds at the baseline given; a small deterministic
    jitter so pairs are not identical."""

    mode, target = "api", "max(data, compute)"

    def __init__(self, knobs, data=0.10, compute=0.06,
                 shares=(("data", 0.6), ("forward", 0.15), ("backward", 0.25))):
        self.by_name = {k.name: k for k in knobs}
        self.data, self.compute, self.shares = data, compute, shares
        self.calls: list[tuple[str, ...]] = []

    def context(self):
        return Context(mode="api", phase_shares=self.shares)

    def step(self, names):
        d, c = self.data, self.compute
        for n in names:
            d, c = d * self.by_name[n].data, c * self.by_name[n].compute
        return max(d, c)

    def run(self, settings, knobs, *, round, timeout, steps, warmup):
        names = tuple(s.knob for s in settings)
        self.calls.append(names)
        t = self.step(names) * (1 + 0.002 * ((len(self.calls) * 7) % 5 - 2))
        return Run("ok", step_times=[t] * steps, warmup_times=[t] * warmup, losses=[1.0] * (warmup + steps),
                   elapsed=t * (steps + warmup), round=round)

    def close(self):
        """Nothing to release: no process was started."""
