"""`python -m streaming.notify notify --config F` / `python -m streaming.notify silence …`."""

import sys

from streaming.notify.cli import main

sys.exit(main())
