"""`python -m tng_lab`: the tng-lab command line."""

import sys

from tng_lab.cli import main

sys.exit(main())
