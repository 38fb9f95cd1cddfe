"""``codeparrot export --gguf DIR``: a checkpoint as GGUF files and an Ollama Modelfile."""

from __future__ import annotations

import argparse

from codeparrot.config import add_config_arguments, config_from_args
from codeparrot.models.gguf_export import ExportConfig


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write a checkpoint as GGUF (llama.cpp, Ollama) with an Ollama Modelfile",
        description=(
            "Write model-TYPE.gguf for each --types (f32, f16, q8_0) and an Ollama Modelfile "
            "with the checkpoint's fill-in-the-middle template. GPT-2 and Qwen3 blocks; the "
            "tokenizer must split text as llama.cpp can (GPT-2's pre-tokenizer), else the "
            "export is refused before anything is written. Needs `pip install gguf` (the "
            "`gguf` extra)."
        ),
    )
    add_config_arguments(parser, ExportConfig)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from codeparrot.models.gguf_export import export_gguf

    config = config_from_args(ExportConfig, args)
    result = export_gguf(config, progress=print)
    for path in result.files:
        print(
            f"{path}: {result.architecture}, {result.tensors} tensors, {path.stat().st_size:,} bytes"
        )
    print(f"{result.modelfile}: ollama create NAME -f {result.modelfile}")
    print(f"pre-tokenizer: {result.pre_tokenizer} (llama.cpp splits text as the checkpoint does)")
    return 0
