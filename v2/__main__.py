"""`python -m v2`: the command line."""

import sys

from v2.cli import main

sys.exit(main())
