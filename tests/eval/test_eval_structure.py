"""A problem file's task is read from its tests' syntax trees (``eval/structure.py``).

The text ``import numpy`` inside a string imports nothing and changes no task; evalplus's
layout of a plus test is what makes a file HumanEval+, and only then does the installed
HumanEval test stand in as a problem's base test, which the report says.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from codeparrot.cli import main
from codeparrot.errors import DataError
from codeparrot.eval.data import load_problems
from codeparrot.eval.structure import literal_calls
from codeparrot.eval.structure import record_shape as shape_of
from codeparrot.eval.tasks import load_task

PLUS_TEST = """
import numpy as np


def assertion(out, exp, atol):
    assert out == exp or np.allclose(out, exp, atol=atol)


def check(candidate):
    inputs = [[[1.0, 2.0, 3.0], 0.5], [[1.0, 2.8, 3.0], 0.3]]
    results = [False, True]
    for i, (inp, exp) in enumerate(zip(inputs, results)):
        assertion(candidate(*inp), exp, 0)
"""
# A test no completion passes, with the text of an import in a string.
STRING_IMPORT_TEST = '''
NOTE = """
import numpy
"""


def check(candidate):
    assert candidate([1.0, 2.0], 0.5) == "never"
'''


def problem_file(path: Path, tests: dict[str, str]) -> Path:
    he = load_problems()
    keys = ("task_id", "prompt", "canonical_solution", "entry_point")
    path.write_text(
        "".join(json.dumps({k: he[t][k] for k in keys} | {"test": test}) + "\n"
                for t, test in tests.items())
    )  # fmt: skip
    return path


def test_shapes_come_from_the_syntax_tree():
    plus = shape_of({"test": PLUS_TEST})
    assert plus.imports == {"numpy"} and plus.plus_layout
    text = shape_of({"test": STRING_IMPORT_TEST})
    assert text.imports == frozenset() and not text.plus_layout
    base = shape_of({"test": load_problems()["HumanEval/0"]["test"]})
    assert not base.plus_layout
    nested = shape_of({"test": "def check(candidate):\n    from numpy.linalg import norm\n"})
    assert nested.imports == {"numpy"}
    assert not shape_of({"test": "def check(candidate:\n"}).parsed
    mbpp = shape_of({"test": "assert f(1) == 2\n", "test_imports": ["import math", "import re"]})
    assert mbpp.imports == {"math", "re"}


def test_a_string_that_reads_import_numpy_changes_no_task(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("CODEPARROT_ALLOW_CODE_EXECUTION", "1")
    path = problem_file(tmp_path / "problems.jsonl", {"HumanEval/0": STRING_IMPORT_TEST})
    found = load_task("humaneval", path)
    assert found.task == "humaneval" and found.installed_tests == 0
    assert found.problems["HumanEval/0"]["test"] == STRING_IMPORT_TEST
    samples = tmp_path / "s.jsonl"
    completion = load_problems()["HumanEval/0"]["canonical_solution"]
    samples.write_text(json.dumps({"task_id": "HumanEval/0", "completion": completion}) + "\n")
    argv = ["eval", "execute", str(samples), "--problem-file", str(path), "--ks", "1",
            "--workers", "1"]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "pass@1: 0.00%" in printed and "humanevalplus" not in printed
    assert "installed" not in printed


def test_only_records_laid_out_as_plus_tests_get_the_installed_base_test(tmp_path):
    he = load_problems()
    path = problem_file(
        tmp_path / "plus.jsonl", {"HumanEval/0": PLUS_TEST, "HumanEval/2": STRING_IMPORT_TEST}
    )
    found = load_task("humanevalplus", path)
    assert found.installed_tests == 1
    assert found.problems["HumanEval/0"]["test"] == he["HumanEval/0"]["test"]
    assert found.problems["HumanEval/0"]["plus_test"] == PLUS_TEST
    own = found.problems["HumanEval/2"]
    assert own["test"] == STRING_IMPORT_TEST and "plus_test" not in own
    # given as HumanEval, a file with one record not in the layout is not HumanEval+: its
    # numpy import is refused for the checker of HumanEval, with the way round
    with pytest.raises(DataError, match=r"numpy \(1 problems\).*--task humanevalplus"):
        load_task("humaneval", path)


def test_a_file_laid_out_as_humanevalplus_is_read_as_it(tmp_path):
    path = problem_file(tmp_path / "plus.jsonl", {"HumanEval/0": PLUS_TEST})
    found = load_task("humaneval", path)
    assert found.task == "humanevalplus" and found.installed_tests == 1
    # a task id that is not HumanEval's has no installed test to stand in
    record = json.loads(path.read_text()) | {"task_id": "Mine/0"}
    other = tmp_path / "other.jsonl"
    other.write_text(json.dumps(record) + "\n")
    with pytest.raises(DataError, match="--task humanevalplus"):
        load_task("humaneval", other)
    found = load_task("humanevalplus", other)
    assert found.installed_tests == 0 and found.problems["Mine/0"]["test"] == PLUS_TEST


CROSS_TEST = """
def ref_func(n):
    return n + 1


