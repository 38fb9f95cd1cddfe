"""Fill in the middle in the training data: spans, layouts, rates, both data paths, resume."""

from __future__ import annotations

from pathlib import Path

import pytest

from codeparrot.errors import ConfigError
from codeparrot.training import TrainConfig


def test_fim_settings_are_checked_and_off_by_default(tmp_path: Path):
    config = TrainConfig(data=tmp_path, output=tmp_path / "run", tokenizer=tmp_path)
    assert config.fim_rate == 0.0
    with pytest.raises(ConfigError) as err:
        TrainConfig(
            data=tmp_path,
            output=tmp_path / "run",
            tokenizer=tmp_path,
            fim_rate=1.5,
            fim_spm_rate=-0.1,
            fim_mode="file",
        )
    message = str(err.value)
    for flag in ("--fim-rate must be in [0, 1], got 1.5", "--fim-spm-rate", "--fim-mode"):
        assert flag in message
