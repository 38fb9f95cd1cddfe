"""Exact and near dedup, split by repository and decontamination as pure functions."""

from __future__ import annotations

import random

import pytest

from codeparrot.data.decontaminate import build_index, humaneval_index, humaneval_snippets
from codeparrot.data.dedup import minhash_signature, near_duplicate_clusters, tokens
from codeparrot.data.filters import content_hash
from codeparrot.data.split import assign_splits


def program(i: int, n: int = 60) -> str:
    """A distinct synthetic module: its identifiers are unique to ``i``."""
    return "\n".join(
        f"def func_{i}_{j}(arg_{i}_{j}):\n    return arg_{i}_{j} * {j}" for j in range(n)
    )


def near_copy(text: str) -> str:
    """``text`` with one extra function: Jaccard of token sets well above 0.85."""
    return text + "\ndef extra_helper(value):\n    return value\n"


def test_tokens_split_on_non_identifier_characters():
    assert tokens("foo.bar(baz_1, 'x')  # qux") == {"foo", "bar", "baz_1", "x", "qux"}


def test_short_files_get_no_signature():
    assert minhash_signature("a b c d e f g h i", min_tokens=10) is None
    assert minhash_signature(program(0), min_tokens=10) is not None


def test_near_duplicates_clustered_and_distinct_files_kept():
    texts = {f"f{i}": program(i) for i in range(5)}
    texts["f0_copy"] = near_copy(texts["f0"])
    texts["f0_copy2"] = near_copy(near_copy(texts["f0"]))
    texts["tiny"] = "x = 1"
    sigs = [(content_hash(t), minhash_signature(t)) for t in texts.values()]
    report = near_duplicate_clusters(sigs)
    assert report.skipped_short == 1
    assert len(report.removed) == 2
    assert len(report.clusters) == 1
    family = {content_hash(texts[k]) for k in ("f0", "f0_copy", "f0_copy2")}
    (rep,) = report.clusters
    assert rep in family and set(report.removed) == family - {rep}
    summary = report.summary()
    assert summary["kept"] == 1 and summary["removed"] == 2 and summary["largest_cluster"] == 3


@pytest.mark.parametrize("seed", range(4))
def test_near_dedup_is_order_independent(seed):
    base = [program(i, 40) for i in range(12)]
    texts = base + [near_copy(t) for t in base[:6]] + [near_copy(near_copy(t)) for t in base[:3]]
    sigs = [(content_hash(t), minhash_signature(t)) for t in texts]
    expected = near_duplicate_clusters(sigs)
    shuffled = sigs[:]
    random.Random(seed).shuffle(shuffled)
    again = near_duplicate_clusters(shuffled)
    assert again.removed == expected.removed
    assert {k: sorted(v) for k, v in again.clusters.items()} == {
        k: sorted(v) for k, v in expected.clusters.items()
    }
    assert len(expected.removed) == 9


def test_split_keeps_repositories_whole_and_is_deterministic():
    sizes = {f"repo{i}": (i % 7) + 1 for i in range(200)}
    splits = assign_splits(sizes, 0.1, seed=3)
    assert set(splits) == set(sizes) and set(splits.values()) == {"train", "valid"}
    valid_files = sum(sizes[r] for r, s in splits.items() if s == "valid")
    assert 0.05 * sum(sizes.values()) < valid_files <= 0.1 * sum(sizes.values())
    reordered = dict(reversed(list(sizes.items())))
    assert assign_splits(reordered, 0.1, seed=3) == splits
    assert assign_splits(sizes, 0.1, seed=4) != splits


def test_split_never_leaves_valid_empty_with_two_repositories():
    splits = assign_splits({"big": 1000, "small": 1}, 0.0001, seed=0)
    assert splits == {"big": "train", "small": "valid"}
    assert assign_splits({"only": 5}, 0.5) == {"only": "train"}
    assert set(assign_splits({"a": 1, "b": 1}, 0.0).values()) == {"train"}


def test_decontamination_finds_prompts_and_solutions_even_reindented():
    index = humaneval_index(min_lines=3)
    snippets = humaneval_snippets()
    assert index.indexed + index.too_short == len(snippets) == 328
    prompt = snippets[0]
    assert index.contains_snippet("import os\n\n" + prompt + "    pass\n")
    reindented = "\n".join("    " + line for line in prompt.splitlines())
    assert index.contains_snippet("class Wrapper:\n" + reindented)
    partial = "\n".join(prompt.splitlines()[:3])
    assert not index.contains_snippet(partial)
    assert not index.contains_snippet("def unrelated():\n    return 42\n" * 20)


def test_short_snippets_are_not_indexed():
    index = build_index(["    return a + b\n", "x = 1\ny = 2\nz = 3\n"], min_lines=3)
    assert index.indexed == 1 and index.too_short == 1
    assert not index.contains_snippet("def add(a, b):\n    return a + b\n")
    assert index.contains_snippet("q = 0\nx = 1\n  y = 2\nz = 3\n")


def test_signature_equals_datasketch_minhash_with_the_same_token_hash():
    import numpy as np
    from datasketch import MinHash

    from codeparrot.data.dedup import token_hash

    text = program(3, 2000)  # more tokens than one block of the vectorised loop
    m = MinHash(num_perm=256, hashfunc=token_hash)
    m.update_batch([t.encode() for t in tokens(text)])
    assert np.array_equal(minhash_signature(text), m.hashvalues)
    assert minhash_signature(text, num_perm=64).shape == (64,)


def test_token_bytes_match_the_regex_tokens_on_any_text():
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from codeparrot.data.dedup import token_bytes

    @settings(max_examples=300, deadline=None)
    @given(st.text(alphabet=st.sampled_from("ab_Z09 .(\n\té→ü€\u00a0")) | st.text())
    def check(text):
        assert token_bytes(text) == {t.encode() for t in tokens(text)}

    check()


def test_generic_snippets_are_left_out_by_size():
    gcd = "    while b:\n        a, b = b, a % b\n    return a\n"
    numpy_like = "def _gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a\n"
    assert build_index([gcd], min_lines=3).contains_snippet(numpy_like)
    strict = build_index([gcd], min_lines=3, min_chars=40)
    assert strict.too_short == 1 and not strict.contains_snippet(numpy_like)
    assert humaneval_index(min_lines=3, min_chars=0).contains_snippet(numpy_like)
    assert not humaneval_index(min_lines=3, min_chars=40).contains_snippet(numpy_like)
