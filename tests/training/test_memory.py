"""Bad input only the device reveals: refused before the first step, naming the flag and a
batch that would fit (the device and its out-of-memory faked: this suite runs on CPUs)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from codeparrot.errors import ConfigError
from codeparrot.training import memory as memory_module
from codeparrot.training import train
from codeparrot.training.memory import (
    GIB,
    check_batch_fits,
    check_fp16_scaler,
    memory_floor,
)
from codeparrot.training.sharded import check_shardable

from .test_training_loop import tiny_config, write_corpus

GPT2_SMALL = dict(parameters=124_000_000, n_layer=12, width=768, vocab_size=50_257)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_corpus(tmp_path_factory.mktemp("corpus"))


def fake_gpu(monkeypatch, name="NVIDIA L4", gib=24):
    monkeypatch.setattr(memory_module, "device_memory", lambda _device: (name, gib * GIB))


def test_a_batch_beyond_the_device_names_the_flag_and_one_that_fits(monkeypatch):
    fake_gpu(monkeypatch)
    floor = memory_floor(**GPT2_SMALL, seq_length=1024, optimizer="adamw",
                         mixed_precision="bf16", gradient_checkpointing=False)  # fmt: skip
    config = SimpleNamespace(batch_size=256, gradient_accumulation_steps=1, seq_length=1024)
    with pytest.raises(ConfigError) as caught:
        check_batch_fits(config, floor, "cuda:0")
    message = str(caught.value)
    assert message.startswith("--batch-size 256:") and "NVIDIA L4" in message
    fits = floor.largest_batch(24 * GIB)
    assert 1 <= fits < 256 and f"--batch-size {fits} would fit" in message
    assert floor.total(fits) <= 24 * GIB < floor.total(fits + 1)
    check_batch_fits(SimpleNamespace(**{**vars(config), "batch_size": fits}), floor, "cuda:0")


def test_gradient_checkpointing_and_bf16_lower_the_floor():
    shape = dict(**GPT2_SMALL, seq_length=1024, optimizer="adamw")
    fp32 = memory_floor(**shape, mixed_precision="no", gradient_checkpointing=False)
    bf16 = memory_floor(**shape, mixed_precision="bf16", gradient_checkpointing=False)
    checkpointed = memory_floor(**shape, mixed_precision="bf16", gradient_checkpointing=True)
    assert fp32.per_sequence > bf16.per_sequence > checkpointed.per_sequence
    assert fp32.fixed == bf16.fixed == 124_000_000 * 16  # fp32 weights, grads, two moments


def test_a_run_whose_batch_cannot_fit_stops_before_any_step(
    tmp_path, corpus, tiny_checkpoint, monkeypatch
):
    fake_gpu(monkeypatch, gib=0)  # nothing fits beside the weights
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"--batch-size 4: .*no batch fits"):
        train(tiny_config(corpus, tiny_checkpoint, out))
    assert not (out / "checkpoints").exists() and not (out / "metrics.jsonl").exists()


def test_an_out_of_memory_in_the_first_steps_says_which_batch_would_fit(
    tmp_path, corpus, tiny_checkpoint, monkeypatch
):
    import torch

    import codeparrot.training.loop as loop

    def out_of_memory(run):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")

    monkeypatch.setattr(loop, "train_step", out_of_memory)
    with pytest.raises(ConfigError) as caught:
        train(tiny_config(corpus, tiny_checkpoint, tmp_path / "run"))
    message = str(caught.value)
    assert message.startswith("--batch-size 4:") and "ran out of memory in step 1" in message
    assert "--batch-size 2 with --gradient-accumulation-steps 2" in message
    assert isinstance(caught.value.__cause__, torch.OutOfMemoryError)


def test_fp16_without_a_gradient_scaler_is_refused():
    no_scaler = SimpleNamespace(scaler=None, distributed_type="FSDP", device="cuda:0")
    with pytest.raises(ConfigError, match=r"--mixed-precision fp16: .*bf16"):
        check_fp16_scaler("fp16", no_scaler)
    check_fp16_scaler("fp16", SimpleNamespace(scaler=object()))
    check_fp16_scaler("bf16", no_scaler)


def test_muon_under_fsdp_is_refused_before_any_work(tmp_path, corpus, tiny_checkpoint, monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"--optimizer muon cannot train under FSDP.*adamw"):
        train(tiny_config(corpus, tiny_checkpoint, out, optimizer="muon"))
    assert not out.exists()
    check_shardable("adamw", {"ACCELERATE_USE_FSDP": "true"})
    check_shardable("muon", {})


SMALL = dict(parameters=85_000_000, n_layer=12, width=768, vocab_size=8_192, seq_length=1024)


def test_on_a_cpu_activations_are_float32_and_attention_dropout_keeps_every_score():
    # measured on the small preset under bf16 autocast on a CPU (training/memory.py):
    # 0.69 GiB a sequence without dropout, 2.53 GiB with attention dropout 0.1
    def per_sequence(**kw):
        return memory_floor(**SMALL, optimizer="adamw", mixed_precision="bf16",
                            gradient_checkpointing=False, n_head=12, **kw).per_sequence  # fmt: skip

    gpu = per_sequence(device_type="cuda", attention_dropout=0.1)
    cpu = per_sequence(device_type="cpu")
    cpu_dropout = per_sequence(device_type="cpu", attention_dropout=0.1)
    assert gpu < cpu < cpu_dropout
    assert 0.6e9 < cpu < 0.8e9 and 2.4e9 < cpu_dropout < 2.9e9


def test_the_host_memory_is_the_smaller_of_memavailable_and_the_cgroup_limit(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal: 24000000 kB\nMemAvailable:   20000000 kB\n")
    cgroup = tmp_path / "cgroup"
    cgroup.mkdir()
    assert memory_module.host_available_memory(meminfo, cgroup) == 20_000_000 * 1024
    (cgroup / "memory.max").write_text("max\n")
    assert memory_module.host_available_memory(meminfo, cgroup) == 20_000_000 * 1024
    (cgroup / "memory.max").write_text(str(8 * GIB))
    (cgroup / "memory.current").write_text(str(3 * GIB))
    assert memory_module.host_available_memory(meminfo, cgroup) == 5 * GIB
    assert memory_module.host_available_memory(tmp_path / "none", tmp_path / "none") is None


def test_processes_on_one_cpu_machine_share_its_memory(monkeypatch):
    monkeypatch.setattr(memory_module, "host_available_memory", lambda: 20 * GIB)
    floor = memory_floor(**SMALL, optimizer="adamw", mixed_precision="bf16",
                         gradient_checkpointing=False, device_type="cpu")  # fmt: skip
    config = SimpleNamespace(batch_size=12, gradient_accumulation_steps=1, seq_length=1024)
    device = SimpleNamespace(type="cpu")
    check_batch_fits(config, floor, device, sharing=2)  # ~9.2 GiB of 10
    with pytest.raises(ConfigError, match=r"a share of 3 processes; --batch-size \d+ would fit"):
        check_batch_fits(config, floor, device, sharing=3)


def test_a_cpu_run_beyond_the_machines_memory_stops_before_any_step(
    tmp_path, corpus, tiny_checkpoint, monkeypatch
):
    monkeypatch.setattr(memory_module, "host_available_memory", lambda: 1024)
    out = tmp_path / "run"
    with pytest.raises(ConfigError, match=r"--batch-size 4: .*this machine's available memory"):
        train(tiny_config(corpus, tiny_checkpoint, out))
    assert not (out / "checkpoints").exists() and not (out / "metrics.jsonl").exists()


def test_an_out_of_memory_on_a_gpu_names_the_device_and_a_batch_from_its_memory(monkeypatch):
    """On CUDA the batch that would fit comes from the device's memory (aiming at half of
    what the floor allows, since the peak passed it), not from halving the batch."""
    import re

    fake_gpu(monkeypatch, name="NVIDIA H200", gib=139)
    floor = memory_floor(**GPT2_SMALL, seq_length=1024, optimizer="adamw",
                         mixed_precision="bf16", gradient_checkpointing=False)  # fmt: skip
    config = SimpleNamespace(batch_size=256, gradient_accumulation_steps=2, seq_length=1024)
    message = memory_module.out_of_memory_message(config, floor, SimpleNamespace(type="cuda"), 2)
    assert message.startswith("--batch-size 256: NVIDIA H200 (139.0 GiB) ran out of memory in "
                              "step 2, one of the first; --batch-size ")  # fmt: skip
    fits, accumulate = map(int, re.search(
        r"--batch-size (\d+) would fit \(with --gradient-accumulation-steps (\d+)", message
    ).groups())  # fmt: skip
    half_the_floor = memory_module.MemoryFloor(floor.fixed, 2 * floor.per_sequence)
    assert fits == half_the_floor.largest_batch(139 * GIB) and 1 <= fits < 128
    assert fits * accumulate >= 256 * 2 > fits * (accumulate - 1)  # the same tokens a step
