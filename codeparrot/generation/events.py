"""What a call of the engine gives back: text as it is produced, and each finished
candidate (standard library only)."""

from __future__ import annotations

from dataclasses import dataclass


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
    prompt_cached_tokens: int = 0  # prompt tokens whose keys/values came from an earlier call
    prompt_seconds: float = 0.0  # of ``seconds``: reading the prompt (its tokens not cached)

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
