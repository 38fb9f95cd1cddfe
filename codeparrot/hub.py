"""The Hugging Face Hub: models taken from it, and ``--push-to-hub NAME`` of every stage.

:func:`resolve_model` turns a checkpoint as a command was given it (a local directory, or
``ORG/NAME[@REV]``) into a local directory: the snapshot in huggingface_hub's cache, with
configs, tokenizer files and safetensors weights only. The checkpoint loader calls it, so
every command that takes a checkpoint takes a Hub id.

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

from codeparrot.errors import CheckpointError, CodeparrotError

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
    "ModelRef",
    "ResolvedModel",
    "branch_name",
    "find_token",
    "in_hub_cache",
    "preflight",
    "push_corpus",
    "push_folder",
    "push_run",
    "push_tokenizer",
    "resolve_model",
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


# -- models from the Hub ---------------------------------------------------------------------

# What a model (or adapter) repository contributes: configs, tokenizers and safetensors
# weights at its root. Never pickles (``*.bin``, ``*.pt``) and never Python files.
MODEL_PATTERNS = (
    "config.json",
    "generation_config.json",
    "tokenizer*",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.jinja",
    "model*.safetensors",
    "model.safetensors.index.json",
    "adapter_config.json",
    "adapter_model.safetensors",
    "codeparrot_checkpoint.json",
)
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_REVISION = re.compile(r"^[\w./-]+$")


@dataclass(frozen=True)
class ModelRef:
    """A model as the user named it: a local directory, or a Hub id at a revision.

    Built once where the user's words are read (:meth:`parse`: ``ORG/NAME@REV``, or
    ``ORG/NAME`` with ``--revision``, or a directory) and passed down as it is; the loader
    resolves it once per load (:meth:`resolve`). No network until then.
    """

    source: str  # a directory, or ORG/NAME (without @REV)
    revision: str | None = None  # a Hub id's branch, tag or commit (None: main)

    @classmethod
    def parse(cls, spec: str | Path | ModelRef, revision: str | None = None) -> ModelRef:
        """The reference a user wrote: ``ORG/NAME@REV`` split, ``revision`` checked against
        it (:class:`CheckpointError` when they disagree). A directory that exists, and
        anything that is no Hub id, is a path (a revision means nothing there)."""
        if isinstance(spec, ModelRef):
            if revision and spec.revision and revision != spec.revision:
                raise CheckpointError(
                    f"{spec.name!r}: names revision {spec.revision!r} but --revision is "
                    f"{revision!r}"
                )
            if revision and spec.revision is None and spec.is_hub:
                return cls(spec.source, revision)
            return spec
        text = str(spec)
        if Path(text).is_dir() or not looks_like_hub_id(text):
            if revision and not Path(text).is_dir():
                split_revision(text, revision)  # a malformed id with a revision: say so
            return cls(text)
        return cls(*split_revision(text, revision))

    @property
    def is_hub(self) -> bool:
        """Whether this names a Hub model (not a directory that exists, nor a bad path)."""
        return not Path(self.source).is_dir() and looks_like_hub_id(self.source)

    @property
    def name(self) -> str:
        """How the user spelled it: ``ORG/NAME@REV``, ``ORG/NAME`` or the directory."""
        return self.source + (f"@{self.revision}" if self.revision and self.is_hub else "")

    def __str__(self) -> str:
        return self.name

    def resolve(self) -> ResolvedModel:
        """The local directory: the Hub id's snapshot in the cache (fetched when not there
        and the network allows), or the directory itself. See :func:`resolve_model`."""
        return resolve_model(self)


@dataclass(frozen=True)
class ResolvedModel:
    """A model's local directory, and the Hub id and revision it came from."""

    path: Path  # the local directory (the snapshot in the cache for a Hub id)
    hub_id: str | None = None
    revision: str | None = None

    @property
    def name(self) -> str:
        """How the user spelled it: ``ORG/NAME@REV``, ``ORG/NAME`` or the directory."""
        if self.hub_id is None:
            return str(self.path)
        return self.hub_id + (f"@{self.revision}" if self.revision else "")


