"""``python -m codeparrot.lsp --checkpoint DIR``: the same server as ``codeparrot lsp``."""

import sys

from codeparrot.cli import main

raise SystemExit(main(["lsp", *sys.argv[1:]]))
