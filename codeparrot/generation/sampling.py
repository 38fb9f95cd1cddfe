"""Sampling maths: the next token of each row from its logits (greedy, top-k, min-p, top-p)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from codeparrot.generation.config import GenerationConfig


def sample_next(logits: Any, config: GenerationConfig, generator: Any) -> Any:
    """Next token of each row (B, V) -> (B,): greedy, or a draw from the top-k / min-p /
    top-p law (min-p: tokens under ``min_p`` times the top token's probability dropped).

    Nucleus sampling without sorting the vocabulary (a sort of every row was the most
    expensive part of a step at n = 20): draw from the whole distribution and accept
    the token when the tokens more likely than it hold less than ``top_p`` of the mass,
    i.e. when it belongs to the nucleus; other rows draw again. An accepted token is
    distributed exactly as in the renormalised nucleus, and a draw is accepted with
    probability >= ``top_p``, so a second round is rare. Rows still unlucky after a few
    rounds take the sorted path.
    """
    import torch

    if config.temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / config.temperature
    if 0 < config.top_k < logits.size(-1):
        kth = torch.topk(logits, config.top_k, dim=-1).values[:, -1, None]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if config.min_p > 0:
        floor = config.min_p * probs.max(dim=-1, keepdim=True).values  # (B, 1)
        probs = probs.masked_fill(probs < floor, 0.0)
        probs = probs / probs.sum(dim=-1, keepdim=True)
    tokens = draw(probs, generator)
    if config.top_p >= 1.0:
        return tokens
    pending = torch.arange(len(tokens), device=tokens.device)
    for _ in range(8):
        rows = probs[pending]  # (b, V)
        p_token = rows.gather(-1, tokens[pending, None])  # (b, 1)
        above = torch.where(rows > p_token, rows, 0.0).sum(dim=-1)  # mass ranked before it
        pending = pending[above >= config.top_p]
        if len(pending) == 0:
            return tokens
        tokens[pending] = draw(probs[pending], generator)
    tokens[pending] = sample_nucleus_sorted(probs[pending], config.top_p, generator)
    return tokens


def sample_nucleus_sorted(probs: Any, top_p: float, generator: Any) -> Any:
    """Textbook nucleus sampling: sort, keep the smallest prefix with ``top_p`` of the mass."""
    import torch

    sorted_probs, order = torch.sort(probs, descending=True, dim=-1)
    # drop a token when the mass before it already reaches top_p (always keeps the first)
    drop = sorted_probs.cumsum(dim=-1) - sorted_probs >= top_p
    sorted_probs = sorted_probs.masked_fill(drop, 0.0)
    picked = draw(sorted_probs, generator)
    return order.gather(-1, picked[:, None]).squeeze(-1)


def draw(probs: Any, generator: Any) -> Any:
    """One index per row of ``probs`` (B, V), drawn in proportion to the row's weights.

    Inverse-CDF sampling: one uniform per row against the row's cumulative sum (in
    float64, so a draw never lands past the total). On a CPU ~18x faster than
    ``torch.multinomial``, whose per-row setup dominated sampling at n = 20. With
    ``right=True`` the first index whose cumulative weight exceeds the draw is taken,
    which is never a zero-weight entry.
    """
    import torch

    cdf = probs.double().cumsum(dim=-1)
    u = torch.rand((len(probs), 1), generator=generator, dtype=torch.float64, device=probs.device)
    picked = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).squeeze(-1)
    return picked.clamp_(max=probs.size(-1) - 1)
