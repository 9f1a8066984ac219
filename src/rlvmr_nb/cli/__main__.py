"""`python -m rlvmr_nb.cli ...` (torchrun's `-m` form) runs the `rlvmr-nb` command."""

import sys

from . import main

sys.exit(main())
