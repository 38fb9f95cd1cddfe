"""How `python -m codeparrot.training` tells that `accelerate launch --cpu` left it alone, and what it runs."""

from __future__ import annotations

import sys

import pytest

from codeparrot.launch import Request, launched_alone_for_several, requested, torchrun_argv

ACCELERATE_CPU = {"ACCELERATE_USE_CPU": "True", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


@pytest.mark.parametrize("device", [False, True])
def test_only_the_lone_process_of_a_cpu_group_is_relaunched(device):
    def alone(env):
        return launched_alone_for_several(env, accelerator_device=device)

    assert alone(ACCELERATE_CPU)
    assert not alone({**ACCELERATE_CPU, "WORLD_SIZE": "2"})  # torchrun
    assert not alone({**ACCELERATE_CPU, "OMPI_COMM_WORLD_SIZE": "2"})  # MPI
    assert not alone({"ACCELERATE_USE_CPU": "True"})  # --num_processes 1
    assert not alone({})  # python -m codeparrot.training
    # `accelerate launch --num_processes 2` without --cpu: the CPU only where there is no GPU
    assert alone({**ACCELERATE_CPU, "ACCELERATE_USE_CPU": "False"}) is not device


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["/v/bin/python", "/v/bin/accelerate", "launch", "--cpu", "--num_processes", "2",
             "-m", "codeparrot.training", "--data", "d"],
            Request(num_processes=2, num_machines=1),
        ),
        (
            ["python", "-m", "accelerate.commands.launch", "--cpu", "--num-processes=3",
             "--num_machines", "1", "-m", "codeparrot.training"],
            Request(num_processes=3, num_machines=1),
        ),
        (["python", "-m", "codeparrot.training", "--data", "d"], None),
    ],
)  # fmt: skip
def test_requested_processes_come_from_the_launch_command_line(argv, expected):
    assert requested(argv) == expected


def test_torchrun_command_keeps_the_address_and_the_training_arguments():
    argv = torchrun_argv(Request(2, 1), ACCELERATE_CPU, ["--data", "d"])
    assert argv[:3] == [sys.executable, "-m", "torch.distributed.run"]
    assert argv[argv.index("--nproc_per_node") + 1] == "2"
    assert argv[argv.index("--master_port") + 1] == "29500"
    assert argv[-4:] == ["-m", "codeparrot.training", "--data", "d"]
    free = torchrun_argv(Request(2, 1), {**ACCELERATE_CPU, "MASTER_PORT": "0"}, [])
    assert int(free[free.index("--master_port") + 1]) > 0