def check(candidate):
    inputs = [[1], [2], (3,), [[4, 5], {"k": -0.0}]]
    for i, inp in enumerate(inputs):
        assert candidate(*inp) == ref_func(*inp)
"""


def test_plus_calls_are_read_from_the_literal_inputs_of_either_layout():
    assert literal_calls(PLUS_TEST + "\n\ncheck(f)\n", "f") == [
        (([1.0, 2.0, 3.0], 0.5), {}),
        (([1.0, 2.8, 3.0], 0.3), {}),
    ]
    assert literal_calls(CROSS_TEST + "\n\ncheck(f)\n", "f") == [
        ((1,), {}),
        ((2,), {}),
        ((3,), {}),
        (([4, 5], {"k": -0.0}), {}),
    ]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("check(f)", "check(g)"),  # the entry point is another function
        ("check(f)", "check(f)\nprint(1)"),  # more top-level code after the call
        ("inputs = [[1], [2]", "inputs = [[abs(-1)], [2]"),  # not literal: runs code
        ("inputs = [[1], [2]", "inputs = [{1}, [2]"),  # a set: no order across processes
        ("inputs = [[1], [2]", "inputs = [1, [2]"),  # an input is not a list of arguments
        ("candidate(*inp)", "candidate(inp)"),  # not one call per input's items
        ("candidate(*inp)", "candidate(*inp, 1)"),
        ("candidate(*inp)", "candidate(*inp) and candidate(*inp)"),
        ("for i, inp in enumerate(inputs):", "for i, inp in enumerate(inputs):\n        inp = [0]"),
        ("enumerate(inputs)", "enumerate(reversed(inputs))"),
    ],
)
def test_any_other_test_has_no_literal_calls(old, new):
    test = (CROSS_TEST + "\n\ncheck(f)\n").replace("inputs = [[1], [2], (3,)", "inputs = [[1], [2]")
    assert literal_calls(test, "f") is not None
    changed = test.replace(old, new, 1)
    assert changed != test
    assert literal_calls(changed, "f") is None


HUMANEVAL_TEST = """
METADATA = {}


def check(candidate):
    import math
    assert candidate([1.0, 2.0], 0.5) == True, "the message runs only once it failed"
    x = candidate("a", k=(1, -2))
    assert math.isclose(abs(candidate(1) - 2), 0) and x
    assert candidate(2) != candidate(3) < 4
    for _ in range(2):
        assert True
"""


def test_humaneval_asserts_of_literal_arguments_are_read_in_the_order_they_run():
    # `a and b`: b only runs where a is true; a chain stops at its first false comparison
    assert literal_calls(HUMANEVAL_TEST + "\n\ncheck(f)\n", "f") == [
        (([1.0, 2.0], 0.5), {}),
        (("a",), {"k": (1, -2)}),
        ((1,), {}),
        ((2,), {}),
        ((3,), {}),
    ]


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("candidate(1)", "candidate(x)"),  # an argument that is not literal
        ("candidate(1)", "candidate(*[1])"),
        ("and x", "and candidate(4)"),  # may not run
        ("< 4", "< candidate(4)"),
        ("x = candidate", "x, y = candidate"),
        ("assert True", "assert candidate(5)"),  # in a loop
        ("import math", "import math\n    g = candidate"),
        ("METADATA = {}", "METADATA = f(0)"),  # the test calls the entry point by name too
    ],
)
def test_a_humaneval_test_whose_calls_may_differ_is_not_read(old, new):
    test = HUMANEVAL_TEST + "\n\ncheck(f)\n"
    changed = test.replace(old, new, 1)
    assert changed != test
    assert literal_calls(changed, "f") is None


# evalplus's layout with the parts its checks rewrite (tasks.plus_test): the tolerance check
# in `assertion`, HumanEval/32's oracle in `check`.
REWRITTEN_TEST = """
import numpy as np

