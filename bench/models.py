"""Does every family's model work in each place a user meets it? A matrix over tiny random
models in the Hub layout of every family in ``codeparrot/families.py`` (built by
``tests/families.py``).

Cells (each ``ok``, ``-`` where it does not apply, or what went wrong):

- ``complete``: ``codeparrot complete`` as a subprocess, with ``--suffix`` for the families
  with a FIM template (the prefix alone for the others);
- ``special``: the engine, its model scripted to write one ordinary token and then a special
  token of its family: the completion ends there and holds no special token's text;
- ``serve``: ``codeparrot serve``'s service over HTTP, a request with a suffix;
- ``lsp``: the language server's suggestion for a cursor inside a function, with the text
  after it, holding no special-token text;
- ``bos``: a left-to-right prompt starts with BOS exactly where the tokenizer adds it;
- ``app``: the playground started on a free port and called through ``gradio_client``
  (its ``/generate`` endpoint), the candidate holding no special-token text;
- ``finetune`` and ``lora``: ``finetune`` (every weight, then ``--peft lora``) for two
  steps on a small repository, the result loaded by the engine;
- ``hub``: ``codeparrot complete --checkpoint someorg/NAME`` with the model only in a
  Hugging Face cache built here and ``HF_HUB_OFFLINE=1``.

    .venv/bin/python bench/models.py [--families codellama,qwen2.5-coder]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).parent.resolve()]
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests.training helpers

PREFIX = "import os\n\n\ndef join(parts):\n    return "
SUFFIX = "\n\n\nprint(join(['a']))\n"
CELLS = ("complete", "special", "serve", "lsp", "bos", "app", "finetune", "lora", "hub")


def _special_token(engine: Any) -> int:
    """A special token of the model's family other than its end-of-text one, if it has one."""
    ids = sorted(engine.special_ids - {engine.eos_token_id, *engine.bos_ids})
    if engine.fim is not None and engine.fim.stops - {engine.eos_token_id}:
        return min(engine.fim.stops - {engine.eos_token_id})
    return ids[0] if ids else int(engine.eos_token_id)


def _scripted(path: Path) -> tuple[Any, str]:
    """An engine whose model writes one ordinary token, then a special one."""
    from families import ScriptedHead

    from codeparrot.generation import Engine

    engine = Engine.load(path, quantize="none", lean_load=False)  # its head is hooked
    if engine.decoder.lean is not None:  # the lean decoder does not call the head module
        engine = Engine(engine.model, engine.tokenizer, path=path, lean_gpt2=False)
    word = engine.tokenizer("x", add_special_tokens=False)["input_ids"][-1]
    ScriptedHead(engine.model, [word, _special_token(engine), word])
    return engine, engine.tokenizer.decode([word])


def _has_special_text(engine: Any, text: str) -> bool:
    names = engine.tokenizer.convert_ids_to_tokens(sorted(engine.special_ids))
    if engine.fim is not None:
        names += list(engine.fim.template.names)
    return any(n and n in text for n in names)


def cell_complete(path: Path, fim: bool) -> str:
    cmd = [sys.executable, "-m", "codeparrot", "complete", "--checkpoint", str(path)]
    cmd += ["--temperature", "0", "--max-new-tokens", "8", "--json", "--device", "cpu"]
    if fim:
        cmd += ["--suffix", SUFFIX]
    proc = subprocess.run([*cmd, PREFIX], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [""])[-1]
        return f"exit {proc.returncode}: {last[:60]}"
    json.loads(proc.stdout)
    return "ok"


def cell_special(path: Path) -> str:
    from codeparrot.generation import GenerationConfig

    engine, _word = _scripted(path)
    suffix = SUFFIX if engine.fim is not None else None
    config = GenerationConfig(max_new_tokens=8, temperature=0.0, heal=False)
    out = engine.generate(PREFIX, config, suffix=suffix)[0]
    if out.finish_reason != "eos" or out.new_tokens != 1 or _has_special_text(engine, out.text):
        return f"{out.finish_reason} {out.new_tokens} {out.text[:20]!r}"
    return "ok"


