"""``python -m rmq.bench``: the same as ``rmq bench`` (errors in one line)."""

import sys

from rmq.cli import main

sys.exit(main(["bench", *sys.argv[1:]]))
