"""``python -m codeparrot.eval ARGS`` is ``codeparrot eval ARGS``.

For data-parallel generation: ``accelerate launch --num_processes N -m codeparrot.eval
generate ...`` (with ``--cpu`` on a machine without GPU, the one process accelerate starts
is replaced by N under torchrun, as for training).
"""

import sys

from codeparrot.cli import main
from codeparrot.training.launch import LaunchError, relaunch_under_torchrun

try:
    relaunch_under_torchrun(sys.argv[1:], module="codeparrot.eval")
except LaunchError as e:
    print(f"codeparrot eval: error: {e}", file=sys.stderr)
    raise SystemExit(2) from None
raise SystemExit(main(["eval", *sys.argv[1:]]))
