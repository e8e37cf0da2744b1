import sys

from tng_lab.soak.cli import main

sys.exit(main())
