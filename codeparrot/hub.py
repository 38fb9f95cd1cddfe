"""Sharing artefacts on the Hugging Face Hub: ``--push-to-hub NAME`` of every stage.

:func:`preflight` runs before a stage does any work and fails with a message saying what
is missing (``huggingface_hub``, a token, the network); :func:`push_folder` uploads the
finished artefact afterwards. Checkpoints go to a branch named after the run, as the
CodeParrot reference does, so several runs share one model repository.

The environment is read when these functions are called (``HF_ENDPOINT``, ``HF_TOKEN``,
``HF_HUB_OFFLINE``, ``HF_TOKEN_PATH``, ``HF_HOME``), not when a module is imported.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from codeparrot.errors import CodeparrotError

DEFAULT_ENDPOINT = "https://huggingface.co"
REACH_TIMEOUT_S = 5.0
REPO_TYPES = ("model", "dataset")
_NAME = re.compile(r"^(?:[\w.-]+/)?[\w.-]+$")


@dataclass(frozen=True)
class HubTarget:
    """Where a stage will push: checked by :func:`preflight` before the stage runs."""

    repo_id: str
    repo_type: str
    endpoint: str
    token: str
    user: str | None


def hub_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def token_file() -> Path:
    """The file ``hf auth login`` writes the token to."""
    if os.environ.get("HF_TOKEN_PATH"):
        return Path(os.path.expanduser(os.environ["HF_TOKEN_PATH"]))
    if os.environ.get("HF_HOME"):
        home = Path(os.path.expanduser(os.environ["HF_HOME"]))
    else:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
        home = Path(os.path.expanduser(cache)) / "huggingface"
    return home / "token"


def find_token() -> str | None:
    """``HF_TOKEN`` (or ``HUGGING_FACE_HUB_TOKEN``), else the cached login; None if neither."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    path = token_file()
    try:
        value = path.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return value or None


def _whoami(endpoint: str, token: str, timeout: float) -> dict[str, Any]:
    """``GET /api/whoami-v2``: proves the Hub answers and the token is accepted."""
    request = urllib.request.Request(
        f"{endpoint}/api/whoami-v2", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read().decode("utf-8") or "{}")
    except urllib.error.HTTPError as e:
        if e.code in (401, 403):
            raise CodeparrotError(
                f"--push-to-hub: the Hub at {endpoint} rejected the token (HTTP {e.code}); "
                "set a valid write token in HF_TOKEN or run `hf auth login`"
            ) from e
        raise CodeparrotError(
            f"--push-to-hub: the Hub at {endpoint} answered HTTP {e.code} to a token check"
        ) from e
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        reason = getattr(e, "reason", e)
        raise CodeparrotError(
            f"--push-to-hub: the Hub at {endpoint} is not reachable ({reason}); "
            "check the network (and HF_ENDPOINT), or leave out --push-to-hub"
        ) from e
    except json.JSONDecodeError:
        return {}


def preflight(
    name: str, *, repo_type: str = "model", timeout: float = REACH_TIMEOUT_S
) -> HubTarget:
    """Everything a push needs, checked before any work: raises with what is missing."""
    if repo_type not in REPO_TYPES:
        raise CodeparrotError(f"--push-to-hub: repo_type must be one of {REPO_TYPES}")
    if not _NAME.match(name or ""):
        raise CodeparrotError(
            f"--push-to-hub {name!r}: not a Hub repository name (expected NAME or USER/NAME)"
        )
    try:
        import huggingface_hub  # noqa: F401
    except ImportError as e:
        raise CodeparrotError(
            "--push-to-hub: the huggingface_hub package is not installed "
            "(pip install huggingface_hub)"
        ) from e
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise CodeparrotError(
            "--push-to-hub: HF_HUB_OFFLINE is set, so nothing can be uploaded; unset it "
            "or leave out --push-to-hub"
        )
    token = find_token()
    if token is None:
        raise CodeparrotError(
            "--push-to-hub: no Hugging Face token; set HF_TOKEN to a write token or run "
            f"`hf auth login` (looked in HF_TOKEN, HUGGING_FACE_HUB_TOKEN and {token_file()})"
        )
    endpoint = hub_endpoint()
    info = _whoami(endpoint, token, timeout)
    user = info.get("name") if isinstance(info, dict) else None
    repo_id = name if "/" in name or not user else f"{user}/{name}"
    return HubTarget(
        repo_id=repo_id, repo_type=repo_type, endpoint=endpoint, token=token, user=user
    )


