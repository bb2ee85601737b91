"""Tune for a memory budget (``pitstop tune --memory-budget SIZE``): ``search`` (the search, its
rows and answer, API mode :func:`~pitstop.tune.memfit.search.tune_memory`) and ``script`` (an
unmodified script, :func:`~pitstop.tune.memfit.script.tune_memory_script`)."""
