"""The one inference engine: load a checkpoint, sample, stop per sequence, stream, cancel.

The playground, the language server and the HumanEval harness all call
:class:`Engine`; none of them talks to ``transformers`` directly.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from codeparrot.config import Config, option
from codeparrot.errors import CheckpointError, ConfigError

# The stop sequences of the CodeParrot / bigcode HumanEval evaluation.
HUMANEVAL_STOP_SEQUENCES: tuple[str, ...] = (
    "\nclass",
    "\ndef",
    "\n#",
    "\n@",
    "\nprint",
    "\nif",
)


@dataclass(frozen=True)
class GenerationConfig(Config):
    """How to sample completions for one prompt."""

    max_new_tokens: int = option(64, "most tokens to generate per candidate")
    temperature: float = option(0.2, "sampling temperature; 0 means greedy decoding")
    top_p: float = option(0.95, "nucleus sampling: keep the smallest set of tokens with this mass")
    top_k: int = option(0, "keep only the k most likely tokens (0: no limit)")
    n: int = option(1, "number of candidates sampled for the prompt, in one batch")
    seed: int | None = option(None, "random seed (None: a fresh seed, recorded in the result)")
    stop: tuple[str, ...] = option(
        (), "stop strings: a candidate ends at the first one, which is trimmed", flag="--stop"
    )
    stop_at_eos: bool = option(True, "end a candidate at the end-of-text token", cli=False)

    def problems(self) -> list[str]:
        out = []
        if not 1 <= self.max_new_tokens <= 4096:
            out.append(f"--max-new-tokens must be in 1..4096, got {self.max_new_tokens}")
        if self.temperature < 0:
            out.append(f"--temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            out.append(f"--top-p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            out.append(f"--top-k must be >= 0, got {self.top_k}")
        if not 1 <= self.n <= 1024:
            out.append(f"--n must be in 1..1024, got {self.n}")
        if any(s == "" for s in self.stop):
            out.append("--stop strings must not be empty")
        return out


@dataclass
class Completion:
    """One finished candidate."""

    text: str
    finish_reason: str  # "stop" | "eos" | "length" | "cancelled"
    prompt_tokens: int
    new_tokens: int
    seconds: float
    seed: int | None = None
    prompt_truncated: bool = False

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass
class StreamEvent:
    """New text for candidate ``index``; the last event of a candidate has ``completion``."""

    index: int
    delta: str
    completion: Completion | None = None

    @property
    def done(self) -> bool:
        return self.completion is not None


@dataclass
class _Candidate:
    ids: list[int] = field(default_factory=list)
    text: str = ""
    emitted: int = 0  # characters already streamed
    finish_reason: str | None = None
    stop_at: int | None = None  # character index where the text ends


def first_block(text: str, stop_sequences: tuple[str, ...] = HUMANEVAL_STOP_SEQUENCES) -> str:
    """The reference playground's ``first_block``: text up to the first stop sequence."""
    cut = _earliest_stop(text, stop_sequences)
    return text if cut is None else text[:cut]


def _earliest_stop(text: str, stops: tuple[str, ...], start: int = 0) -> int | None:
    best = None
    for s in stops:
        i = text.find(s, start)
        if i != -1 and (best is None or i < best):
            best = i
    return best


def _held_back(text: str, stops: tuple[str, ...]) -> int:
    """Characters at the end of ``text`` that could still become the start of a stop string."""
    hold = 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:k]):
                hold = max(hold, k)
                break
    # An incomplete UTF-8 sequence decodes to U+FFFD at the end: wait for the next token.
    if text.endswith("\ufffd"):
        hold = max(hold, 1)
    return hold


