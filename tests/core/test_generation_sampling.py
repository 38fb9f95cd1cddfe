"""Sampling laws: greedy, temperature, top-k and the sort-free nucleus sampler.

Thousands of rows with the same logits are sampled in one call, so the empirical law
is compared with the exact one (fixed seeds: the tests are deterministic).
"""

from __future__ import annotations

import pytest
import torch

from codeparrot.generation import GenerationConfig
from codeparrot.generation.engine import _sample, _sample_nucleus_sorted

PROBS = torch.tensor([0.40, 0.25, 0.15, 0.10, 0.06, 0.04])  # top_p values below avoid its sums
ROWS = 20_000


def law(tokens: torch.Tensor, vocab: int) -> torch.Tensor:
    return torch.bincount(tokens, minlength=vocab).float() / len(tokens)


def draw(config: GenerationConfig, probs: torch.Tensor = PROBS, seed: int = 0) -> torch.Tensor:
    logits = probs.log().expand(ROWS, -1).clone()
    return _sample(logits, config, torch.Generator().manual_seed(seed))


def nucleus(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The textbook nucleus law: the smallest most-likely prefix holding top_p, renormalised."""
    ordered, order = probs.sort(descending=True)
    keep = ordered.cumsum(0) - ordered < top_p
    out = torch.zeros_like(probs)
    out[order[keep]] = ordered[keep]
    return out / out.sum()


def test_greedy_takes_the_most_likely_token():
    logits = torch.tensor([[0.1, 3.0, 2.9], [5.0, -1.0, 4.0]])
    assert _sample(logits, GenerationConfig(temperature=0), None).tolist() == [1, 0]


def test_temperature_one_without_truncation_samples_the_model_law():
    got = law(draw(GenerationConfig(temperature=1.0, top_p=1.0)), len(PROBS))
    assert torch.allclose(got, PROBS, atol=0.015)


def test_low_temperature_sharpens():
    got = law(draw(GenerationConfig(temperature=0.25, top_p=1.0)), len(PROBS))
    sharp = PROBS**4 / (PROBS**4).sum()
    assert torch.allclose(got, sharp, atol=0.015)
    assert got[0] > 0.8


@pytest.mark.parametrize("top_p", [0.5, 0.7, 0.85, 0.95])
def test_nucleus_sampling_keeps_exactly_the_nucleus(top_p):
    expected = nucleus(PROBS, top_p)
    got = law(draw(GenerationConfig(temperature=1.0, top_p=top_p)), len(PROBS))
    assert set(got.nonzero().flatten().tolist()) == set(expected.nonzero().flatten().tolist())
    assert torch.allclose(got, expected, atol=0.015)


def test_sorted_fallback_has_the_same_law():
    probs = PROBS.expand(ROWS, -1)
    got = law(_sample_nucleus_sorted(probs, 0.85, torch.Generator().manual_seed(1)), len(PROBS))
    assert torch.allclose(got, nucleus(PROBS, 0.85), atol=0.015)


def test_small_top_p_needs_several_rounds_and_still_keeps_the_law():
    # top_p 0.05: only the first token is in the nucleus; most first draws are rejected
    got = law(draw(GenerationConfig(temperature=1.0, top_p=0.05)), len(PROBS))
    assert got.tolist() == [1.0, 0, 0, 0, 0, 0]


def test_top_k_keeps_the_k_most_likely():
    got = law(draw(GenerationConfig(temperature=1.0, top_p=1.0, top_k=2)), len(PROBS))
    expected = torch.zeros_like(PROBS)
    expected[:2] = PROBS[:2] / PROBS[:2].sum()
    assert torch.allclose(got, expected, atol=0.015)


def test_top_k_and_top_p_together():
    # top-k 4 renormalises to [.444, .278, .167, .111]; top-p 0.7 then keeps two
    got = law(draw(GenerationConfig(temperature=1.0, top_p=0.7, top_k=4)), len(PROBS))
    assert set(got.nonzero().flatten().tolist()) == {0, 1}


def test_the_same_seed_draws_the_same_tokens():
    config = GenerationConfig(temperature=0.8, top_p=0.9)
    assert torch.equal(draw(config, seed=3), draw(config, seed=3))
    assert not torch.equal(draw(config, seed=3), draw(config, seed=4))


def test_zero_weight_tokens_are_never_drawn_even_at_the_edges_of_the_draw():
    from codeparrot.generation.engine import _draw

    # zero weights first, last and between: a draw of exactly 0 or of almost the total
    # must still land on a token with weight
    weights = torch.tensor([0.0, 0.0, 0.3, 0.0, 0.7, 0.0]).expand(ROWS, -1).contiguous()
    tokens = _draw(weights, torch.Generator().manual_seed(3))
    assert set(tokens.tolist()) == {2, 4}
    assert abs(law(tokens, 6)[4].item() - 0.7) < 0.01
    # unnormalised weights are drawn in proportion
    tokens = _draw(torch.tensor([[2.0, 6.0]]).expand(ROWS, -1), torch.Generator().manual_seed(4))
    assert abs(law(tokens, 2)[1].item() - 0.75) < 0.01


def test_min_p_drops_tokens_under_its_share_of_the_top_one():
    # min_p 0.3: tokens under 0.3 * 0.40 = 0.12 go; the law is the rest renormalised
    got = law(draw(GenerationConfig(temperature=1.0, top_p=1.0, min_p=0.3)), len(PROBS))
    expected = torch.where(PROBS >= 0.12, PROBS, 0.0)
    assert torch.allclose(got, expected / expected.sum(), atol=0.015)


def test_min_p_and_top_p_together_keep_the_nucleus_of_what_min_p_left():
    # min_p 0.2 keeps [.40, .25, .15, .10] (renormalised .444 .278 .167 .111); top_p 0.7: two
    got = law(draw(GenerationConfig(temperature=1.0, top_p=0.7, min_p=0.2)), len(PROBS))
    assert set(got.nonzero().flatten().tolist()) == {0, 1}
