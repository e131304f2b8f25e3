"""``python -m cairn``: the same entry point as the ``cairn`` console script."""

from cairn.cli import main

raise SystemExit(main())