def assertion(out, exp, atol):
    if atol == 0:
        assert np.allclose(out, exp, rtol=1e-07, atol=atol)
    x = 1; y = [
        2]

def check(candidate):
    inputs = [[1.0], [2.0], [[3, 4]]]
    for i, inp in enumerate(inputs):
        assert abs(_poly(*candidate(*inp), inp)) < 1e-6
"""


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("", ""),  # no change
        ("rtol=1e-07, atol=atol)", "rtol=1e-07, atol=atol)  "),  # a trailing space
        ("x = 1; y", "x = 2; y"),  # two statements on a line: both parsed again
        ("        2]", "        3]"),  # the last line of a statement
        ("[[1.0], [2.0]", "[[1.0], [5.0]"),  # inside check's inputs
        ("def check", "@staticmethod\ndef check"),  # a decorator
        ("def assertion", "z = 0\ndef assertion"),  # a statement before the changed one
        ("\ndef check", "\nw = check\n\ndef check"),  # a new statement between two
        ("\ndef check", "\n# a comment\ndef check"),  # only a comment between two
        ("    x = 1; y", "    x = '''\n    y"),  # no longer parses
        ("import numpy as np", "from __future__ import annotations\nimport numpy as np"),
    ],
)
def test_a_rewritten_test_is_read_from_the_first_parse_as_a_whole_parse_reads_it(old, new):
    """Where the tree of a changed test is made from the original's (only the changed
    statements parsed again), it is the tree a parse of the whole changed text gives."""
    import ast

    from codeparrot.eval.structure import _reparsed

    changed = REWRITTEN_TEST.replace(old, new, 1)
    tree = _reparsed(ast.parse(REWRITTEN_TEST), REWRITTEN_TEST, changed)
    if tree is not None:
        assert ast.dump(tree) == ast.dump(ast.parse(changed))  # (line numbers aside)
    else:
        assert old in ("    x = 1; y", "import numpy as np")


def test_a_plus_files_calls_are_read_while_it_is_recognised(tmp_path):
    """The calls of each plus test as it runs (evalplus's checks added, check called on the
    entry point) come with the problems: the test is not parsed again for them."""
    from codeparrot.eval.replay import literal_plan
    from codeparrot.eval.scoring import check_program

    tests = {"HumanEval/0": PLUS_TEST, "HumanEval/32": REWRITTEN_TEST}
    found = load_task("humaneval", problem_file(tmp_path / "plus.jsonl", tests))
    assert found.problems["HumanEval/32"]["plus_test"] != REWRITTEN_TEST  # checks added
    for problem in found.problems.values():
        program = check_program(problem, "", problem["plus_test"])
        key = (program.test, program.entry_point)
        assert key in found.calls
        assert found.calls[key] == literal_calls(*key) is not None
        assert literal_plan(*key, found.calls) == literal_plan(*key)
    # a call read for a test's text is used only for that very text
    assert literal_plan("check(f)\n", "f", {("check(f)\n", "f"): [((1,), {})]}) is not None
    assert literal_plan("check(g)\n", "g", {("check(f)\n", "f"): [((1,), {})]}) is None


def test_a_statement_joined_to_the_line_before_it_is_parsed_again_as_a_whole():
    import ast

    from codeparrot.eval.structure import _reparsed

    old = REWRITTEN_TEST.replace("def check", "@\\\nstaticmethod\ndef check", 1)
    new = old.replace("[[1.0], [2.0]", "[[1.0], [5.0]", 1)
    assert _reparsed(ast.parse(old), old, new) is None  # the decorator's "@" is on the line before
    new = old.replace("        2]", "        3]", 1)
    assert ast.dump(_reparsed(ast.parse(old), old, new)) == ast.dump(ast.parse(new))
