"""``codeparrot serve``: OpenAI's and llama.cpp's completion APIs over a checkpoint.

Standard library and config only at module level; torch loads in :func:`main`.
"""

from __future__ import annotations

import argparse

from codeparrot.config import add_config_arguments, config_from_args
from codeparrot.serve.config import ServeConfig
from codeparrot.serve.request import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_TEMPERATURE,
    DEFAULT_TOP_P,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="HTTP server speaking OpenAI's and llama.cpp's completion APIs",
        description=(
            "Serve one checkpoint over HTTP: OpenAI's POST /v1/completions, POST "
            "/v1/chat/completions and GET /v1/models, and llama.cpp's POST /infill, POST "
            "/completion and GET /health, for clients that speak those APIs instead of LSP "
            "(Continue, llm.nvim, llama.vim, llama.vscode, evalplus, curl). The answer is "
            "what the model wrote (--cut-repetition opts into the editor's cut). Listens on "
            "127.0.0.1 unless --host says otherwise, and answers only requests addressed to "
            "it by a loopback name, --host or --allow-host, with JSON bodies, and from web "
            "pages only of the origins given with --allow-origin. Endpoints and fields: "
            "docs/serve.md; what is checked: docs/threat-model.md."
        ),
        epilog=(
            f"Sampling settings a request leaves out take OpenAI's defaults: max_tokens "
            f"{DEFAULT_MAX_TOKENS}, temperature {DEFAULT_TEMPERATURE} (sampling, unlike `lsp`'s "
            f"greedy 0 and `complete`'s 0.2), top_p {DEFAULT_TOP_P}, n 1; editor clients "
            "usually send their own."
        ),
    )
    add_config_arguments(parser, ServeConfig)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    import logging

    from codeparrot.generation.heap import pause_collections, settle_heap
    from codeparrot.generation.waits import prefer_passive_waits

    prefer_passive_waits()  # before torch loads (codeparrot.generation.waits)
    pause_collections()  # while importing and loading (codeparrot.generation.heap)
    try:
        from codeparrot.serve.server import load_engine, make_server

        config = config_from_args(ServeConfig, args)
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        engine = load_engine(config)
    finally:
        settle_heap()
    server = make_server(config, engine)
    print(f"codeparrot serve: {server.service.model_name} on {server.url}/v1", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0
