"""Make ``accelerate launch --cpu --num_processes N -m codeparrot.training`` start N processes.

(The same for ``-m codeparrot.eval generate``: data-parallel generation.)

Accelerate 1.x's ``--cpu`` launcher starts several processes only through mpirun (with
``--mpirun_hostfile``), and so does a plain ``--num_processes N`` on a machine without GPU.
Otherwise it starts ONE process, sets ``MASTER_ADDR`` and ``MASTER_PORT`` for the group it
was asked for and never tells that process N. So
``python -m codeparrot.training`` checks for exactly that situation, reads N from the ``accelerate
launch`` command line that started it, and replaces itself with torchrun
(``torch.distributed.run``) on the same address, which starts the N processes; Accelerate
then forms a gloo DDP group on CPU, as under ``--multi_gpu``. Nothing else is touched: runs
started by torchrun, ``--multi_gpu``, mpirun or a plain ``python -m codeparrot.training`` carry a world
size or no ``MASTER_ADDR`` and go straight on.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from codeparrot.errors import CodeparrotError

# Where an MPI or torchrun launcher puts the world size.
WORLD_SIZE_VARIABLES = ("WORLD_SIZE", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MV2_COMM_WORLD_SIZE")
WORKING_COMMAND = "torchrun --nproc_per_node N -m {module} ..."


class LaunchError(CodeparrotError):
    """The process was launched for a group it cannot start."""


@dataclass(frozen=True)
class Request:
    """What ``accelerate launch`` was asked for."""

    num_processes: int
    num_machines: int


def launched_alone_for_several(env: Mapping[str, str], *, accelerator_device: bool) -> bool:
    """True in the single process that ``accelerate launch --cpu --num_processes N>1`` starts.

    That launcher sets ``ACCELERATE_USE_CPU`` (True with ``--cpu``; False without, which
    still means the CPU where there is no accelerator device) and, only for N > 1 (or
    several machines), ``MASTER_ADDR``; every launcher that really starts N processes sets
    a world size. With a device and no ``--cpu`` (say N processes asked on one GPU) the
    lone process is left alone: torchrun would put them all on that device.
    """
    use_cpu = env.get("ACCELERATE_USE_CPU")
    return (
        use_cpu is not None
        and (use_cpu.lower() == "true" or not accelerator_device)
        and "MASTER_ADDR" in env
        and not any(name in env for name in WORLD_SIZE_VARIABLES)
    )


def requested(launch_argv: Sequence[str]) -> Request | None:
    """The processes asked for on an ``accelerate launch`` command line; None if it is not one."""
    start = next(
        (
            i + 1
            for i, word in enumerate(launch_argv)
            if word == "launch"
            or word.endswith("accelerate.commands.launch")
            or Path(word).name == "accelerate-launch"
        ),
        None,
    )
    if start is None:
        return None
    from accelerate.commands.launch import launch_command_parser

    try:
        args = launch_command_parser().parse_args(list(launch_argv[start:]))
    except SystemExit:  # argparse's way of saying it is not a launch command line
        return None
    num_processes, num_machines = args.num_processes, args.num_machines
    if args.config_file is not None and (num_processes is None or num_machines is None):
        from accelerate.commands.config.config_args import load_config_from_file

        config = load_config_from_file(args.config_file)
        num_processes = num_processes if num_processes is not None else config.num_processes
        num_machines = num_machines if num_machines is not None else config.num_machines
    if num_processes is None:
        return None
    return Request(num_processes=int(num_processes), num_machines=int(num_machines or 1))


def torchrun_argv(
    request: Request,
    env: Mapping[str, str],
    script_argv: Sequence[str],
    module: str = "codeparrot.training",
) -> list[str]:
    """``python -m torch.distributed.run ... -m MODULE ARGS`` for one machine."""
    port = env.get("MASTER_PORT", "29500")
    if port == "0":  # `accelerate launch --main_process_port 0`: any free port
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = str(s.getsockname()[1])
    return [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", "1", "--nproc_per_node", str(request.num_processes),
        "--master_addr", env["MASTER_ADDR"], "--master_port", port,
        "-m", module, *script_argv,
    ]  # fmt: skip


def has_accelerator_device() -> bool:
    import torch

    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None:
        return bool(accelerator.is_available())
    return bool(torch.cuda.is_available())


def parent_command_line() -> list[str]:
    """The command line of the process that started this one (Linux ``/proc``; else empty)."""
    try:
        raw = Path(f"/proc/{os.getppid()}/cmdline").read_bytes()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def relaunch_under_torchrun(
    script_argv: Sequence[str], module: str = "codeparrot.training"
) -> None:
    """Replace this process with torchrun if ``accelerate launch --cpu`` left it alone.

    Returns when there is nothing to do; raises LaunchError when N cannot be started.
    """
    env = os.environ
    if "ACCELERATE_USE_CPU" not in env:  # not started by `accelerate launch`: skip importing torch
        return
    if not launched_alone_for_several(env, accelerator_device=has_accelerator_device()):
        return
    request = requested(parent_command_line())
    if request is None:
        raise LaunchError(
            "this process was started by `accelerate launch --cpu` for several processes, "
            "which without --mpirun_hostfile starts only one, and the number asked for cannot "
            f"be read from the launcher's command line; start the group with `{WORKING_COMMAND.format(module=module)}`"
        )
    if request.num_machines > 1:
        raise LaunchError(
            f"`accelerate launch --cpu --num_machines {request.num_machines}` starts several "
            "processes only through MPI (--mpirun_hostfile); without it, start each machine "
            "with `torchrun --nnodes M --node_rank R --nproc_per_node N --master_addr ADDR "
            f"-m {module} ...`"
        )
    if request.num_processes <= 1:
        return
    argv = torchrun_argv(request, env, script_argv, module)
    print(
        f"accelerate launch --cpu starts one process without MPI; starting "
        f"{request.num_processes} with torchrun (gloo) instead",
        file=sys.stderr,
        flush=True,
    )
    os.execve(sys.executable, argv, dict(env))
