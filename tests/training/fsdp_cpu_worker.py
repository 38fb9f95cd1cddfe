"""Two gloo processes on CPU train a tied GPT-2 under FSDP2 (fully_shard), its optimizer
wrapped by Accelerate as training's is, save the state with codeparrot's save_state, resume
it into a differently initialised model and export it: what tests/training/test_sharded.py
checks. Usage: python fsdp_cpu_worker.py OUT PORT"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace


def build(seed: int, mesh):
    import torch
    from torch.distributed.fsdp import fully_shard
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=16,
                        bos_token_id=0, eos_token_id=0, resid_pdrop=0.0, embd_pdrop=0.0,
                        attn_pdrop=0.0)  # fmt: skip
    model = GPT2LMHeadModel(config)
    for block in model.transformer.h:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    from accelerate.optimizer import AcceleratedOptimizer

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1.0 / (1 + s))
    # the optimizer as training holds it: Accelerate's wrapper (accelerator.prepare's)
    return model, AcceleratedOptimizer(optimizer, device_placement=False), scheduler


def step(model, optimizer, scheduler, n: int, rank: int) -> None:
    import torch

    ids = torch.randint(0, 64, (2, 16), generator=torch.Generator().manual_seed(100 * n + rank))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()


def worker(rank: int, world: int, out: str, port: int) -> None:
    import torch
    import torch.distributed as dist
    from accelerate.utils import DistributedType
    from torch.distributed.device_mesh import init_device_mesh

    from codeparrot.training.resume_state import load_state, save_state
    from codeparrot.training.sharded import export_weights, gather_full_state

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    # Accelerate's state over this process group (its optimizer wrapper reads it)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank))
    from accelerate import Accelerator

    Accelerator(cpu=True)
    mesh = init_device_mesh("cpu", (world,))
    acc = SimpleNamespace(distributed_type=DistributedType.FSDP, is_main_process=rank == 0,
                          process_index=rank, unwrap_model=lambda m: m, scaler=None, step=0)  # fmt: skip
    state = Path(out) / "state"
    model, optimizer, scheduler = build(0, mesh)
    for n in range(2):
        step(model, optimizer, scheduler, n, rank)
    save_state(state, accelerator=acc, model=model, optimizer=optimizer, scheduler=scheduler,
               train_state={"step": 2})  # fmt: skip
    dist.barrier()
    step(model, optimizer, scheduler, 2, rank)
    straight, _ = gather_full_state(model, optimizer)

    model, optimizer, scheduler = build(1, mesh)  # other weights: all must come from the state
    saved = load_state(state, accelerator=acc, model=model, optimizer=optimizer,
                       scheduler=scheduler)  # fmt: skip
    step(model, optimizer, scheduler, 2, rank)
    resumed, _ = gather_full_state(model, optimizer)
    export = export_weights(acc, model)
    if rank == 0:
        keys = sorted(export)  # before saving: save_pretrained empties the dict it is given
        model.save_pretrained(Path(out) / "export", state_dict=export)
        same = sorted(straight) == sorted(resumed) and all(
            torch.equal(straight[k], resumed[k]) for k in straight
        )
        result = {"bitwise": same, "step": saved["step"], "keys": keys,
                  "weights": {k: v.tolist() for k, v in resumed.items() if "wte" in k}}  # fmt: skip
        (Path(out) / "result.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()
    # Leave without the C++ runtime's teardown: now and then a worker thread of the
    # process group was still joinable there, and the process aborted ("terminate called
    # without an active exception") after its work was done and written.
    os._exit(0)


if __name__ == "__main__":
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(2, sys.argv[1], int(sys.argv[2])), nprocs=2)
