"""The recorders: what runs inside the training process (child side, imports torch lazily): the instrumentation (``instrument``) and each recorder it wires (steps, boundaries, observers, passes, loaders, syncs, memory, profiled steps, stacks, compile watch, distributed), the probes, and ``collect`` (raw state -> Observations)."""

__all__: list[str] = []
