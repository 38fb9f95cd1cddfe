"""Model presets and checkpoint directories.

``presets`` and ``checkpoint`` import torch and transformers only inside the functions
that need them, so importing this package stays cheap.
"""

from codeparrot.models.checkpoint import (
    CHECKPOINT_META,
    check_vocab,
    export_into,
    load_checkpoint,
    load_tokenizer,
    read_checkpoint_meta,
    resolve_checkpoint,
    save_checkpoint,
    validate_checkpoint,
)
from codeparrot.models.presets import (
    PRESETS,
    InitConfig,
    ModelPreset,
    build_model,
    build_model_config,
    count_parameters,
    flops_per_token,
    init_checkpoint,
    padded_vocab_size,
)

__all__ = [
    "CHECKPOINT_META",
    "PRESETS",
    "InitConfig",
    "ModelPreset",
    "build_model",
    "build_model_config",
    "check_vocab",
    "count_parameters",
    "export_into",
    "flops_per_token",
    "init_checkpoint",
    "load_checkpoint",
    "load_tokenizer",
    "padded_vocab_size",
    "read_checkpoint_meta",
    "resolve_checkpoint",
    "save_checkpoint",
    "validate_checkpoint",
]