def cell_serve(path: Path) -> str:
    from codeparrot.serve.config import ServeConfig
    from codeparrot.serve.server import make_server

    engine, _word = _scripted(path)
    server = make_server(ServeConfig(checkpoint=path, port=0), engine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    payload: dict[str, Any] = {"prompt": PREFIX, "max_tokens": 8, "temperature": 0}
    if engine.fim is not None:
        payload["suffix"] = SUFFIX
    req = urllib.request.Request(
        server.url + "/v1/completions",
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            text = json.load(resp)["choices"][0]["text"]
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}"
    finally:
        server.shutdown()
        server.server_close()
    return "special text" if _has_special_text(engine, text) else "ok"


def cell_lsp(path: Path) -> str:
    from codeparrot.lsp.completion import suggest
    from codeparrot.lsp.config import LspConfig
    from codeparrot.lsp.documents import Document, cursor_window

    engine, _word = _scripted(path)
    doc = PREFIX + SUFFIX
    window = cursor_window(Document("file:///a.py", doc), len(PREFIX), 4000, 2000)
    outcome = suggest(engine, window, None, LspConfig(), threading.Event())
    shown = outcome.suggestion or ""
    return "special text" if _has_special_text(engine, outcome.raw + shown) else "ok"


def cell_bos(path: Path) -> str:
    from codeparrot.generation import Engine

    engine = Engine.load(path, quantize="none")
    ids, _ = engine.encode_prompt("x = 1", 8)
    return "ok" if ids == engine.tokenizer("x = 1")["input_ids"] else f"{ids[:3]}"


class _OnePool:
    """The playground's engine pool, holding one scripted engine."""

    def __init__(self, path: Path, engine: Any) -> None:
        self.checkpoints = {str(path): path}
        self.engine = engine

    def is_loaded(self, key: str) -> bool:
        return True

    def get(self, key: str) -> Any:
        return self.engine


def cell_app(path: Path) -> str:
    import gradio_client

    from codeparrot.app.config import AppConfig
    from codeparrot.app.ui import Playground, serve

    engine, _word = _scripted(path)
    config = AppConfig(checkpoints=(path,), port=0, compile=False)
    demo, url = serve(Playground(config, pool=_OnePool(path, engine)), block=False)
    try:
        client = gradio_client.Client(url, verbose=False)
        args = (str(path), PREFIX, 8, 0.0, 1.0, 1, 0, "none", "")
        details = client.predict(*args, api_name="/generate")[1]
        text = details[0]["text"]
    finally:
        demo.close()
    return "special text" if _has_special_text(engine, text) else "ok"


def cell_finetune(path: Path, root: Path, peft: str | None) -> str:
    from codeparrot.generation import Engine, GenerationConfig
    from codeparrot.training.finetune import finetune
    from tests.training.test_finetune import make_repository, tiny_finetune

    repository = root / "repository"
    if not repository.exists():
        make_repository(repository)
    out = root / f"{path.name}-{peft or 'full'}"
    config = tiny_finetune(repository, path, out, max_steps=2, peft=peft, eval_tokens=500)
    result = finetune(config)
    engine = Engine.load(result.model, quantize="none")
    engine.generate(PREFIX, GenerationConfig(max_new_tokens=2, temperature=0))
    return "ok" if result.steps == 2 else f"{result.steps} steps"


def cell_hub(path: Path, root: Path) -> str:
    import os

    from tests.core.test_hub_models import cache_model

    cache = root / "hf" / "hub"
    repo_id = f"someorg/{path.name.replace('.', '-')}"
    cache_model(cache, repo_id, path)
    env = os.environ | {"HF_HOME": str(cache.parent), "HF_HUB_CACHE": str(cache)}
    env |= {"HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "codeparrot", "complete", "--checkpoint", repo_id]
    cmd += ["--temperature", "0", "--max-new-tokens", "4", "--json", "--device", "cpu"]
    proc = subprocess.run([*cmd, PREFIX], capture_output=True, text=True, timeout=300, env=env)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or [""])[-1]
        return f"exit {proc.returncode}: {last[:60]}"
    json.loads(proc.stdout)
    return "ok"


def run_family(name: str, root: Path) -> dict[str, str]:
    from families import FAMILIES, build_family

    path = build_family(name, root / name)
    fim = FAMILIES[name].template is not None
    cells = {
        "complete": lambda: cell_complete(path, fim),
        "special": lambda: cell_special(path),
        "serve": lambda: cell_serve(path),
        "lsp": lambda: cell_lsp(path),
        "bos": lambda: cell_bos(path),
        "app": lambda: cell_app(path),
        "finetune": lambda: cell_finetune(path, root, None),
        "lora": lambda: cell_finetune(path, root, "lora"),
        "hub": lambda: cell_hub(path, root),
    }
    row = {}
    for cell, work in cells.items():
        try:
            row[cell] = work()
        except Exception as e:  # a cell's failure is its content
            row[cell] = f"{type(e).__name__}: {str(e)[:50]}"
    return row


def main() -> None:
    from families import FAMILIES

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated names")
    args = parser.parse_args()
    names = [n for n in args.families.split(",") if n]
    started = time.perf_counter()
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            rows[name] = run_family(name, Path(tmp))
            print(f"{name}: {rows[name]}", file=sys.stderr, flush=True)
    width = max(len(n) for n in names)
    print(f"| {'family':<{width}} | " + " | ".join(CELLS) + " | FIM template |")
    print(f"|{'-' * (width + 2)}|" + "|".join("-" * (len(c) + 2) for c in CELLS) + "|---|")
    for name in names:
        cells = " | ".join(f"{rows[name][c]:<{len(c)}}" for c in CELLS)
        template = FAMILIES[name].template or "-"
        print(f"| {name:<{width}} | {cells} | {template} |")
    ok = sum(v == "ok" for r in rows.values() for v in r.values())
    total = sum(len(r) for r in rows.values())
    print(f"\n{ok}/{total} cells ok in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
