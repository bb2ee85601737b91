"""The doctor's side-by-side probes at run time: :mod:`.run` runs every registered probe in its
share of the time, :mod:`.parts` holds the probes' inputs (the model copy, the kept batch) and
their timed rounds."""

__all__: list[str] = []
