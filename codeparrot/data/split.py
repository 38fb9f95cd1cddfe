"""Train/validation split by repository (no repository has files in both), or by file.

Repositories are ranked by a seeded hash of their name and taken into ``valid`` in that
order while they fit the target number of files, so the split depends only on the set of
repositories and their sizes, never on the order files arrived in. Splitting by file (one
repository fine-tuned on) ranks single files, keyed by ``repo_name/path``, the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping


def repo_rank(seed: int, repo_name: str) -> str:
    return hashlib.sha256(f"{seed}\0{repo_name}".encode()).hexdigest()


def assign_splits(
    repo_sizes: Mapping[str, int], valid_fraction: float, seed: int = 0
) -> dict[str, str]:
    """Map each repository to ``"train"`` or ``"valid"``.

    ``valid`` gets whole repositories until it holds about ``valid_fraction`` of the files.
    With a positive fraction and at least two repositories it is never empty: if no
    repository fits, the smallest one goes there.
    """
    splits = dict.fromkeys(repo_sizes, "train")
    if valid_fraction <= 0 or len(repo_sizes) < 2:
        return splits
    total = sum(repo_sizes.values())
    target = valid_fraction * total
    taken = 0
    for repo in sorted(repo_sizes, key=lambda r: repo_rank(seed, r)):
        size = repo_sizes[repo]
        if taken + size <= target:
            splits[repo] = "valid"
            taken += size
    if taken == 0:
        smallest = min(repo_sizes, key=lambda r: (repo_sizes[r], repo_rank(seed, r)))
        splits[smallest] = "valid"
    return splits


def split_unit(split_by: str, repo_name: str, path: str) -> str:
    """The key :func:`assign_splits` places: the repository, or one file of it."""
    return repo_name if split_by == "repository" else f"{repo_name}/{path}"
