"""The tip modules: one per catalog code (``pitNNN_slug.py``), discovered by :mod:`pitstop.catalog`.

Nothing else lives here: the :class:`~pitstop.catalog.Tip` base, the faces and the lookups
are :mod:`pitstop.catalog`. Tip modules import torch only inside their runtime faces.
"""
