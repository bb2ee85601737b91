"""The diagnosis: torch-free, in the parent: the records the child sends back (``observations``, ``records``, ``*_records``), the check and probe bases tips subclass (``check``, ``probe``), and the decisions (``diagnosis``, ``job``, ``rankviews``)."""

__all__: list[str] = []
