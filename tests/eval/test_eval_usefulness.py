"""`eval loss` and `eval lines`: the metrics a small model moves, on a two-layer checkpoint."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from codeparrot.errors import CheckpointError, ConfigError, DataError
from codeparrot.eval.heldout import HeldoutFile, installed_heldout_packages, read_heldout
from codeparrot.eval.lines import LinesConfig, edit_similarity, evaluate_lines, pick_lines
from codeparrot.eval.loss import LossConfig, checkpoint_loss, document_nats, evaluate_loss

FILES = {
    "pkg/a.py": "def add(a, b):\n    return a + b\n\n\nclass Point:\n    x = 1  # é\n",
    "pkg/b.py": "import os\n\n\ndef home():\n    path = os.path.expanduser('~')\n    return path\n",
}


@pytest.fixture
def heldout(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        (tmp_path / "data" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "data" / name).write_text(text, encoding="utf-8")
    return tmp_path / "data"


def test_loss_per_char_matches_a_hand_computation(tiny_checkpoint, heldout):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint).eval()
    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    nats = 0.0
    for text in FILES.values():
        ids = torch.tensor([[tok.eos_token_id, *tok(text)["input_ids"]]])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
        nats -= float(logp.gather(1, ids[0, 1:, None]).sum())
    chars = sum(len(t) for t in FILES.values())
    nbytes = sum(len(t.encode()) for t in FILES.values())

    row = checkpoint_loss(tiny_checkpoint, read_heldout(heldout))
    assert row.nats_per_char == pytest.approx(nats / chars, rel=1e-4)
    assert row.bits_per_byte == pytest.approx(nats / nbytes / math.log(2), rel=1e-4)
    assert nbytes > chars  # the é: per byte and per character differ


def test_long_files_score_every_token_once_in_overlapping_windows():
    import torch

    class Uniform:
        device = torch.device("cpu")

        def __init__(self):
            self.windows: list[int] = []

        def __call__(self, ids):
            self.windows.append(ids.shape[1])
            return type("Out", (), {"logits": torch.zeros(1, ids.shape[1], 50)})()

    model = Uniform()
    nats = document_nats(model, list(range(1, 41)), context=16)
    assert nats == pytest.approx(39 * math.log(50))
    assert len(model.windows) > 2 and max(model.windows) <= 16


def test_loss_table_compares_checkpoints_and_writes_json_and_chart(
    tiny_checkpoint, heldout, tmp_path
):
    config = LossConfig(
        checkpoints=(tiny_checkpoint, tiny_checkpoint), data=heldout,
        output=tmp_path / "loss.json", chart=tmp_path / "loss.png",
    )  # fmt: skip
    report = evaluate_loss(config)
    first, second = report["rows"]
    assert first["nats_per_char"] == pytest.approx(second["nats_per_char"])
    assert json.loads((tmp_path / "loss.json").read_text())["files"] == 2
    assert (tmp_path / "loss.png").read_bytes()[:4] == b"\x89PNG"


def test_a_text_after_its_context_scores_only_its_own_tokens(tiny_checkpoint):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint).eval()
    tok = AutoTokenizer.from_pretrained(tiny_checkpoint)
    context, text = "def add(a, b):", " return a + b"
    ids = [tok.eos_token_id, *tok(context + text)["input_ids"]]
    seam = 1 + len(tok(context)["input_ids"])
    assert ids[:seam] == [tok.eos_token_id, *tok(context)["input_ids"]]  # no merge at the seam
    with torch.no_grad():
        logp = torch.log_softmax(model(torch.tensor([ids])).logits[0, :-1].float(), -1)
    picked = -logp.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
    expected = float(picked[seam - 1 :].sum())

    row = checkpoint_loss(tiny_checkpoint, [HeldoutFile("f", text, context=context)])
    assert row.nats == pytest.approx(expected, rel=1e-4)
    assert row.chars == len(text) and row.tokens == len(ids) - seam


def test_loss_of_humaneval_solutions_through_the_cli(tiny_checkpoint, tmp_path, capsys):
    from codeparrot.cli import main

    out = tmp_path / "he.json"
    assert (
        main(["eval", "loss", str(tiny_checkpoint), "--task", "humaneval", "--output", str(out)])
        == 0
    )
    report = json.loads(out.read_text())
    assert report["files"] == 164 and "humaneval reference solutions" in report["data"]
    assert 0 < report["rows"][0]["nats_per_char"] < 20
    assert "164 files" in capsys.readouterr().out
    with pytest.raises(ConfigError, match="--task and --data"):
        LossConfig(checkpoints=(tiny_checkpoint,), task="humaneval", data=tmp_path)


def test_the_same_seed_picks_the_same_lines_and_an_oracle_scores_100(heldout):
    files = read_heldout(heldout)
    tasks = pick_lines(files, 6, seed=3)
    assert tasks == pick_lines(files, 6, seed=3)
    assert tasks != pick_lines(files, 6, seed=4)
    assert {t.kind for t in tasks} == {"line_start", "mid_line"}
    for t in tasks:  # the cursor splits the file exactly
        assert FILES[t.file].startswith(t.prefix + t.target) and t.target.strip()
        assert FILES[t.file].endswith(t.suffix)
    config = LinesConfig(checkpoint=Path("unused"), data=heldout, n=6, seed=3)
    oracle = evaluate_lines(config, complete=lambda t: t.target + "\nmore text")
    assert oracle["scores"]["all"] == {
        "n": 6, "exact_match": 1.0, "edit_similarity": 1.0,
        "repetitive_raw": 0, "repetitive_shown": 0, "prompts_with_snippets": 0,
    }  # fmt: skip
    wrong = evaluate_lines(config, complete=lambda t: t.target[:-1])
    assert wrong["scores"]["all"]["exact_match"] == 0.0
    assert 0.5 < wrong["scores"]["all"]["edit_similarity"] < 1.0


def test_edit_similarity():
    assert edit_similarity("", "") == 1.0
    assert edit_similarity("abcd", "abcd") == 1.0
    assert edit_similarity("abcd", "abed") == pytest.approx(0.75)
    assert edit_similarity("", "ab") == 0.0


def test_lines_through_the_cli_with_a_checkpoint(tiny_checkpoint, heldout, tmp_path, capsys):
    from codeparrot.cli import main

    out = tmp_path / "lines"
    argv = [
        "eval",
        "lines",
        "--checkpoint",
        str(tiny_checkpoint),
        "--data",
        str(heldout),
        "--n",
        "4",
        "--output",
        str(out),
        "--fim-suffix-share",
        "0.1",
        "--workspace-share",
        "0.2",
        "--no-repetition-filter",
    ]
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["scores"]["all"]["n"] == 4 and summary["fim"] is False
    assert summary["prompt"]["fim_suffix_share"] == 0.1
    assert summary["prompt"]["workspace_share"] == 0.2
    assert summary["prompt"]["repetition_filter"] is False
    # the language server's budget for this 256-token checkpoint: 256 - 32 new - 1
    assert summary["prompt_budget"] == 223
    records = [json.loads(x) for x in (out / "lines.jsonl").read_text().splitlines()]
    assert len(records) == 4 and all(r["raw"] == r["shown"] for r in records)
    printed = capsys.readouterr().out
    assert "exact match" in printed and "repetitive raw" in printed


def test_bad_inputs_name_the_input_and_write_nothing(tiny_checkpoint, heldout, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("no python here")
    with pytest.raises(DataError, match="empty: no Python files"):
        evaluate_loss(
            LossConfig(checkpoints=(tiny_checkpoint,), data=empty, output=tmp_path / "o.json")
        )
    (heldout / "pkg" / "bad.py").write_bytes(b"x = '\xff'\n")
    with pytest.raises(DataError, match=r"bad\.py"):
        evaluate_lines(LinesConfig(checkpoint=tiny_checkpoint, data=heldout, output=tmp_path / "o"))
    (heldout / "pkg" / "bad.py").unlink()
    no_tokenizer = tmp_path / "ckpt"
    no_tokenizer.mkdir()
    for f in tiny_checkpoint.iterdir():
        if f.is_file() and "token" not in f.name:
            (no_tokenizer / f.name).write_bytes(f.read_bytes())
    with pytest.raises(CheckpointError, match="ckpt"):
        evaluate_loss(
            LossConfig(checkpoints=(no_tokenizer,), data=heldout, output=tmp_path / "o.json")
        )
    assert not (tmp_path / "o.json").exists() and not (tmp_path / "o").exists()
    with pytest.raises(ConfigError, match="CHECKPOINT"):
        LossConfig()


def test_the_held_out_packages_are_not_in_this_python():
    # installed packages are in the embedded default corpus (site-packages)
    assert installed_heldout_packages() == []


def test_a_corpus_folder_is_read_through_its_valid_split(tmp_path):
    import gzip

    (tmp_path / "valid").mkdir()
    (tmp_path / "manifest.json").write_text("{}")
    record = {"repo_name": "r", "path": "m.py", "content": "x = 1\n"}
    with gzip.open(tmp_path / "valid" / "shard-00000.jsonl.gz", "wt") as fh:
        fh.write(json.dumps(record) + "\n")
    assert read_heldout(tmp_path) == [HeldoutFile("r/m.py", "x = 1\n")]


def test_lines_with_the_syntax_check_show_a_draw_that_parses(heldout, monkeypatch):
    from codeparrot.generation import Completion, Engine, StreamEvent

    files = read_heldout(heldout)
    tasks = pick_lines(files, 4, seed=3)
    asked = []

    class Scripted:
        fim = None
        context_length = 256

        class tokenizer:
            eos_token = "<|endoftext|>"

        def count_tokens(self, text):
            return len(text) // 4 + 1

        def generate(self, prompt, config, cancel=None, **kwargs):
            asked.append(config.n)
            if config.n == 1:  # greedy: a bracket the line never closes
                return [Completion("(((", "stop", 5, 3, 0.01)]
            task = next(t for t in tasks if prompt.endswith(t.prefix[-12:]))
            texts = ["(((", task.target, task.target][: config.n]
            return [Completion(t, "stop", 5, 3, 0.01) for t in texts]

        def stream(self, prompt, config, cancel=None, **kwargs):
            for i, made in enumerate(self.generate(prompt, config, cancel, **kwargs)):
                yield StreamEvent(i, made.text, made)

    monkeypatch.setattr(Engine, "load", staticmethod(lambda *a, **k: Scripted()))
    plain = LinesConfig(checkpoint=Path("unused"), data=heldout, n=4, seed=3)
    assert evaluate_lines(plain)["scores"]["all"]["exact_match"] == 0.0
    assert asked == [1] * 4
    checked = evaluate_lines(plain.replace(syntax_samples=3))
    assert checked["scores"]["all"]["exact_match"] == 1.0
    assert checked["prompt"]["syntax_samples"] == 3
