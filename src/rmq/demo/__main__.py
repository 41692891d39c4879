"""``python -m rmq.demo``: the same as ``rmq demo`` (errors in one line)."""

import sys

from rmq.cli import main

sys.exit(main(["demo", *sys.argv[1:]]))