def branch_name(run: str | Path) -> str:
    """A Git branch name from a run directory's name (``runs/my run`` -> ``my-run``)."""
    stem = Path(run).resolve().name if isinstance(run, Path) else str(run)
    branch = re.sub(r"[^\w.-]+", "-", stem).strip("-.") or "run"
    return branch


def push_folder(
    target: HubTarget,
    folder: str | Path,
    *,
    branch: str | None = None,
    message: str = "codeparrot upload",
    ignore_patterns: tuple[str, ...] = (),
) -> str:
    """Upload ``folder`` to the target repository (created if needed), on ``branch`` if given.

    Returns the URL of the commit. Needs the network: not exercised by the offline tests.
    """
    from huggingface_hub import HfApi

    api = HfApi(endpoint=target.endpoint, token=target.token)
    try:
        api.create_repo(target.repo_id, repo_type=target.repo_type, exist_ok=True)
        if branch is not None:
            api.create_branch(
                target.repo_id, branch=branch, repo_type=target.repo_type, exist_ok=True
            )
        info = api.upload_folder(
            repo_id=target.repo_id,
            repo_type=target.repo_type,
            folder_path=str(folder),
            revision=branch,
            commit_message=message,
            ignore_patterns=list(ignore_patterns) or None,
        )
    except Exception as e:  # huggingface_hub raises HTTP and OS errors of many types
        raise CodeparrotError(
            f"--push-to-hub {target.repo_id}: the upload of {folder} failed ({e}); the local "
            "artefact is complete, push it again with `hf upload`"
        ) from e
    return str(getattr(info, "commit_url", info))


# What each stage uploads (paths relative to its output directory).
CHECKPOINT_IGNORE = ("checkpoints/**", "tokens/**", "logs/**", "*.partial/**")


def push_corpus(target: HubTarget, corpus: Path) -> str:
    return push_folder(target, corpus, message=f"corpus {corpus.name}")


def push_tokenizer(target: HubTarget, tokenizer: Path) -> str:
    return push_folder(target, tokenizer, message=f"tokenizer {tokenizer.name}")


def push_run(
    target: HubTarget, run: Path, step: int | None = None, *, branch: str | None = None
) -> str:
    """A training run's latest export, on a branch named after the run directory."""
    branch = branch or branch_name(run)
    message = f"{branch}: step {step}" if step is not None else branch
    return push_folder(
        target, run, branch=branch, message=message, ignore_patterns=CHECKPOINT_IGNORE
    )


__all__ = [
    "HubTarget",
    "branch_name",
    "find_token",
    "preflight",
    "push_corpus",
    "push_folder",
    "push_run",
    "push_tokenizer",
]


def dataset_files(dataset: str, pattern: str) -> list[Path]:
    """The files of Hub dataset ``dataset`` matching ``pattern``: cached, else downloaded.

    Going through ``huggingface_hub`` rather than ``datasets.load_dataset(NAME)`` keeps an
    offline machine from retrying the Hub for half a minute: a cached copy is used without
    asking, and a missing one fails on the first unreachable request.
    """
    from huggingface_hub import snapshot_download

    files: list[Path] = []
    try:
        root = snapshot_download(
            dataset, repo_type="dataset", allow_patterns=[pattern], local_files_only=True
        )
        files = sorted(Path(root).glob(pattern))
    except Exception:  # not in the cache: download below
        pass
    if not files:
        root = snapshot_download(dataset, repo_type="dataset", allow_patterns=[pattern])
        files = sorted(Path(root).glob(pattern))
    if not files:
        raise FileNotFoundError(f"no files of {dataset} match {pattern!r}")
    return files
