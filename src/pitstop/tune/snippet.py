"""The paste-ready code for a winning combination (torch-free).

Each knob writes its own lines (:meth:`pitstop.tune.knob.Knob.snippet`); this module puts
them together, in the knobs' order, under a comment naming the tip and the measured effect,
and adds the equivalent :class:`pitstop.Recipe` for ``pitstop.fit``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from pitstop.tune.knob import Context, Knob

__all__ = ["combined_snippet", "recipe_snippet"]


def combined_snippet(parts: Sequence[tuple[Knob, Any]], ctx: Context) -> str:
    """Code for every (knob, value) of a combination, knob by knob."""
    blocks = []
    for knob, value in sorted(parts, key=lambda kv: (kv[0].order, kv[0].tip)):
        body = textwrap.dedent(knob.snippet(value, ctx)).strip("\n")
        if body:
            blocks.append(f"# {knob.tip} {knob.title} ({knob.label(value)})\n{body}")
    return "\n\n".join(blocks) + ("\n" if blocks else "")


def recipe_snippet(changed: dict[str, Any]) -> str:
    """``Recipe(...)`` with the fields that differ from the defaults, for ``pitstop.fit``."""
    args = ", ".join(f"{k}={v!r}" for k, v in changed.items())
    return (f"recipe = pitstop.Recipe({args})\n"
            "pitstop.fit(model, optimizer, loss_fn, train_loader, recipe=recipe, max_steps=...)\n")
