# Copyright (c) Facebook, Inc. and its affiliates.

from .launch import *
from .train_loop import *

__all__ = [k for k in globals().keys() if not k.startswith("_")]


# prefer to let hooks and defaults live in separate namespaces (therefore not in __all__)
# but still make them available here
from .hooks import *
from .defaults import (
    create_ddp_model,
    default_argument_parser,
    default_setup,
    default_writers,
    DefaultPredictor,
    DefaultTrainer,
)
