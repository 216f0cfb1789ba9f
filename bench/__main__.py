"""`python -m bench sparql ...` / `python -m bench lubm ...`."""

import sys

from bench.runner import main

sys.exit(main(sys.argv[1:]))
