"""``python -m codeparrot.training ARGS`` is ``codeparrot train ARGS`` (for ``accelerate launch -m codeparrot.training``)."""

import sys

from codeparrot.cli import main
from codeparrot.launch import LaunchError, relaunch_under_torchrun

try:
    relaunch_under_torchrun(sys.argv[1:])  # `accelerate launch --cpu --num_processes N`
except LaunchError as e:
    print(f"codeparrot train: error: {e}", file=sys.stderr)
    raise SystemExit(2) from None
raise SystemExit(main(["train", *sys.argv[1:]]))
