"""The process side of the doctor, shared with ``pitstop tune``: start the child (``runner``), what to run and what came back (``spec``), the child bootstrap (``child``, ``rank`` under torchrun), torchrun jobs on one node or several (``torchrun``, ``nodes``). Torch-free in the parent."""

__all__: list[str] = []
