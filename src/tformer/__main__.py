"""``python -m tformer`` (and ``torchrun -m tformer``) run the command line."""

import sys

from .cli import main

sys.exit(main())
