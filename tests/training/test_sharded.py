"""FSDP: Muon refused (test_memory.py), and the state saved, resumed bitwise and exported
with tied weights. Accelerate forms no FSDP setup on a CPU (its FSDP branch is for
accelerator devices), so the test drives codeparrot's save_state / load_state / export
under torch's own FSDP2 (fully_shard) in two gloo processes on CPU."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from codeparrot.training.sharded import export_state_dict, tied_names, with_tied

WORKER = Path(__file__).with_name("fsdp_cpu_worker.py")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_tied_names_are_dropped_from_an_export_and_restored_for_loading(tiny_checkpoint):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint)
    assert tied_names(model) == {"lm_head.weight": "transformer.wte.weight"}
    full = model.state_dict()
    export = export_state_dict(model, full)
    assert "lm_head.weight" not in export and "transformer.wte.weight" in export
    assert with_tied(model, export)["lm_head.weight"] is export["transformer.wte.weight"]


def test_fsdp2_state_resumes_bitwise_and_exports_a_tied_model(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    done = subprocess.run(
        [sys.executable, str(WORKER), str(tmp_path), str(free_port())],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["bitwise"] and result["step"] == 2
    # the export names every weight once: the embedding, not the output layer tied to it
    assert "lm_head.weight" not in result["keys"] and "transformer.wte.weight" in result["keys"]
    assert len(result["keys"]) == 28  # 2 blocks of 12 weights, wte, wpe and ln_f's 2
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "export")
    assert model.get_input_embeddings().weight is model.get_output_embeddings().weight
    expected = torch.tensor(result["weights"]["transformer.wte.weight"])
    assert torch.equal(model.transformer.wte.weight.detach(), expected)
