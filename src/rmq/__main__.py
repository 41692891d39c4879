"""``python -m rmq``: the ``rmq`` command."""

from .cli import main

raise SystemExit(main())
