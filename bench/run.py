#!/usr/bin/env python3
"""The benchmark as a script: ``bench/run.py [options]`` is ``rmq bench [options]``."""

import sys

from rmq.bench import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
