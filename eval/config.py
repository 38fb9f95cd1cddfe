"""Configs of the evaluation harness (standard library only: the CLI imports this for --help)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from codeparrot.config import Config, option
from codeparrot.eval.prompts import PROMPT_FORMATS
from codeparrot.eval.tasks import TASK_NAMES, TASKS
from codeparrot.options import (
    CANDIDATES,
    CHECKPOINT,
    CUDA_GRAPHS,
    DEVICE,
    FIM_ORDER,
    FIM_SUFFIX_SHARE,
    MAX_NEW_TOKENS,
    REVISION,
    SYNTAX_SAMPLES,
    TEMPERATURE,
    TOP_P,
)

if TYPE_CHECKING:
    from codeparrot.hub import ModelRef

SANDBOX_MODES = ("root", "userns", "none")
BACKENDS = ("local", "openai")


@dataclass(frozen=True)
class TaskOptions(Config):
    """Which benchmark (shared by every `eval` command)."""

    task: str = option(
        "humaneval",
        "benchmark: humaneval (offline), humanevalplus, mbpp, mbppplus (Hub datasets), "
        "infill-single-line, infill-multi-line (derived offline)",
        choices=TASK_NAMES,
    )
    problem_file: Path | None = option(
        None,
        "the task's problems from this file instead (.jsonl, .jsonl.gz or .parquet in the "
        "task's Hub schema), e.g. where the Hub is not reachable",
    )


@dataclass(frozen=True)
class ExecutionOptions(TaskOptions):
    """How completions are executed (shared by `eval humaneval` and `eval execute`)."""

    allow_code_execution: bool = option(
        False,
        "run untrusted model-generated code in the sandbox (or set "
        "CODEPARROT_ALLOW_CODE_EXECUTION=1); read docs/threat-model.md first",
    )
    timeout: float = option(
        3.0,
        "wall-clock seconds per sample and test set (HumanEval+/MBPP+: consider 20)",
        gt=0,
        le=600,
    )
    gt_time_limit_factor: float | None = option(
        None,
        "per-task limits as evalplus sets them (evalplus: 4): each task's test set gets the "
        "larger of --min-time-limit and this many times its reference solution's time, "
        "measured in the same sandbox first (at most 60 s); unset: the flat --timeout",
        gt=0,
        le=1000,
    )
    min_time_limit: float = option(
        4.0,
        "with --gt-time-limit-factor: the least seconds a test set gets (evalplus: 1.0 per input)",
        gt=0,
        le=60,
    )
    workers: int | None = option(
        None,
        "samples executed at once (default: 2 x CPU cores)",
        ge=1,
        le=256,
    )
    memory_mb: int = option(
        1024, "address-space limit of each sandboxed process, MiB", ge=64, le=1 << 20
    )
    sandbox: str | None = option(
        None,
        "isolation mode (default: the strongest that works here, with a loud warning "
        "when that is not 'root')",
        choices=SANDBOX_MODES,
    )
    ks: tuple[int, ...] = option(
        (1, 10, 100), "k values of pass@k (only k <= samples per problem)", ge=1
    )
    feedback: bool = option(
        False,
        "answer the test's calls one by one, as the test makes them, so that a sample sees "
        "which of its answers passed (by default each problem's test is recorded once "
        "against its reference solution, the recordings kept in the user's cache folder, "
        "and a sample answers all of its calls before any is checked, see "
        "docs/threat-model.md; a test whose calls depend on the answers runs call by call)",
    )
    sanitize: bool = option(
        False,
        "before executing, keep only the imports and the definitions the entry point needs "
        "(evalplus-style, with ast); recorded in the summary",
    )

    def problems(self) -> list[str]:
        out = super().problems()
        return out if self.ks else [*out, "--ks: give at least one k"]


@dataclass(frozen=True)
class ExecuteConfig(ExecutionOptions):
    """Score an existing samples file (task_id, completion per line; other fields are kept)."""

    samples: Path | None = option(None, "samples file (.jsonl or .jsonl.gz)")
    output: Path | None = option(
        None, "results file (default: SAMPLES with _results.jsonl); summary next to it"
    )

    def problems(self) -> list[str]:
        out = super().problems()
        if self.samples is None:
            out.append("SAMPLES (the samples file to score) is required")
        return out

    def results_path(self) -> Path:
        assert self.samples is not None
        if self.output is not None:
            return self.output
        name = self.samples.name.removesuffix(".gz").removesuffix(".jsonl")
        return self.samples.with_name(f"{name}_results.jsonl")


@dataclass(frozen=True)
class GenerationOptions(TaskOptions):
    """How completions are generated (shared by `eval generate` and `eval humaneval`)."""

    checkpoint: Path | None = CHECKPOINT.field(None)
    revision: str | None = REVISION.field()
    output: Path | None = option(
        None, "report directory (default: CHECKPOINT/TASK, or MODEL/TASK with --backend openai)"
    )
    backend: str = option(
        "local",
        "local: generate with --checkpoint here; openai: ask a server's /v1/completions "
        "(codeparrot serve, vLLM, llama.cpp's server, Ollama) at --base-url for --model",
        choices=BACKENDS,
    )
    base_url: str | None = option(
        None, "--backend openai: the server's root or its /v1 (e.g. http://127.0.0.1:8000/v1)"
    )
    model: str | None = option(None, "--backend openai: the model id the server lists")
    concurrency: int = option(4, "--backend openai: requests in flight at once", ge=1, le=256)
    retries: int = option(
        5,
        "--backend openai: retries of a request refused (429, 5xx) or dropped, waiting "
        "1, 2, 4, ... s",
        ge=0,
        le=20,
    )
    request_timeout: float = option(
        600.0,
        "--backend openai: seconds one request may take in all (the whole answer, not each "
        "read); a request past it stops the run",
        gt=0,
        le=86400,
    )
    n: int = option(10, "samples per problem (the reference uses 200)", ge=1, le=1000)
    batch_size: int = CANDIDATES.field(10, "samples generated per call of the engine")
    temperature: float = TEMPERATURE.field(
        help="sampling temperature (the reference reports 0.2, also 0.6 and 0.8)"
    )
    top_p: float = TOP_P.field()
    max_new_tokens: int | None = MAX_NEW_TOKENS.field(
        None,
        "most new tokens per completion (default: the reference's 256, or half the "
        "model's context when that is less)",
    )
    prompt_format: str = option(
        "healed",
        "how the prompt is given: healed (as is, with token healing), bigcode "
        "(bigcode-evaluation-harness: HumanEval prompts stripped), bigcode-unstripped (its "
        "humaneval-unstripped), evalplus (stripped + a line break); recorded with the samples",
        choices=PROMPT_FORMATS,
    )
    fim_order: str = FIM_ORDER.field(
        help="infilling tasks: psm (prefix, suffix, middle) or spm (suffix, then the prefix "
        "running straight into the middle)"
    )
    fim_suffix_share: float = FIM_SUFFIX_SHARE.field(
        help="infilling tasks: where prefix and suffix do not fit the context, the most of "
        "the prompt budget the suffix keeps (whole lines; the prefix gets the rest), as in "
        "the language server"
    )
    syntax_samples: int = SYNTAX_SAMPLES.field(
        help="syntax check: a completion after which prompt + completion (+ suffix) does not "
        "parse is replaced by the most common of this many more samples that parse (a greedy "
        "one), or the first that parses (a sampled one); nothing is run to check. Off (0) "
        "in published protocols"
    )
    seed: int = option(0, "base seed; each batch derives its own, recorded per sample")
    limit: int | None = option(None, "only the first K problems", ge=1)
    sample: int | None = option(
        None,
        "a random K of the problems, drawn with --seed and kept in order (a representative "
        "subset; --limit takes the first K)",
        ge=1,
    )
    problem_ids: tuple[str, ...] = option(
        (), "only these task ids (e.g. HumanEval/0 HumanEval/1)", flag="--problems"
    )
    device: str | None = DEVICE.field()
    cuda_graphs: bool = CUDA_GRAPHS.field()
    threads: int | None = option(
        None,
        "problems generated at once, one per thread, written in problem order (the same "
        "file as one at a time; default: 2 on a CPU, whose one-token steps run on one core "
        "each, divided among launched processes; 1 on an accelerator)",
        ge=1,
        le=64,
    )

    def output_dir(self) -> Path:
        if self.output is not None:
            return self.output
        if self.backend == "openai":
            assert self.model is not None
            return Path(self.model.replace("/", "--").replace(":", "-")) / self.task
        assert self.checkpoint is not None
        return self.checkpoint / self.task

    def model_label(self) -> str:
        """What generated the samples: the checkpoint, or the served model and its URL."""
        if self.backend == "openai":
            return f"{self.model} at {self.base_url}"
        return str(self.checkpoint)

    def problems(self) -> list[str]:
        out = super().problems()
        infill = self.task in TASKS and TASKS[self.task].infill
        if infill and self.prompt_format in ("bigcode", "evalplus"):
            out.append(
                f"--prompt-format {self.prompt_format} strips the prompt: an infilling task's "
                "prefix ends mid-solution (use healed or bigcode-unstripped)"
            )
        if self.backend == "openai":
            if not self.base_url:
                out.append("--base-url is required with --backend openai")
            elif not self.base_url.startswith(("http://", "https://")):
                out.append(f"--base-url {self.base_url!r}: give an http:// or https:// URL")
            if not self.model:
                out.append("--model is required with --backend openai")
            if self.checkpoint is not None:
                out.append("--checkpoint and --backend openai exclude each other")
            if self.syntax_samples:
                out.append("--syntax-samples needs --backend local (it draws more samples)")
        elif self.checkpoint is None:
            out.append("--checkpoint is required (or --backend openai --base-url URL --model NAME)")
        from codeparrot.hub import revision_problems

        return out + revision_problems(self.checkpoint, self.revision)

    @property
    def model_path(self) -> ModelRef | None:
        """The checkpoint to load, with ``--revision`` (``str()`` of it: ``ORG/NAME@REV``)."""
        if self.checkpoint is None:
            return None
        from codeparrot.hub import ModelRef

        return ModelRef.parse(self.checkpoint, self.revision)


@dataclass(frozen=True)
class GenerateConfig(GenerationOptions):
    """Generate completions into OUT/samples.jsonl without executing anything (resumable;
    under `accelerate launch --num_processes N` each process generates a shard)."""


@dataclass(frozen=True)
class HumanEvalConfig(GenerationOptions, ExecutionOptions):
    """Generate completions of a task with a checkpoint, execute them, report pass@k."""


INFILL_KINDS = ("single-line", "multi-line", "santacoder-fim")


@dataclass(frozen=True)
class InfillConfig(HumanEvalConfig):
    """HumanEval infilling (OpenAI's single-line / multi-line tasks, derived offline) with a
    fill-in-the-middle checkpoint: prompt + suffix in, the middle out, executed in the
    sandbox; pass@1 and exact match. The same run as `eval humaneval --task infill-KIND`."""

    task: str = option(
        "single-line",
        "which infilling benchmark: OpenAI's single-line or multi-line (1,033 or 5,815 tasks, "
        "executed) or bigcode's santacoder-fim (4,792 in 3 languages, exact match)",
        choices=INFILL_KINDS,
    )
    n: int = option(1, "samples per task", ge=1, le=1000)
    batch_size: int = CANDIDATES.field(1, "samples generated per call of the engine")
    temperature: float = TEMPERATURE.field(0.0, "sampling temperature (0: greedy, pass@1)")

    def humaneval_config(self) -> HumanEvalConfig:
        """The equivalent `eval humaneval` config (task ``infill-KIND``)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(HumanEvalConfig)}
        task = self.task if self.task == "santacoder-fim" else f"infill-{self.task}"
        return HumanEvalConfig(**values | {"task": task})
