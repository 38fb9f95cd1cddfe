"""The syntax check: candidates after which the code does not parse are replaced by draws."""

from __future__ import annotations

import dataclasses

from codeparrot.generation import GenerationConfig
from codeparrot.generation.engine import Completion, StreamEvent
from codeparrot.generation.syntax import (
    MAX_CHECK_CHARS,
    checked_generate,
    fits_in_window,
    most_common,
    parses,
)


def test_parses_builds_a_tree_and_runs_nothing(tmp_path):
    marker = tmp_path / "ran"
    assert parses(f"open({str(marker)!r}, 'w').write('x')\n")
    assert not marker.exists()
    assert parses("def f(x):\n    return x\n")
    assert not parses("def f(x):\n    if x:\nreturn x\n")
    assert not parses("x = (1,\n")
    assert not parses("x = '\0'")  # a null byte: ValueError inside ast, reported as False
    assert not parses("(" * 10_000)  # too deep: no RecursionError escapes


def test_the_window_check_blames_a_middle_only_for_errors_on_its_lines():
    fits = fits_in_window("import os\n\ndef f(x):\n    y = 1\n", "    return y\n\n\ndef g(:\n")
    assert fits("    y = 2\n")  # the broken `def g(:` below is the file's own
    assert not fits("    if x:\n")  # nothing indented under it
    assert not fits("    z = (1,\n")  # a bracket never closed
    inside = fits_in_window("    y = 1\n    ", "\n    return y\n")  # no statement start
    assert inside("if x:")  # not checked: the window's first line is an error above
    body = "def f():\n" + "    x = 1\n" * (MAX_CHECK_CHARS // 10 + 1)
    assert not fits_in_window("x = 1\n" * 1000 + "def f():\n", "")("    def (")  # trimmed
    assert fits_in_window(body, "")("    def (")  # one statement too long to check: accepted


def test_most_common_counts_trailing_whitespace_as_nothing():
    assert most_common([]) is None
    assert most_common(["a", "b  ", "b", "a "]) == "a"  # a tie: the first drawn
    assert most_common(["a", "b", "b "]) == "b"


class Scripted:
    """An engine that answers each call with the next list of texts, recording configs.

    ``stream`` finishes the candidates in ``order`` (indexes; default: as listed) and
    records in ``finished`` how many it finished before the caller stopped reading.
    """

    def __init__(self, *answers: list[str], order: list[int] | None = None) -> None:
        self.answers = list(answers)
        self.configs: list[GenerationConfig] = []
        self.order = order
        self.finished: list[int] = []

    def generate(self, prompt, config, cancel=None, **kwargs):
        self.configs.append(config)
        texts = self.answers.pop(0)
        assert len(texts) == config.n
        return [Completion(t, "stop", 3, 2, 0.5, seed=config.seed) for t in texts]

    def stream(self, prompt, config, cancel=None, **kwargs):
        made = self.generate(prompt, config, cancel=cancel, **kwargs)
        self.finished.append(0)
        for i in self.order or range(len(made)):
            yield StreamEvent(i, made[i].text)
            self.finished[-1] += 1
            yield StreamEvent(i, "", made[i])


def fits_if_no_colon(text: str) -> bool:
    return not text.endswith(":")


def test_a_greedy_candidate_that_fits_costs_nothing_more():
    engine = Scripted(["    return x"])
    made = checked_generate(engine, "p", GenerationConfig(temperature=0.0), fits_if_no_colon, 8)
    assert [c.text for c in made] == ["    return x"] and len(engine.configs) == 1


def test_a_greedy_candidate_that_breaks_the_code_gets_the_consensus_of_the_draws():
    draws = ["    if y:", "    return y", "    return x", "    return y ", "    return x"]
    engine = Scripted(["    if x:"], draws)
    config = GenerationConfig(temperature=0.0, seed=7)
    made = checked_generate(engine, "p", config, fits_if_no_colon, 5)
    assert [c.text for c in made] == ["    return y"]  # 2 of 4 that fit, drawn before "x"
    assert engine.configs[1].n == 5 and engine.configs[1].seed == 8
    assert engine.configs[1].temperature > 0
    assert made[0].seconds > 0.5  # its own time and the batch of draws


def test_sampled_candidates_each_get_their_own_draw_in_order():
    engine = Scripted(["a:", "b", "c:"], ["d:", "e", "f", "g:"])
    config = GenerationConfig(n=3, temperature=0.8, seed=0)
    made = checked_generate(engine, "p", config, fits_if_no_colon, 2)
    assert [c.text for c in made] == ["e", "b", "f"]
    assert engine.configs[1].n == 4 and engine.configs[1].temperature == 0.8


def test_candidates_no_draw_can_replace_stay_and_zero_samples_is_plain_generate():
    engine = Scripted(["a:", "b:"], ["c:", "d"])
    made = checked_generate(
        engine, "p", GenerationConfig(n=2, temperature=0.5), fits_if_no_colon, 1
    )
    assert [c.text for c in made] == ["d", "b:"]
    engine = Scripted(["a:"])
    assert [
        c.text for c in checked_generate(engine, "p", GenerationConfig(), fits_if_no_colon, 0)
    ] == ["a:"]


def test_the_check_passes_the_suffix_through_to_the_engine():
    seen = []

    class Recording(Scripted):
        def generate(self, prompt, config, cancel=None, **kwargs):
            seen.append(kwargs.get("suffix"))
            return super().generate(prompt, config, cancel=cancel, **kwargs)

    engine = Recording(["x:"], ["y"])
    config = dataclasses.replace(GenerationConfig(temperature=0.0), seed=1)
    checked_generate(engine, "p", config, fits_if_no_colon, 1, suffix="    return y\n")
    assert seen == ["    return y\n", "    return y\n"]


def test_the_draws_stay_one_batch_within_the_engines_bound():
    engine = Scripted(["a:"] * 20, ["b"] * 1024)
    config = GenerationConfig(n=20, temperature=0.8, seed=0)
    made = checked_generate(engine, "p", config, fits_if_no_colon, 64)
    assert engine.configs[1].n == 1024 and [c.text for c in made] == ["b"] * 20


def test_the_draws_stop_once_the_choice_is_settled():
    # greedy: "b" has 3 of the 4 finished, 1 unfinished can no longer outvote it
    draws = ["b", "a", "b", "b", "long and unfinished"]
    engine = Scripted(["x:"], draws, order=[0, 1, 2, 3, 4])
    made = checked_generate(engine, "p", GenerationConfig(temperature=0.0), fits_if_no_colon, 5)
    assert [c.text for c in made] == ["b"] and engine.finished == [4]
    # draws that do not fit count for nothing: 2 "b" against 1 "a" + 2 unfinished is open
    engine = Scripted(["x:"], ["b", "c:", "b", "a", "a"], order=[0, 1, 2, 3, 4])
    made = checked_generate(engine, "p", GenerationConfig(temperature=0.0), fits_if_no_colon, 5)
    assert [c.text for c in made] == ["b"] and engine.finished == [5]  # a 2-2 tie: first drawn
    # sampling: the first fitting draws in the order drawn, once every earlier one finished
    engine = Scripted(["x:", "y:"], ["c", "d:", "e", "f"], order=[2, 0, 1, 3])
    config = GenerationConfig(n=2, temperature=0.8, seed=0)
    made = checked_generate(engine, "p", config, fits_if_no_colon, 2)
    assert [c.text for c in made] == ["c", "e"] and engine.finished == [3]


def test_a_deadline_stops_the_draws_and_chooses_among_those_finished(monkeypatch):
    from types import SimpleNamespace

    from codeparrot.generation import syntax

    ticks = iter(range(1000))  # every look at the clock is one tick later
    monkeypatch.setattr(syntax, "time", SimpleNamespace(perf_counter=lambda: next(ticks)))
    draws = ["b", "a", "a", "a", "c"]
    engine = Scripted(draws)
    config = GenerationConfig(temperature=0.0, seed=0)
    # tick 0 starts; the first draw's two events come at ticks 1 and 2; at tick 3 it is over
    made = syntax.replacements(engine, "p", config, fits_if_no_colon, 5, 1, deadline=2.5)
    assert [c.text for c in made] == ["b"] and engine.finished == [1]
    engine = Scripted(draws)  # without one, the whole batch's choice
    made = syntax.replacements(engine, "p", config, fits_if_no_colon, 5, 1)
    assert [c.text for c in made] == ["a"]
