"""``python -m evalpipe.cli``: the command line."""

import sys

from evalpipe.cli import main

sys.exit(main())
