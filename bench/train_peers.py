"""The peers bench/train.py times our training step against, in plain PyTorch: nanoGPT's
GPT-2 and our Qwen3 blocks written the same way, and the copy of our weights into them (for
the check that both compute the same losses)."""

from __future__ import annotations

import torch


def gpt_peer(
    width: int, layers: int, heads: int, *, vocab: int, block: int, gelu: str, device: str
) -> torch.nn.Module:
    """nanoGPT's GPT-2: nn.Linear, SDPA causal attention, GELU (``gelu``: tanh or none, as ``F.gelu``'s ``approximate``), tied
    head, no dropout; ``forward(ids, targets)`` returns the fp32 loss."""
    import torch.nn.functional as F
    from torch import nn

    class Block(nn.Module):
        def __init__(self, width: int, heads: int) -> None:
            super().__init__()
            self.heads = heads
            self.ln_1, self.ln_2 = nn.LayerNorm(width), nn.LayerNorm(width)
            self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
            self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, c = x.shape
            q, k, v = (
                part.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                for part in self.qkv(self.ln_1(x)).split(c, dim=2)
            )
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            return x + self.down(F.gelu(self.up(self.ln_2(x)), approximate=gelu))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens, self.positions = nn.Embedding(vocab, width), nn.Embedding(block, width)
            self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
            self.ln_f = nn.LayerNorm(width)
            self.head = nn.Linear(width, vocab, bias=False)
            self.head.weight = self.tokens.weight
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            x = self.tokens(ids) + self.positions(torch.arange(ids.shape[1], device=ids.device))
            for block in self.blocks:
                x = block(x)
            logits = self.head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, vocab).float(), targets.reshape(-1))

    torch.manual_seed(0)
    return GPT().to(device)


def qwen_peer(preset: str, *, vocab: int, block: int, device: str) -> torch.nn.Module:
    """The preset's Qwen3 blocks in plain PyTorch the modded-nanogpt way (RMSNorm, rotary
    positions, RMS-normed queries and keys, SwiGLU, tied head, no biases)."""
    import torch.nn.functional as F
    from torch import nn

    from codeparrot.models.presets import get_preset

    shape = get_preset(preset)
    width, heads, layers = shape.n_embd, shape.n_head, shape.n_layer
    hidden, dim = shape.intermediate_size or 4 * width, width // heads

    def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        turned = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + turned * sin

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm_1, self.norm_2 = nn.RMSNorm(width, eps=1e-6), nn.RMSNorm(width, eps=1e-6)
            self.q_norm, self.k_norm = nn.RMSNorm(dim, eps=1e-6), nn.RMSNorm(dim, eps=1e-6)
            self.qkv = nn.Linear(width, 3 * width, bias=False)
            self.proj = nn.Linear(width, width, bias=False)
            self.gate_up = nn.Linear(width, 2 * hidden, bias=False)
            self.down = nn.Linear(hidden, width, bias=False)

        def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
            b, t, c = x.shape
            q, k, v = (part.view(b, t, heads, dim) for part in self.qkv(self.norm_1(x)).split(c, 2))
            q, k = rotate(self.q_norm(q), cos, sin), rotate(self.k_norm(k), cos, sin)
            y = F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            )
            x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
            gate, up = self.gate_up(self.norm_2(x)).chunk(2, dim=-1)
            return x + self.down(F.silu(gate) * up)

    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tokens = nn.Embedding(vocab, width)
            self.blocks = nn.ModuleList(Block() for _ in range(layers))
            self.norm = nn.RMSNorm(width, eps=1e-6)
            inv = 1.0 / 10000 ** (torch.arange(0, dim, 2).float() / dim)
            angles = torch.outer(torch.arange(block).float(), inv).repeat(1, 2)[:, None, :]
            self.register_buffer("cos", angles.cos(), persistent=False)
            self.register_buffer("sin", angles.sin(), persistent=False)
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
            x = self.tokens(ids)
            for block in self.blocks:
                x = block(x, self.cos, self.sin)
            logits = F.linear(self.norm(x), self.tokens.weight)  # tied head
            return F.cross_entropy(logits.view(-1, vocab).float(), targets.reshape(-1))

    if shape.architecture != "qwen3":
        raise SystemExit(f"--preset {preset}: the same-model peer is written for Qwen3 blocks")
    torch.manual_seed(0)
    return Model().to(device)


def copy_into_peer(
    ours: torch.nn.Module, peer: torch.nn.Module, architecture: str, block: int
) -> None:
    """Our Hugging Face model's weights into the peer's layout (GPT-2's Conv1D weights
    transposed; Qwen3's q/k/v and gate/up projections concatenated)."""
    theirs = {k: v.detach() for k, v in ours.state_dict().items()}
    mapped: dict[str, torch.Tensor] = {}
    if architecture == "gpt2":
        mapped["tokens.weight"] = theirs["transformer.wte.weight"]
        mapped["head.weight"] = mapped["tokens.weight"]  # tied
        mapped["positions.weight"] = theirs["transformer.wpe.weight"][:block]
        mapped["ln_f.weight"], mapped["ln_f.bias"] = (
            theirs["transformer.ln_f.weight"], theirs["transformer.ln_f.bias"])  # fmt: skip
        for i in range(len(peer.blocks)):
            h, b = f"transformer.h.{i}.", f"blocks.{i}."
            for name, ours_name in (("ln_1", "ln_1"), ("ln_2", "ln_2")):
                for part in ("weight", "bias"):
                    mapped[f"{b}{name}.{part}"] = theirs[f"{h}{ours_name}.{part}"]
            for name, ours_name in (("qkv", "attn.c_attn"), ("proj", "attn.c_proj"),
                                    ("up", "mlp.c_fc"), ("down", "mlp.c_proj")):  # fmt: skip
                mapped[f"{b}{name}.weight"] = theirs[f"{h}{ours_name}.weight"].t()
                mapped[f"{b}{name}.bias"] = theirs[f"{h}{ours_name}.bias"]
    else:
        mapped["tokens.weight"] = theirs["model.embed_tokens.weight"]
        mapped["norm.weight"] = theirs["model.norm.weight"]
        for i in range(len(peer.blocks)):
            h, b = f"model.layers.{i}.", f"blocks.{i}."
            mapped[f"{b}norm_1.weight"] = theirs[f"{h}input_layernorm.weight"]
            mapped[f"{b}norm_2.weight"] = theirs[f"{h}post_attention_layernorm.weight"]
            mapped[f"{b}q_norm.weight"] = theirs[f"{h}self_attn.q_norm.weight"]
            mapped[f"{b}k_norm.weight"] = theirs[f"{h}self_attn.k_norm.weight"]
            mapped[f"{b}qkv.weight"] = torch.cat(
                [theirs[f"{h}self_attn.{x}_proj.weight"] for x in "qkv"])  # fmt: skip
            mapped[f"{b}proj.weight"] = theirs[f"{h}self_attn.o_proj.weight"]
            mapped[f"{b}gate_up.weight"] = torch.cat(
                [theirs[f"{h}mlp.{x}_proj.weight"] for x in ("gate", "up")])  # fmt: skip
            mapped[f"{b}down.weight"] = theirs[f"{h}mlp.down_proj.weight"]
    missing = set(peer.state_dict()) - set(mapped)
    if missing:
        raise SystemExit(f"the peer's weights {sorted(missing)} have no counterpart in ours")
    peer.load_state_dict({k: v.clone() for k, v in mapped.items()}, strict=True)
