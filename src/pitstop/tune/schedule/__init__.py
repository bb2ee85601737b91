"""What a tune search measures, in which order, and what it costs (torch-free):

- ``listing``: the trials a survey lists (each left out with why: not applicable, cannot run,
  its step phases too small a share to reach the bar);
- ``racing``: the racing scheduler: each run to the candidate with the most expected gain per
  second of measuring, the pairs a verdict is still away, what an undecided trick would need;
- ``plan``: the budget plan, made before measuring: the order, each trick's forecast, what will
  not fit ``--budget`` and why;
- ``costs``: run-time estimates, one-time costs apart from the steady step (a compile trial's
  first compilation), more steps per run where set-up dominates.
"""

from __future__ import annotations

__all__: list[str] = []
