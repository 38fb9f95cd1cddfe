"""``python -m training ARGS`` is ``codeparrot train ARGS`` (for ``accelerate launch -m training``)."""

import sys

from codeparrot.cli import main

raise SystemExit(main(["train", *sys.argv[1:]]))
