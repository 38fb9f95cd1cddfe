"""--prompt-format: the exact text each reference harness gives the model, and the program run."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

import pytest

from codeparrot.errors import ConfigError
from codeparrot.eval.config import GenerateConfig
from codeparrot.eval.data import load_problems, select_problems
from codeparrot.eval.humaneval import generate_samples
from codeparrot.eval.prompts import completion_after, render_prompt

ADD_DOC = (
    'def add(x: int, y: int):\n    """Add two numbers x and y\n    >>> add(2, 3)\n    5\n'
    '    >>> add(5, 7)\n    12\n    """'
)
CLOSE_DOC = (
    "from typing import List\n\n\n"
    "def has_close_elements(numbers: List[float], threshold: float) -> bool:\n"
    '    """ Check if in given list of numbers, are any two numbers closer to each other than\n'
    "    given threshold.\n    >>> has_close_elements([1.0, 2.0, 3.0], 0.5)\n    False\n"
    "    >>> has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)\n    True\n"
    '    """'
)
EXPECTED = {  # (format, task id): (text given to the model, token healing)
    ("healed", "HumanEval/53"): ("\n\n" + ADD_DOC + "\n", True),
    ("healed", "HumanEval/0"): (CLOSE_DOC + "\n", True),
    ("bigcode", "HumanEval/53"): (ADD_DOC, False),
    ("bigcode", "HumanEval/0"): (CLOSE_DOC, False),
    ("bigcode-unstripped", "HumanEval/53"): ("\n\n" + ADD_DOC + "\n", False),
    ("bigcode-unstripped", "HumanEval/0"): (CLOSE_DOC + "\n", False),
    ("evalplus", "HumanEval/53"): (ADD_DOC + "\n", False),
    ("evalplus", "HumanEval/0"): (CLOSE_DOC + "\n", False),
}


@pytest.mark.parametrize(("prompt_format", "task_id"), list(EXPECTED))
def test_each_format_gives_the_reference_harness_text(prompt_format, task_id):
    prompt = load_problems()[task_id]["prompt"]
    assert render_prompt(prompt, prompt_format, "humaneval") == EXPECTED[prompt_format, task_id]


def test_bigcode_keeps_mbpp_prompts_as_built():
    prompt = '"""\nWrite a function.\nassert f(1) == 2\n"""\n'
    assert render_prompt(prompt, "bigcode", "mbpp") == (prompt, False)


def test_a_completion_of_a_stripped_prompt_runs_as_the_reference_program():
    prompt = load_problems()["HumanEval/53"]["prompt"]
    rendered, _ = render_prompt(prompt, "bigcode", "humaneval")
    completion = completion_after(prompt, rendered, "\n    return x + y\n")
    assert completion == "    return x + y\n"
    assert (prompt + completion).strip() == (rendered + "\n    return x + y\n").strip()
    # evalplus's prompt keeps the line break: nothing to move
    rendered, _ = render_prompt(prompt, "evalplus", "humaneval")
    assert completion_after(prompt, rendered, "    return x + y\n") == "    return x + y\n"


@dataclass
class Made:
    text: str
    finish_reason: str = "stop"


class RecordingEngine:
    """Answers every prompt with the body of ``add`` after a line break; records the calls."""

    context_length = 256
    device = "cpu"
    fim = None

    def __init__(self):
        self.calls = []
        self.lock = threading.Lock()

    def generate(self, prompt, config, cancel=None):
        with self.lock:
            self.calls.append((prompt, config.heal))
        return [Made("\n    return x + y\n")] * config.n


def test_the_format_reaches_the_engine_and_is_recorded(tmp_path):
    problems = select_problems(load_problems(), ("HumanEval/53",))
    engine = RecordingEngine()
    config = GenerateConfig(checkpoint=tmp_path, output=tmp_path, n=1, batch_size=1,
                            max_new_tokens=8, prompt_format="bigcode")  # fmt: skip
    path = generate_samples(config, problems, engine=engine, progress=False)
    assert engine.calls == [(ADD_DOC, False)]
    [sample] = [json.loads(line) for line in path.read_text().splitlines()]
    assert sample["completion"] == "    return x + y\n"
    meta = json.loads((tmp_path / "samples.meta.json").read_text())
    assert meta["generation"]["prompt"] == "bigcode"


def test_stripping_formats_are_refused_for_infilling():
    with pytest.raises(ConfigError, match="--prompt-format bigcode strips"):
        GenerateConfig(checkpoint=".", task="infill-single-line", prompt_format="bigcode")