def split_revision(spec: str, revision: str | None = None) -> tuple[str, str | None]:
    """``ORG/NAME@REV`` -> (``ORG/NAME``, ``REV``); ``revision`` must agree with ``@REV``."""
    name, at, rev = spec.partition("@")
    if not at:
        return spec, revision
    if not rev or not _REVISION.match(rev):
        raise CheckpointError(f"{spec!r}: expected ORG/NAME@REVISION (a branch, tag or commit)")
    if revision and revision != rev:
        raise CheckpointError(f"{spec!r}: names revision {rev!r} but --revision is {revision!r}")
    return name, rev


def looks_like_hub_id(spec: str) -> bool:
    """``ORG/NAME`` (optionally ``@REV``): two plain names, not a path such as ``./a/b``."""
    name = spec.partition("@")[0]
    return bool(_HUB_ID.match(name)) and ".." not in name


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_cache_dir() -> Path:
    """Where huggingface_hub keeps downloads (``HF_HUB_CACHE``, else ``HF_HOME/hub``)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.path.expanduser(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        return Path(os.path.expanduser(os.environ["HF_HOME"])) / "hub"
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(os.path.expanduser(cache)) / "huggingface" / "hub"


def resolve_model(spec: str | Path | ModelRef, revision: str | None = None) -> ResolvedModel:
    """The local directory of a model named by a user: a directory, or a Hub id.

    A directory that exists always wins over a Hub id of the same spelling. ``ORG/NAME``
    (or ``ORG/NAME@REV``, or ``revision``) is fetched through ``huggingface_hub`` into its
    cache (``HF_HOME``, ``HF_HUB_CACHE``, tokens and ``HF_HUB_OFFLINE`` apply): configs,
    tokenizer files and safetensors weights only. Anything else is returned as a path, for
    the loader's own checks to report ("no such directory").
    """
    ref = ModelRef.parse(spec, revision)
    if not ref.is_hub:
        return ResolvedModel(Path(ref.source))
    return ResolvedModel(
        _snapshot(ref.source, ref.revision), hub_id=ref.source, revision=ref.revision
    )


def _snapshot(repo_id: str, revision: str | None) -> Path:
    """The cached snapshot of ``repo_id`` at ``revision``, downloaded when not cached."""
    try:
        from huggingface_hub import snapshot_download
    except ImportError as e:  # pragma: no cover - a dependency
        raise CheckpointError(
            f"{repo_id}: loading a model from the Hub needs huggingface_hub "
            "(pip install huggingface_hub)"
        ) from e
    name = repo_id + (f"@{revision}" if revision else "")
    _check_cached_ref(repo_id, revision, name)
    offline = hub_offline()
    kwargs: dict[str, Any] = {
        "repo_id": repo_id,
        "revision": revision,
        "allow_patterns": list(MODEL_PATTERNS),
        "cache_dir": str(hub_cache_dir()),
        "token": find_token(),
        "endpoint": hub_endpoint(),  # read now: huggingface_hub reads it once, at import
    }
    try:
        root = Path(snapshot_download(**kwargs, local_files_only=offline))
    except Exception as e:  # huggingface_hub raises many types: sorted out below
        raise CheckpointError(_hub_problem(name, e, offline)) from e
    root = _checked_snapshot(repo_id, root, name)
    if not (root / "config.json").is_file() and not (root / "adapter_config.json").is_file():
        raise CheckpointError(
            f"{name}: the Hub repository has no config.json (nor adapter_config.json) at its "
            "root; it is not a transformers model or adapter"
        )
    if (root / "config.json").is_file() and not any(root.glob("model*.safetensors")):
        raise CheckpointError(
            f"{name}: no safetensors weights in the Hub repository (or in the cached copy); "
            "codeparrot never loads pickled weights (pytorch_model.bin). Use a revision with "
            "model.safetensors, or convert the weights"
        )
    return root


_COMMIT = re.compile(r"^[0-9a-f]{40}$")


def _repo_folder(repo_id: str) -> Path:
    """The repository's folder in the cache, as huggingface_hub names it."""
    return hub_cache_dir() / ("models--" + repo_id.replace("/", "--"))


