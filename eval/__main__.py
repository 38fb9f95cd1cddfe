"""``python -m codeparrot.eval ARGS`` is ``codeparrot eval ARGS``.

For data-parallel generation: ``accelerate launch --num_processes N -m codeparrot.eval
generate ...`` (with ``--cpu`` on a machine without GPU, the one process accelerate starts
is replaced by N under torchrun, as for training). The arguments travel to the N
processes in an environment variable: torchrun's own parser would take ``--n`` for an
abbreviation of its ``--nnodes``/``--nproc-per-node`` and refuse it (started by torchrun
directly, put ``--`` before the arguments: ``torchrun ... -m codeparrot.eval -- generate ...``).
"""

import json
import os
import sys

from codeparrot.cli import main
from codeparrot.launch import LaunchError, relaunch_under_torchrun

ARGV_VARIABLE = "CODEPARROT_EVAL_ARGV"

argv = sys.argv[1:]
if argv[:1] == ["--"]:  # `torchrun ... -m codeparrot.eval -- generate --n 4 ...`
    argv = argv[1:]
forwarded = os.environ.pop(ARGV_VARIABLE, None)
if forwarded is not None and not argv:
    argv = json.loads(forwarded)
else:
    os.environ[ARGV_VARIABLE] = json.dumps(argv)
    try:
        relaunch_under_torchrun([], module="codeparrot.eval")
    except LaunchError as e:
        print(f"codeparrot eval: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    del os.environ[ARGV_VARIABLE]
raise SystemExit(main(["eval", *argv]))
