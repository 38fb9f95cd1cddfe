"""Servers started by these tests record acceptance statistics under a temporary state
directory, never the user's; a checkpoint that always suggests, for the tests that need a
suggestion to check what happens to it."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest


@pytest.fixture(scope="session", autouse=True)
def private_state_dir(tmp_path_factory: pytest.TempPathFactory):
    state = tmp_path_factory.mktemp("state")
    before = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(state)
    yield state
    if before is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = before


def build_suggesting_checkpoint(source: Path, out: Path) -> tuple[Path, str]:
    """A copy of ``source`` (a tiny GPT-2) whose weights make greedy decoding answer any
    prompt with one word and a line end: the blocks add nothing to the residual stream, so
    the next token is a function of the current one alone, and the tied embeddings are set
    so that every token but the word is followed by the word, and the word by "\\n".
    Returns the checkpoint and the word."""
    import shutil

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    shutil.copytree(source, out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    word_id = next(
        i
        for i in range(len(tokenizer))
        if re.fullmatch(r"[a-z]{4,}", tokenizer.decode([i]))  # no space, not an edge case
    )
    newline_id = tokenizer.convert_tokens_to_ids("Ċ")  # the byte-level symbol of "\n"
    assert tokenizer.decode([newline_id]) == "\n"
    generator = torch.Generator().manual_seed(0)
    width = model.config.n_embd
    a, b = (torch.randn(width, generator=generator) for _ in range(2))
    a -= a.mean()  # centred: LayerNorm only rescales them
    b -= b.mean()
    a /= a.norm()
    b -= (b @ a) * a
    b /= b.norm()
    t = model.transformer
    with torch.no_grad():
        for block in t.h:
            for layer in (block.attn.c_proj, block.mlp.c_proj):
                layer.weight.zero_()
                layer.bias.zero_()
        t.wpe.weight.zero_()
        t.ln_f.weight.fill_(1.0)
        t.ln_f.bias.zero_()
        # logits = wte @ LayerNorm(wte[current]): after any token (a): the word scores 2x
        # the others; after the word (2a + 2b): "\n" (5b) scores 1.25x the word
        t.wte.weight.copy_(a.expand_as(t.wte.weight))
        t.wte.weight[word_id] = 2 * a + 2 * b
        t.wte.weight[newline_id] = 5 * b
    model.save_pretrained(out)
    return out, tokenizer.decode([word_id])


@pytest.fixture(scope="session")
def suggesting_checkpoint(tiny_checkpoint: Path, tmp_path_factory) -> tuple[Path, str]:
    """(checkpoint, word): a tiny GPT-2 that suggests ``word`` wherever it is asked."""
    return build_suggesting_checkpoint(
        tiny_checkpoint, tmp_path_factory.mktemp("suggesting") / "ckpt"
    )
