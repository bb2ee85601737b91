"""Small public helpers (face H of the catalog), from seed 002's snippets, done right.

Import them from ``pitstop`` directly (``pitstop.param_groups``); this package imports torch.
"""

from pitstop.helpers.data import split
from pitstop.helpers.fuse import fuse_for_inference
from pitstop.helpers.heads import drop_head, find_head, replace_head
from pitstop.helpers.inference import tta
from pitstop.helpers.init import init_weights
from pitstop.helpers.inspect import capture, retain_grads
from pitstop.helpers.params import count_params, freeze, param_groups, unfreeze
from pitstop.helpers.seed import seed_everything

__all__ = [
    "capture",
    "count_params",
    "drop_head",
    "find_head",
    "freeze",
    "fuse_for_inference",
    "init_weights",
    "param_groups",
    "replace_head",
    "retain_grads",
    "seed_everything",
    "split",
    "tta",
    "unfreeze",
]
