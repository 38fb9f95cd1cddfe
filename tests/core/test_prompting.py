"""The one prompt builder of the editor and the line benchmark: budget, shares, line cuts."""

from __future__ import annotations

import pytest

from codeparrot.prompting import prompt_budget, prompt_parts, prompt_quantum, window_start


def build_prompt(*args, **kwargs):
    """(text before the gap, suffix) of :func:`prompt_parts`."""
    parts = prompt_parts(*args, **kwargs)
    return parts.text, parts.suffix


def count(text: str) -> int:
    """A stand-in token counter: one token per 4 characters, rounded up."""
    return -(-len(text) // 4)


BEFORE = "".join(f"value_{i} = compute({i})\n" for i in range(200)) + "total = "
# what the prefix may leave unused: its start's step (in characters), a line (~7 tokens)
# and the 5% that fit_prefix cuts beyond its estimate
SLACK = count("x" * prompt_quantum(200)) + 8 + 200 // 20
AFTER = "".join(f"\nresult_{i} = finish({i})" for i in range(200))


@pytest.mark.parametrize("share", [0.1, 0.25, 0.5])
def test_the_suffix_takes_at_most_its_share_in_whole_lines_and_the_prefix_the_rest(share):
    prefix, suffix = build_prompt(count, BEFORE, AFTER, 200, suffix_share=share)
    assert suffix is not None and AFTER.startswith(suffix)
    assert count(suffix) <= int(200 * share)
    assert suffix.endswith("\n")  # whole lines: the rest of the cursor's line, then lines
    one_more = AFTER[: AFTER.index("\n", len(suffix)) + 1]
    assert count(one_more) > int(200 * share)  # as many lines as fit
    assert BEFORE.endswith(prefix) and prefix.startswith("value_")  # cut at a line start
    # with the three FIM sentinels, within the budget and its one spare token
    assert count(prefix) + count(suffix) + 3 <= 200 + 1
    # the prefix fills the rest, but for its start's step and a line
    assert count(prefix) > 200 - count(suffix) - SLACK


def test_no_suffix_without_fim_a_share_or_text_after_the_cursor():
    alone, _ = build_prompt(count, BEFORE, "", 200, suffix_share=0.25)
    assert build_prompt(count, BEFORE, AFTER, 200, suffix_share=0.0) == (alone, None)
    assert build_prompt(count, BEFORE, AFTER, 200, suffix_share=0.25, fim=False) == (alone, None)
    assert build_prompt(count, BEFORE, "\n  \n", 200, suffix_share=0.25) == (alone, None)
    assert count(alone) <= 200 and count(alone) > 200 - SLACK


def test_workspace_snippets_come_first_within_their_share():
    other = ("file:///w/lib/helpers.py", "def compute(i):\n    return value_1 + i\n")
    prompt, suffix = build_prompt(
        count, BEFORE, AFTER, 200, suffix_share=0.25, others=[other], workspace_share=0.3
    )
    assert prompt.startswith("# Path: lib/helpers.py\n# def compute(i):\n")
    snippets = prompt[: prompt.index("value_")]
    assert count(snippets) <= 60 and count(prompt) + count(suffix or "") <= 200
    # share 0: the same prompt as without the documents
    without = build_prompt(count, BEFORE, AFTER, 200, suffix_share=0.25)
    assert build_prompt(count, BEFORE, AFTER, 200, suffix_share=0.25, others=[other]) == without


def test_the_budget_leaves_room_for_the_new_tokens_and_keeps_to_the_editor_limit():
    assert prompt_budget(256, 768, 32) == (223, 32)
    assert prompt_budget(4096, 768, 32) == (768, 32)
    assert prompt_budget(64, 768, 500) == (31, 32)  # new tokens take at most half
    for context, new in [(256, 32), (1024, 96), (64, 500)]:
        prompt, n = prompt_budget(context, 10_000, new)
        assert prompt + n < context


def test_the_window_starts_on_the_grid_then_at_a_line_start():
    text = "".join(f"line {i:04d}\n" for i in range(1000))  # 10 characters a line
    start = window_start(text, len(text), 1000, grid=64)
    assert text[start - 1] == "\n" and len(text) - start <= 1000 + 64
    # typing at the end does not move it
    assert window_start(text + "abc", len(text) + 3, 1000, grid=64) == start
    assert window_start(text, 50, 1000) == 0


def test_a_prompt_with_a_suffix_leaves_room_for_the_three_sentinels():
    """Prefix + suffix + <fim_prefix> <fim_suffix> <fim_middle> fit the budget (and its one
    spare token) at every budget, so the engine never cuts another line of the prefix."""
    for budget in range(40, 400, 7):
        prefix, suffix = build_prompt(count, BEFORE, AFTER, budget, suffix_share=0.25)
        assert suffix is not None
        assert count(prefix) + count(suffix) + 3 <= budget + 1
