"""AppConfig validation, the ``app`` subcommand's flags, the stop modes, the examples."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from codeparrot.app.config import AppConfig
from codeparrot.app.examples import CHAPTER_EXAMPLES, STOP_MODES
from codeparrot.errors import CheckpointError, ConfigError


def test_config_names_every_bad_flag():
    with pytest.raises(ConfigError) as err:
        AppConfig(checkpoints=(), port=70000, concurrency=0, stream_interval=-1)
    message = str(err.value)
    for flag in ("CHECKPOINT", "--port", "--concurrency", "--stream-interval"):
        assert flag in message


def test_checkpoint_flag_repeats_and_round_trips():
    from codeparrot.cli import build_parser
    from codeparrot.config import config_from_args

    # `codeparrot app A B`, and the earlier `--checkpoint` form, repeated or with lists
    args = build_parser().parse_args(["app", "a", "b", "--port", "8000"])
    assert config_from_args(AppConfig, args).checkpoints == (Path("a"), Path("b"))
    args = build_parser().parse_args(
        ["app", "--checkpoint", "a", "--checkpoint", "b", "c", "--port", "8000"]
    )
    config = config_from_args(AppConfig, args)
    assert config.checkpoints == (Path("a"), Path("b"), Path("c")) and config.port == 8000
    assert AppConfig.from_dict(config.to_dict()) == config


def test_app_subcommand_requires_a_checkpoint(capsys):
    from codeparrot.cli import main

    with pytest.raises(SystemExit):
        main(["app"])
    assert "CHECKPOINT is required" in capsys.readouterr().err


def test_cli_refuses_when_no_checkpoint_exists(tmp_path, capsys):
    from codeparrot.cli import main

    status = main(["app", "--checkpoint", str(tmp_path / "nope"), "--port", "0"])
    err = capsys.readouterr().err
    assert status != 0 and "none of these is a directory" in err and "nope" in err


def test_stop_modes():
    import gradio as gr

    from codeparrot.app.ui import stop_sequences
    from codeparrot.generation import HUMANEVAL_STOP_SEQUENCES

    assert stop_sequences("first block", "ignored") == HUMANEVAL_STOP_SEQUENCES
    assert stop_sequences("none", "\\ndef") == ()
    assert stop_sequences("stop sequences", "\\ndef\n\n###\n\\t\\treturn") == (
        "\ndef",
        "###",
        "\t\treturn",
    )
    with pytest.raises(gr.Error):
        stop_sequences("stop sequences", "\n")
    with pytest.raises(gr.Error):
        stop_sequences("sometimes", "")


def test_chapter_examples_are_the_four_prompts():
    prompts = [e.prompt for e in CHAPTER_EXAMPLES]
    assert len(prompts) == 4 and all(e.stop_mode in STOP_MODES for e in CHAPTER_EXAMPLES)
    assert "def area_of_rectangle" in prompts[0]
    assert "def get_urls_from_html" in prompts[1]
    assert "numpy" in prompts[2] and prompts[2].endswith("def mean(a):")
    assert "random forest" in prompts[3] and "20 estimators" in prompts[3]
    # each is valid Python once a body is given to its open function (if any)
    for prompt in prompts:
        body = "\n    pass\n" if prompt.rstrip().endswith((":", '"""')) else "\n"
        compile(prompt + body, "<example>", "exec")


def test_launch_without_any_checkpoint_directory_raises(tmp_path):
    from codeparrot.app.ui import launch

    with pytest.raises(CheckpointError, match="none of these is a directory"):
        launch(AppConfig(checkpoints=(tmp_path / "a",), port=0), block=False)


@pytest.mark.slow
def test_the_pool_compiles_each_model_in_the_background_when_asked(tiny_checkpoint):
    from codeparrot.app.ui import EnginePool

    plain = EnginePool((tiny_checkpoint,)).get(str(tiny_checkpoint))
    assert not plain.steps_compiled.is_set()
    engine = EnginePool((tiny_checkpoint,), compile=True).get(str(tiny_checkpoint))
    assert engine.steps_compiled.wait(timeout=600) and engine.compile_error is None
    assert not AppConfig(checkpoints=(tiny_checkpoint,)).compile  # off, as the editor's


def test_sampling_sliders_follow_the_one_declaration(tmp_path):
    import gradio as gr

    from codeparrot.app.ui import build_app
    from codeparrot.config import field_bounds, field_default
    from codeparrot.generation.config import GenerationConfig

    demo = build_app(AppConfig(checkpoints=(tmp_path,)))
    sliders = {b.label: b for b in demo.blocks.values() if isinstance(b, gr.Slider)}
    temperature, top_p = sliders["Temperature (0: greedy)"], sliders["Top-p"]
    assert temperature.value == field_default(GenerationConfig, "temperature")
    assert temperature.minimum == field_bounds(GenerationConfig, "temperature").minimum
    assert top_p.value == field_default(GenerationConfig, "top_p")
    assert top_p.maximum == field_bounds(GenerationConfig, "top_p").maximum
    assert top_p.minimum > 0  # top_p = 0 is not a setting: the slider cannot reach it


class RecordingPool:
    """A pool that records which checkpoints were asked for (and loads nothing)."""

    def __init__(self, checkpoints: tuple[Path, ...]) -> None:
        self.checkpoints = {str(c): c for c in checkpoints}
        self.asked: list[str] = []

    def is_loaded(self, key: str) -> bool:
        return key in self.asked

    def get(self, key: str) -> object:
        self.asked.append(key)
        return object()


@pytest.mark.parametrize("load_at_start", [True, False])
def test_the_server_loads_the_first_checkpoint_when_it_starts(tmp_path, load_at_start):
    from codeparrot.app.ui import Playground, serve

    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir(), second.mkdir()
    config = AppConfig(checkpoints=(first, second), port=0, load_at_start=load_at_start)
    pool = RecordingPool(config.checkpoints)
    demo, _ = serve(Playground(config, pool=pool), block=False)
    try:
        deadline = time.monotonic() + 10
        while load_at_start and not pool.asked and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        demo.close()
    assert pool.asked == ([str(first)] if load_at_start else [])