class Engine:
    """A loaded causal LM and its tokenizer, shared by any number of callers.

    Calls do not mutate the engine, so one instance serves concurrent threads without
    copying weights.
    """

    def __init__(self, model: Any, tokenizer: Any, *, path: Path | None = None) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.path = path
        self.device = next(model.parameters()).device
        self.context_length = int(
            getattr(model.config, "n_positions", None)
            or getattr(model.config, "max_position_embeddings", 1024)
        )
        eos = tokenizer.eos_token_id
        self.eos_token_id: int | None = int(eos) if eos is not None else None

    # -- loading ---------------------------------------------------------------------
    @classmethod
    def load(cls, path: str | Path, *, device: str | None = None, dtype: str = "auto") -> Engine:
        """Load a checkpoint directory (ours, or any local Hugging Face causal LM)."""
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = Path(path)
        if not path.is_dir():
            raise CheckpointError(f"checkpoint {path}: no such directory")
        if not (path / "config.json").is_file():
            raise CheckpointError(
                f"checkpoint {path}: no config.json; expected a directory written by "
                "`codeparrot train` or `save_pretrained`"
            )
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
        except Exception as e:  # transformers raises many types for a broken directory
            raise CheckpointError(f"checkpoint {path}: cannot load its tokenizer ({e})") from e
        try:
            model = AutoModelForCausalLM.from_pretrained(path)
        except Exception as e:
            raise CheckpointError(f"checkpoint {path}: not a loadable causal LM ({e})") from e
        if len(tokenizer) > model.config.vocab_size:
            raise CheckpointError(
                f"checkpoint {path}: tokenizer has {len(tokenizer)} tokens but the model's "
                f"vocabulary has {model.config.vocab_size}"
            )
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        model.to(device)
        if dtype == "bfloat16" or (dtype == "auto" and device.startswith("cuda")):
            model.to(torch.bfloat16)
        model.eval()
        return cls(model, tokenizer, path=path)

    # -- prompts ---------------------------------------------------------------------
    def encode_prompt(self, prompt: str, max_new_tokens: int) -> tuple[list[int], bool]:
        """Token ids of ``prompt`` fitted to the context: keeps the end. Returns (ids, truncated)."""
        if max_new_tokens >= self.context_length:
            raise ConfigError(
                f"--max-new-tokens {max_new_tokens} leaves no room for a prompt in the "
                f"model's context of {self.context_length} tokens"
            )
        ids = self.tokenizer(prompt, add_special_tokens=False)["input_ids"]
        if not ids:
            ids = [self.eos_token_id if self.eos_token_id is not None else 0]
        budget = self.context_length - max_new_tokens
        if len(ids) > budget:
            return ids[-budget:], True
        return ids, False

    # -- generation ------------------------------------------------------------------
    def generate(
        self,
        prompt: str,
        config: GenerationConfig | None = None,
        cancel: threading.Event | None = None,
    ) -> list[Completion]:
        """Sample ``config.n`` completions of ``prompt``; blocks until all are finished."""
        out: list[Completion | None] = [None] * (config or GenerationConfig()).n
        for event in self.stream(prompt, config, cancel):
            if event.completion is not None:
                out[event.index] = event.completion
        return [c for c in out if c is not None]

    def stream(
        self,
        prompt: str,
        config: GenerationConfig | None = None,
        cancel: threading.Event | None = None,
    ) -> Iterator[StreamEvent]:
        """Yield text as it is produced; each candidate stops on its own.

        Setting ``cancel`` ends every unfinished candidate within one token
        (finish reason ``"cancelled"``).
        """
        import torch

        config = config or GenerationConfig()
        if not prompt:
            raise ConfigError("the prompt is empty")
        ids, truncated = self.encode_prompt(prompt, config.max_new_tokens)
        seed = config.seed if config.seed is not None else int(time.time_ns() % (2**31))
        generator = torch.Generator(device=self.device).manual_seed(seed)
        n = config.n
        started = time.perf_counter()
        cands = [_Candidate() for _ in range(n)]
        stops = tuple(config.stop)

        def finish(i: int, reason: str) -> StreamEvent:
            c = cands[i]
            c.finish_reason = reason
            end = c.stop_at if c.stop_at is not None else len(c.text)
            if reason != "stop" and c.text.endswith("\ufffd"):
                end = min(end, len(c.text.rstrip("\ufffd")))
            delta = c.text[c.emitted : end]
            c.emitted = end
            return StreamEvent(
                i,
                delta,
                Completion(
                    text=c.text[:end],
                    finish_reason=reason,
                    prompt_tokens=len(ids),
                    new_tokens=len(c.ids),
                    seconds=time.perf_counter() - started,
                    seed=seed,
                    prompt_truncated=truncated,
                ),
            )

        with torch.inference_mode():
            input_ids = torch.tensor([ids] * n, device=self.device)
            past = None
            active = list(range(n))  # candidate index of each row still in the batch
            step_input = input_ids
            for _step in range(config.max_new_tokens):
                if cancel is not None and cancel.is_set():
                    break
                out = self.model(input_ids=step_input, past_key_values=past, use_cache=True)
                past = out.past_key_values
                logits = out.logits[:, -1, :].float()
                next_ids = _sample(logits, config, generator)
                still: list[int] = []
                keep_rows: list[int] = []
                for row, i in enumerate(active):
                    c = cands[i]
                    tok = int(next_ids[row])
                    if config.stop_at_eos and tok == self.eos_token_id:
                        yield finish(i, "eos")
                        continue
                    c.ids.append(tok)
                    c.text = self.tokenizer.decode(c.ids, skip_special_tokens=False)
                    cut = _earliest_stop(c.text, stops, max(0, c.emitted - 1)) if stops else None
                    if cut is not None:
                        c.stop_at = cut
                        yield finish(i, "stop")
                        continue
                    safe = len(c.text) - _held_back(c.text, stops)
                    if safe > c.emitted:
                        yield StreamEvent(i, c.text[c.emitted : safe])
                        c.emitted = safe
                    still.append(i)
                    keep_rows.append(row)
                if not still:
                    return
                if len(keep_rows) != len(active):
                    rows = torch.tensor(keep_rows, device=self.device)
                    past = _select_rows(past, rows)
                    next_ids = next_ids[rows]
                active = still
                step_input = next_ids.unsqueeze(-1)
            reason = "cancelled" if cancel is not None and cancel.is_set() else "length"
            for i in active:
                yield finish(i, reason)

    def count_tokens(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])


def _sample(logits: Any, config: GenerationConfig, generator: Any) -> Any:
    import torch

    if config.temperature == 0:
        return logits.argmax(dim=-1)
    logits = logits / config.temperature
    if config.top_k:
        k = min(config.top_k, logits.size(-1))
        kth = torch.topk(logits, k, dim=-1).values[:, -1, None]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if config.top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        probs = torch.softmax(sorted_logits, dim=-1)
        # drop a token when the mass before it already reaches top_p (always keeps the first)
        drop = probs.cumsum(dim=-1) - probs >= config.top_p
        sorted_logits = sorted_logits.masked_fill(drop, float("-inf"))
        logits = torch.full_like(logits, float("-inf")).scatter(-1, order, sorted_logits)
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


def _select_rows(past: Any, rows: Any) -> Any:
    """Keep only ``rows`` of a key/value cache (a transformers Cache or legacy tuples)."""
    if hasattr(past, "reorder_cache"):
        past.reorder_cache(rows)
        return past
    if hasattr(past, "batch_select_indices"):
        past.batch_select_indices(rows)
        return past
    return tuple(tuple(t[rows] for t in layer) for layer in past)