def _check_cached_ref(repo_id: str, revision: str | None, name: str) -> None:
    """A cached ``refs/REV`` file must hold a 40-hex commit, or the load is refused.

    huggingface_hub joins the file's text onto ``snapshots/`` as it is, so a ref reading
    ``../../../elsewhere`` would load a model from outside the cache.
    """
    rev = revision or "main"
    if _COMMIT.match(rev):
        return
    if any(part in ("", ".", "..") for part in rev.split("/")):
        raise CheckpointError(f"{name}: revision {rev!r} is not a branch, tag or commit name")
    refs = _repo_folder(repo_id) / "refs"
    ref = refs / rev
    try:
        text = ref.read_text(encoding="utf-8", errors="replace")[:200]
    except OSError:
        return  # not cached: huggingface_hub fetches it (and the snapshot is checked after)
    if not _COMMIT.match(text.strip()):
        raise CheckpointError(
            f"{name}: the cached ref {ref} does not hold a 40-hex commit (it reads "
            f"{text.strip()[:60]!r}); the Hugging Face cache is damaged or tampered with. "
            "Delete that file (or the repository's folder) and download the model again"
        )


def _checked_snapshot(repo_id: str, root: Path, name: str) -> Path:
    """``root`` if it is ``snapshots/COMMIT`` of ``repo_id``'s folder in the cache."""
    snapshots = (_repo_folder(repo_id) / "snapshots").resolve()
    resolved = root.resolve()
    if not _COMMIT.match(root.name) or resolved.parent != snapshots:
        raise CheckpointError(
            f"{name}: huggingface_hub resolved it to {root}, which is not a commit's snapshot "
            f"under {snapshots}; refusing to load a model from outside the cache"
        )
    return root


def _hub_problem(name: str, error: Exception, offline: bool) -> str:
    """What went wrong fetching ``name``, and what to do about it."""
    from huggingface_hub import errors

    kind = type(error).__name__
    if isinstance(error, errors.GatedRepoError):
        return (
            f"{name}: a gated model; accept its terms on the Hub, then log in first "
            "(`hf auth login`, or `huggingface-cli login`, or set HF_TOKEN)"
        )
    if isinstance(error, errors.RevisionNotFoundError):
        return f"{name}: no such revision on the Hub; check --revision (a branch, tag or commit)"
    if isinstance(error, errors.RepositoryNotFoundError):
        return (
            f"{name}: no such directory, and no such model on the Hub (or a private one: log "
            "in first with `hf auth login` or set HF_TOKEN)"
        )
    if offline or isinstance(error, errors.LocalEntryNotFoundError):
        why = "HF_HUB_OFFLINE is set" if offline else "the Hub could not be reached"
        return (
            f"{name}: no such directory, and not in the Hugging Face cache ({hub_cache_dir()}) "
            f"while {why}; download it once with the network (`hf download {name.split('@')[0]}`"
            ") or point HF_HOME at a cache that holds it"
        )
    return f"{name}: cannot be fetched from the Hub ({kind}: {error})"


def in_hub_cache(path: str | Path) -> bool:
    """Is ``path`` inside the Hugging Face cache? (Outputs must never be written there.)"""
    cache = hub_cache_dir().resolve()
    target = Path(path).resolve()
    return target == cache or cache in target.parents


def revision_problems(spec: str | Path | None, revision: str | None) -> list[str]:
    """:meth:`ModelRef.parse`'s complaint about ``--revision`` as a config problem (empty
    when there is none). No network: a command checks this before any work."""
    if spec is None or not revision:
        return []
    try:
        ModelRef.parse(spec, revision)
    except CheckpointError as e:
        return [f"--checkpoint and --revision disagree: {e}"]
    return []
