"""``python -m pitstop`` is the ``pitstop`` command."""

import sys

from pitstop.cli import main

sys.exit(main())
