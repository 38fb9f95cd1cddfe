"""Configuration of the playground (``codeparrot app``). Standard library only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from codeparrot.config import Config, option
from codeparrot.options import CHECKPOINT, DEVICE, MAX_NEW_TOKENS, REVISION

if TYPE_CHECKING:
    from codeparrot.hub import ModelRef

# Candidates shown side by side: each is a pre-built editor in the page.
MAX_CANDIDATES = 8


@dataclass(frozen=True)
class AppConfig(Config):
    """A Gradio playground over one or more checkpoints."""

    checkpoints: tuple[Path, ...] = CHECKPOINT.field(())  # offered in the picker
    revision: str | None = REVISION.field(help=REVISION.help + " (applies to every Hub id given)")
    host: str = option("127.0.0.1", "address to listen on (0.0.0.0: every interface)")
    port: int = option(7860, "port to listen on (0: any free port)", ge=0, le=65535)
    concurrency: int = option(
        1,
        "generations running at once; one uses every core of a small CPU machine, "
        "the others wait in the queue",
        ge=1,
    )
    queue_size: int = option(
        16, "requests allowed to wait in the queue before new ones are refused", ge=1
    )
    max_new_tokens_limit: int = MAX_NEW_TOKENS.field(
        256, "largest number of new tokens the page lets one ask for"
    )
    max_candidates: int = option(
        MAX_CANDIDATES,
        "most candidates one request may ask for (n)",
        ge=1,
        le=MAX_CANDIDATES,
    )
    max_prompt_chars: int = option(
        100_000,
        "longest prompt accepted, in characters (more than any model's context holds); "
        "a longer one is refused before it is tokenized",
        ge=1,
    )
    max_stop_sequences: int = option(16, "most stop sequences one request may give", ge=0)
    max_stop_chars: int = option(200, "longest stop sequence accepted, in characters", ge=1)
    stream_interval: float = option(
        0.05, "seconds between streamed updates of the page (0: send every token)", ge=0
    )
    device: str | None = DEVICE.field(help="torch device for the models (default: cuda if present)")
    compile: bool = option(
        False,
        "torch.compile each model's one-token decoding step in the background after it "
        "loads. Off by default, as in the language server: the compile holds the "
        "interpreter and the cores for some seconds of CPU, slowing every generation "
        "meanwhile; generations use the eager step until it is ready",
    )
    load_at_start: bool = option(
        True,
        "load the first checkpoint when the server starts (in the background), as serve "
        "and the language server do, so that the first generation does not wait for it; "
        "the others load on first use",
    )

    def problems(self) -> list[str]:
        from codeparrot.hub import revision_problems

        out = [] if self.checkpoints else ["give at least one CHECKPOINT"]
        return out + [p for c in self.checkpoints for p in revision_problems(c, self.revision)]

    @property
    def served_checkpoints(self) -> tuple[ModelRef, ...]:
        """The checkpoints as references, ``--revision`` applying to each Hub id."""
        from codeparrot.hub import ModelRef

        return tuple(ModelRef.parse(c, self.revision) for c in self.checkpoints)
