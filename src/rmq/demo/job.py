"""``spark-submit`` entry point of the demo: spark-submit runs a file, not a module, and this
file imports rmq absolutely, so it runs as a script wherever rmq is installed or shipped.

    spark-submit --master spark://host:7077 --py-files rmq.whl \\
        "$(python -c 'import rmq.demo.job as j; print(j.__file__)')" --url redis://...
"""

import sys

from rmq.demo.app import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
