"""`train --resume` refuses a state file whose records could expand beyond the file.

``torch.load`` allocates what a zip record claims and inflates a compressed one into
it: a 3.1 MB optimizer.bin holding a compressed record reached 3.4 GiB before it was
refused. ``torch.save`` stores records uncompressed, so the check is that every record
is stored and, all together, no larger than the file, read from the central directory.
"""

from __future__ import annotations

import importlib.util
import zipfile
from pathlib import Path

import pytest

from codeparrot.errors import CheckpointError
from codeparrot.training import train
from codeparrot.training.resume_state import check_record_sizes, check_state_files


def _resume_tests():
    """The run and config helpers of test_resume_state (one tiny run, a few seconds)."""
    path = Path(__file__).parent / "test_resume_state.py"
    spec = importlib.util.spec_from_file_location("_resume_state_tests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


helpers = _resume_tests()


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_checkpoint) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("resume-bounds")
    corpus = helpers.write_corpus(root / "corpus")
    train(helpers.tiny_config(corpus, tiny_checkpoint, root / "run", max_tokens=2 * 2 * 32))
    return corpus, root / "run"


def rewrite(file: Path, *, replace: dict[str, bytes] | None = None) -> None:
    """``file``'s records written again deflated: those ending with a key of ``replace``,
    with its bytes; or, without ``replace``, every one as it was."""
    with zipfile.ZipFile(file) as zin:
        records = [(i.filename, zin.read(i.filename)) for i in zin.infolist()]
    with zipfile.ZipFile(file, "w", zipfile.ZIP_STORED) as zout:
        for name, data in records:
            key = next((k for k in replace or {} if name.endswith(k)), None)
            deflate = replace is None or key is not None
            method = zipfile.ZIP_DEFLATED if deflate else zipfile.ZIP_STORED
            zout.writestr(name, replace[key] if key else data, compress_type=method)


def test_an_inflating_optimizer_record_is_refused_before_it_expands(
    finished_run, tiny_checkpoint, tmp_path
):
    corpus, run = finished_run
    run = helpers.copy_of(run, tmp_path)
    state = helpers.state_dir(run)
    optimizer = state / "optimizer.bin"
    original = optimizer.read_bytes()
    check_state_files(state)  # as torch.save wrote it
    # the first tensor's record: 64 MiB of zeros in a few kilobytes
    rewrite(optimizer, replace={"/data/0": bytes(2**26)})
    assert optimizer.stat().st_size < 2**26 // 16
    config = helpers.tiny_config(corpus, tiny_checkpoint, run, resume=True)
    with pytest.raises(CheckpointError) as info:
        train(config)
    message = str(info.value)
    assert "optimizer.bin" in message and "compressed" in message
    assert f"{2**26:,}" in message  # what it would have expanded to
    optimizer.write_bytes(original)  # whole again, the same file passes
    check_state_files(state)


@pytest.mark.parametrize("name", ["scheduler.bin", "optimizer.bin"])
def test_any_compressed_record_is_refused(finished_run, tmp_path, name):
    _corpus, run = finished_run
    state = helpers.state_dir(helpers.copy_of(run, tmp_path))
    rewrite(state / name)
    with pytest.raises(CheckpointError, match=rf"{name}: record .* is compressed"):
        check_state_files(state)


def test_a_record_claiming_more_than_the_file_is_refused(tmp_path):
    import torch

    file = tmp_path / "scheduler.bin"
    torch.save({"step": torch.zeros(256)}, file)
    check_record_sizes(file)
    data = bytearray(file.read_bytes())
    name = data.rfind(b"/data/0")  # in the central directory, after the records
    header = data.rfind(b"PK\x01\x02", 0, name)
    data[header + 20 : header + 28] = (2**31).to_bytes(4, "little") * 2
    file.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="more than the file"):
        check_record_sizes(file)
