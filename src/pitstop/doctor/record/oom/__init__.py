"""Memory at its limit, in the training process: the tracked allocator (``ledger``), where memory
goes inside a step and the profiled memory step (``watch``), the 16-bit measurement after the
script (``precision``), the moment of an out-of-memory error (``capture``), the memory trail
the parent reads after a kill (``trail``), the model's repeated blocks (``blocks``)."""
