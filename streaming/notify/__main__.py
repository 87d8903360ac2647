"""`python -m streaming.notify notify --config F` / `python -m streaming.notify silence …`: the
same commands as `fleetwatch notify` and `fleetwatch silence`."""

import sys

from streaming.cli import main

sys.exit(main())
