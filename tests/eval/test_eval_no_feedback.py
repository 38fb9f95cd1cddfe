"""No per-call feedback: a sample answers every recorded call of its test before any is
checked, so it cannot learn from the test calling it again which answers were accepted."""

from __future__ import annotations

import pytest

from codeparrot.eval.execution import Program, humaneval_program, run_programs
from codeparrot.eval.replay import CAP_FACTOR, CAP_FLOOR, REPLAY, plan_from
from codeparrot.eval.sandbox import detect_isolation

REFERENCE = "def f(x):\n    return x + 1\n"
TEST = "assert f(1) == 2\nassert f(2) == 3\nassert f(3) == 4\n"
# Wrong at once; hangs at its third call, which only a sample that sees every call reaches.
COUNTER = (
    "CALLS = [0]\ndef f(x):\n    CALLS[0] += 1\n"
    "    if CALLS[0] == 3:\n        while True:\n            pass\n    return 0\n"
)
SORT_TEST = "xs = [3, 1, 2]\nassert f(xs) is None\nassert xs == [1, 2, 3]\n"
SORTS = "def f(xs):\n    xs.sort()\n"
DEPENDENT_TEST = "y = f(1)\nassert f(y) == 3\n"


@pytest.fixture(scope="module")
def isolation():
    return detect_isolation()


def run(programs, isolation, **kwargs):
    stats: dict[str, int] = {}
    verdicts = run_programs(programs, workers=2, isolation=isolation, stats=stats, **kwargs)
    return [v.result for v in verdicts], stats


def test_a_sample_sees_every_call_even_after_a_wrong_answer_by_default(isolation):
    program = Program(COUNTER, TEST, "f", reference=REFERENCE, timeout=2.0)
    results, stats = run([program], isolation)
    assert results == ["timed out"]  # it answered the third call before any was checked
    assert stats == {"recorded": 1, "fallbacks": 0, "unrecorded": 0, "kept": 0, "literal": 0}
    # call by call, the test stops at the wrong first answer: the sample learns of it
    assert run([program], isolation, no_feedback=False)[0] == ["failed: AssertionError"]


def test_verdicts_of_replayed_answers(isolation):
    programs = [
        Program(REFERENCE, TEST, "f", reference=REFERENCE),
        Program("def f(x):\n    return 0\n", TEST, "f", reference=REFERENCE),
        Program("def f(x):\n    raise ValueError(x)\n", TEST, "f", reference=REFERENCE),
        Program("import os\ndef f(x):\n    os._exit(0)\n", TEST, "f", reference=REFERENCE),
        # changes of the arguments in place reach the test's own objects
        Program(SORTS, SORT_TEST, "f", reference=SORTS),
        Program("def f(xs):\n    pass\n", SORT_TEST, "f", reference=SORTS),
    ]
    results, stats = run(programs, isolation)
    assert results[0] == "passed"
    assert results[1] == "failed: AssertionError"
    assert results[2] == "failed: ValueError: 1"
    assert results[3] == "failed: the sample process exited"
    assert results[4] == "passed"
    assert results[5].startswith("failed: AssertionError")
    assert stats == {"recorded": 2, "fallbacks": 0, "unrecorded": 0, "kept": 0, "literal": 0}


def test_a_call_not_recorded_falls_back_to_calls_one_by_one_and_is_counted(isolation):
    programs = [
        Program("def f(x):\n    return x + 2\n", DEPENDENT_TEST, "f", reference=REFERENCE),
        Program(REFERENCE, DEPENDENT_TEST, "f", reference=REFERENCE),
        Program(REFERENCE, TEST, "f", reference="def f(x):\n    return 0\n"),  # fails
    ]
    results, stats = run(programs, isolation)
    assert results == ["failed: AssertionError", "passed", "passed"]
    assert stats == {"recorded": 2, "fallbacks": 1, "unrecorded": 1, "kept": 0, "literal": 0}


def test_answers_beyond_the_cap_fail_the_sample(isolation):
    reference = "def f(x):\n    return 'a'\n"
    big = f"def f(x):\n    return 'a' * {2 * CAP_FLOOR}\n"
    program = Program(big, "assert f(0) == 'a'\n", "f", reference=reference)
    results, _ = run([program], isolation)
    assert results[0].startswith("failed: answers larger than the cap"), results[0]


def test_humaneval_canonical_solutions_pass_replayed(isolation):
    from codeparrot.eval.data import load_problems

    problems = load_problems()
    programs = [humaneval_program(p, p["canonical_solution"]) for p in problems.values()]
    results, stats = run(programs, isolation)
    assert results == ["passed"] * len(problems)
    # HumanEval/38, /50 and /53 draw unseeded random inputs: seeded alike, they replay. All
    # but 13 tests assert on calls of literal arguments: their references never run.
    assert stats == {"recorded": 13, "fallbacks": 0, "unrecorded": 0, "kept": 0, "literal": 151}


def test_a_test_drawing_unseeded_random_inputs_replays(isolation):
    """The checker's ``random`` is seeded alike when a test is recorded and replayed."""
    test = (
        "import random\nfor _ in range(20):\n    x = random.randint(0, 10**9)\n"
        "    assert f(x) == x + 1\n"
    )
    programs = [
        Program(REFERENCE, test, "f", reference=REFERENCE),
        Program("def f(x):\n    return x\n", test, "f", reference=REFERENCE),
    ]
    results, stats = run(programs, isolation)
    assert results == ["passed", "failed: AssertionError"]
    assert stats == {"recorded": 1, "fallbacks": 0, "unrecorded": 0, "kept": 0, "literal": 0}


def test_a_plan_comes_only_from_a_passed_reference():
    import base64

    from codeparrot.eval.zygote import codec

    key = codec.encode(((1,), {}))
    recording = codec.encode([(key, ("ok", 2, None))])
    text = base64.b64encode(recording).decode()
    assert plan_from("failed: AssertionError\n\0recording:" + text) is None
    assert plan_from("passed") is None
    assert plan_from("passed\n\0recording:not base64!") is None
    assert plan_from("passed\n\0recording:AAAA") is None  # not the codec's
    plan = plan_from("passed\n\0recording:" + text)
    cap = CAP_FLOOR + CAP_FACTOR * len(recording)
    assert plan == REPLAY + b"%010d" % cap + codec.encode([key])  # the calls only


# A completion of HumanEval/0 that is wrong at once and hangs at its third call, which
# only a sample that sees every call of the test reaches.
COUNTING_COMPLETION = (
    "    CALLS[0] += 1\n    if CALLS[0] == 3:\n        while True:\n            pass\n"
    "    return None\n\n\nCALLS = [0]\n"
)


def test_eval_execute_answers_every_call_at_once_by_default(tmp_path, capsys, monkeypatch):
    import json

    from codeparrot.cli import main
    from codeparrot.eval.data import load_problems

    monkeypatch.setenv("CODEPARROT_ALLOW_CODE_EXECUTION", "1")
    monkeypatch.setenv("CODEPARROT_RECORDINGS_CACHE", str(tmp_path / "kept"))
    problems = load_problems()
    path, out = tmp_path / "s.jsonl", tmp_path / "r.jsonl"
    lines = [
        {"task_id": t, "completion": c}
        for t in ("HumanEval/0", "HumanEval/53")
        for c in (problems[t]["canonical_solution"], "    return None\n")
    ]
    lines.append({"task_id": "HumanEval/0", "completion": COUNTING_COMPLETION})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    command = ["eval", "execute", str(path), "--output", str(out), "--ks", "1"]
    command += ["--workers", "2", "--timeout", "1"]

    def verdicts() -> list[str]:
        return [json.loads(line)["result"] for line in out.read_text().splitlines()]

    assert main(command) == 0
    printed = capsys.readouterr().out
    assert (
        "1 tests recorded (0 kept from an earlier run), 1 read from their literal arguments; 0 samples"
        in printed
    )
    # the counting sample answered its third call before any answer was checked
    assert verdicts() == ["passed", "failed: AssertionError", "passed",
                          "failed: AssertionError", "timed out"]  # fmt: skip
    scoring = json.loads(out.with_name("r.summary.json").read_text())["scoring"]
    assert scoring["feedback"] is False
    # HumanEval/53's random calls are seeded alike in its recording and its replays;
    # HumanEval/0's are read from its asserts
    assert scoring["no_feedback"] == {
        "recorded": 1,
        "fallbacks": 0,
        "unrecorded": 0,
        "kept": 0,
        "literal": 1,
    }
    assert main(command) == 0  # again: HumanEval/53's recording kept
    assert "1 tests recorded (1 kept from an earlier run)" in capsys.readouterr().out
    assert verdicts()[:4] == ["passed", "failed: AssertionError", "passed",
                              "failed: AssertionError"]  # fmt: skip
    assert main([*command, "--feedback"]) == 0  # call by call: the test stops at once
    assert "tests recorded" not in capsys.readouterr().out
    assert verdicts()[-1] == "failed: AssertionError"
    scoring = json.loads(out.with_name("r.summary.json").read_text())["scoring"]
    assert scoring["feedback"] is True and "no_feedback" not in scoring


def test_references_recorded_several_to_a_run_each_on_its_own(isolation):
    """One sandbox run records several problems; one that hangs, exits or fails costs
    only its own recording."""
    hangs = "def f(x):\n    while True:\n        pass\n"
    exits = "import os\ndef f(x):\n    os._exit(0)\n"
    uses = "import math\ndef f(x):\n    return math.floor(x) + 1\n"
    references = [REFERENCE, hangs, exits, "def f(x):\n    return 0\n", uses, SORTS]
    programs = [
        Program(r, SORT_TEST if r == SORTS else TEST, "f", reference=r, timeout=1.0)
        for r in references
    ]
    results, stats = run(programs, isolation)
    assert results == [
        "passed",
        "timed out",
        "failed: the sample process exited",
        "failed: AssertionError",
        "passed",
        "passed",
    ]
    assert stats == {"recorded": 6, "fallbacks": 0, "unrecorded": 3, "kept": 0, "literal": 0}


def kept_runs(programs, isolation, folder):
    from codeparrot.eval.recordings import RecordingCache

    cache = RecordingCache(folder)
    stats: dict[str, int] = {}
    verdicts = run_programs(
        programs, workers=2, isolation=isolation, stats=stats, no_feedback=True, recordings=cache
    )
    return [v.result for v in verdicts], stats, cache


def test_recordings_are_kept_and_read_back(isolation, tmp_path):
    programs = [
        Program(REFERENCE, TEST, "f", reference=REFERENCE),
        Program("def f(x):\n    return 0\n", TEST, "f", reference=REFERENCE),
        Program(SORTS, SORT_TEST, "f", reference=SORTS),
    ]
    first, stats, cache = kept_runs(programs, isolation, tmp_path)
    assert first == ["passed", "failed: AssertionError", "passed"]
    assert stats["kept"] == 0 and cache.written == 2
    assert len(list(tmp_path.glob("*.rec"))) == 2
    again, stats, cache = kept_runs(programs, isolation, tmp_path)
    assert again == first
    assert stats == {"recorded": 2, "fallbacks": 0, "unrecorded": 0, "kept": 2, "literal": 0}
    assert cache.written == 0


def test_a_kept_recording_that_is_not_valid_is_recorded_again(isolation, tmp_path):
    import hashlib

    from codeparrot.eval.recordings import MAGIC
    from codeparrot.eval.zygote import codec

    programs = [Program(REFERENCE, TEST, "f", reference=REFERENCE)]
    kept_runs(programs, isolation, tmp_path)
    (file,) = tmp_path.glob("*.rec")
    good = file.read_bytes()
    header = MAGIC + file.stem.encode() + b"\n"

    def signed(body: bytes) -> bytes:
        return header + hashlib.sha256(body).hexdigest().encode() + b"\n" + body

    bad = [
        b"",
        good[:-1],  # truncated: the digest no longer matches
        good.replace(file.stem.encode(), b"0" * 64),  # another problem's name
        signed(b"\xff" * 20),  # not the codec's
        signed(codec.encode([("not bytes", ("ok", 2, None))])),  # the wrong shape
        signed(codec.encode([(codec.encode([1]), ("ok", 2, None))])),  # a call is (args, kw)
        signed(codec.encode([(codec.encode(((1,), {})), ("maybe", 2))])),  # an outcome
    ]
    for data in bad:
        file.write_bytes(data)
        results, stats, cache = kept_runs(programs, isolation, tmp_path)
        assert results == ["passed"] and stats["kept"] == 0, data
        assert cache.ignored == 1 and cache.written == 1
        assert file.read_bytes() == good  # recorded again


def test_a_kept_recording_that_lies_cannot_make_a_sample_pass(isolation, tmp_path):
    """A well-formed recording only chooses the calls a sample answers ahead: the test
    still runs in full against the sample's own answers."""
    import hashlib

    from codeparrot.eval.recordings import MAGIC, recording_key
    from codeparrot.eval.zygote import codec

    wrong = "def f(x):\n    return 0\n"
    programs = [
        Program(REFERENCE, TEST, "f", reference=REFERENCE),
        Program(wrong, TEST, "f", reference=REFERENCE),
    ]
    key = recording_key("", REFERENCE, TEST, "f")
    for calls in ([], [1], [1, 2, 3, 4], [5, 6, 7]):  # fewer, more, other calls
        record = [(codec.encode(((x,), {})), ("ok", 0, None)) for x in calls] or [
            (codec.encode(((0,), {})), ("err", "x"))
        ]
        body = codec.encode(record)
        digest = hashlib.sha256(body).hexdigest().encode()
        (tmp_path / f"{key}.rec").write_bytes(MAGIC + key.encode() + b"\n" + digest + b"\n" + body)
        results, stats, _ = kept_runs(programs, isolation, tmp_path)
        assert results == ["passed", "failed: AssertionError"], calls
        assert stats["kept"] == 1


def test_the_kept_recordings_folder_must_be_the_users_alone(tmp_path, monkeypatch):
    from codeparrot.eval.recordings import ENV, RecordingCache

    folder = tmp_path / "kept"
    monkeypatch.setenv(ENV, str(folder))
    assert RecordingCache.default().folder == folder
    assert folder.stat().st_mode & 0o777 == 0o700
    folder.chmod(0o777)
    assert RecordingCache.default() is None
    folder.rmdir()
    folder.symlink_to(tmp_path)
    assert RecordingCache.default() is None
    monkeypatch.setenv(ENV, "0")
    assert RecordingCache.default() is None


def test_a_records_job_records_each_problem_within_its_own_limit(isolation):
    import json

    from codeparrot.eval.replay import recording_from
    from codeparrot.eval.sandbox import Sandbox

    items = [
        ["", REFERENCE, TEST, "f", 2.0],
        ["", "def f(x):\n    while True:\n        pass\n", TEST, "f", 0.5],
        ["", "import os\ndef f(x):\n    os._exit(0)\n", TEST, "f", 2.0],
        ["", "import math\ndef f(x):\n    return math.floor(x) + 1\n", TEST, "f", 2.0],
        ["", SORTS, SORT_TEST, "f", 2.0],
        ["", "def g(x):\n    return x\n", TEST, "f", 2.0],
        ["", "def f(x):\n    return 'x' * (x * 300_000)\n", "f(1)\nf(2)\n", "f", 2.0],
        ["", REFERENCE, TEST, "f", 2.0],
    ]
    with Sandbox(isolation) as box:
        verdict = box.run("", json.dumps(items), "", "", 10.0, records=True)
    results = json.loads(verdict.result)
    assert [r.partition("\n")[0] for r in results] == [
        "passed",
        "timed out",
        "failed: the reference's process exited",
        "passed",
        "passed",
        "failed: KeyError: 'f'",
        "passed",  # a recording larger than a pipe's buffer
        "passed",
    ]
    assert recording_from(results[0]) == recording_from(results[3]) == recording_from(results[-1])
    assert len(recording_from(results[-2])) > 900_000
    assert recording_from(results[1]) is None


def test_a_call_that_repeats_an_earlier_one_gets_its_answer_without_a_fallback(isolation):
    """An assert's message that calls the candidate again (HumanEval/77, /78, ...)."""
    test = "assert f(1) == 2, f(1)\nassert f(2) == 3, f(2)\n"
    programs = [
        Program(REFERENCE, test, "f", reference=REFERENCE),
        Program("def f(x):\n    return x * 10\n", test, "f", reference=REFERENCE),
    ]
    assert run(programs, isolation, no_feedback=False)[0] == ["passed", "failed: AssertionError 10"]
    results, stats = run(programs, isolation)
    assert results == ["passed", "failed: AssertionError 10"]
    assert stats["fallbacks"] == 0


def test_references_are_recorded_in_one_sandbox_run_per_worker_at_most_batch_each():
    from codeparrot.eval.replay import BATCH, Schedule

    def record_jobs(problems: int, workers: int) -> list[int]:
        programs = [Program(REFERENCE, TEST + f"# {i}\n", "f", reference=REFERENCE)
                    for i in range(problems)]  # fmt: skip
        schedule = Schedule(programs, workers=workers)
        jobs = schedule.first()
        assert all(job.kind == "records" for job in jobs)
        return [len(schedule._batches[job.index]) for job in jobs]

    assert record_jobs(5, 2) == [3, 2]
    assert record_jobs(3, 4) == [1, 1, 1]
    assert record_jobs(BATCH + 6, 1) == [BATCH, 6]


# evalplus's layout of a plus test: its calls are read from ``inputs``, no reference runs.
PLUS = (
    "def check(candidate):\n    inputs = [[1], [2], [3]]\n"
    "    for i, inp in enumerate(inputs):\n        assert candidate(*inp) == {expected}\n"
    "\n\ncheck(f)\n"
)
MIB = 1 << 20


def _frame(value) -> bytes:
    from codeparrot.eval.zygote.codec import encode

    data = encode(value)
    return b"%010d" % len(data) + data


def test_answers_of_plus_tests_too_large_for_a_frame_come_in_parts(isolation):
    test = PLUS.format(expected=f"'a' * {7 * MIB}")  # 21 MiB in all, each within a frame
    # a sample that writes its own parts: the second is not a value
    forged = _frame(("parts", 3)) + _frame(("ok", "a" * 7 * MIB, None)) + b"0000000001\xff"
    forged += _frame(("ok", "a" * 7 * MIB, None))
    programs = [
        Program(f"def f(x):\n    return 'a' * {7 * MIB}\n", test, "f", reference="x"),
        Program(
            f"def f(x):\n    return ('b' if x == 2 else 'a') * {7 * MIB}\n",
            test,
            "f",
            reference="x",
        ),
        # one answer larger than a frame fails, as it does answered call by call
        Program(
            f"def f(x):\n    return 'a' * ({17 * MIB} if x == 3 else {7 * MIB})\n",
            test,
            "f",
            reference="x",
        ),
        Program(
            f"import os\ndef f(x):\n    os.write(4, {forged!r})\n    os._exit(0)\n",
            test,
            "f",
            reference="x",
        ),
    ]
    results, stats = run(programs, isolation)
    assert results[:2] == ["passed", "failed: AssertionError"]
    assert results[2].startswith("failed: TooLarge: value of over"), results[2]
    assert results[3] == "failed: malformed reply from the sample"
    assert stats == {"recorded": 0, "fallbacks": 0, "unrecorded": 0, "kept": 0, "literal": 1}
    one_by_one, _ = run(programs[:3], isolation, no_feedback=False)
    assert one_by_one == results[:3]


def test_answers_of_plus_tests_beyond_their_cap_fail_the_sample(isolation):
    from codeparrot.eval.replay import LITERAL_CAP

    test = PLUS.format(expected="1")
    forged = _frame(("parts", 3)) + b"%010d" % (LITERAL_CAP // 2)
    programs = [Program(f"import os\ndef f(x):\n    os.write(4, {forged!r})\n    os._exit(0)\n",
                        test, "f", reference="x")]  # fmt: skip
    results, _ = run(programs, isolation)
    assert results[0].startswith("failed: answers larger than the cap"), results[0]


def test_samples_of_the_longest_tests_start_first():
    from codeparrot.eval.replay import Schedule

    tests = ["assert f(1)\n", "assert f(1)\n" * 50, "assert f(1)\n" * 5]
    programs = [Program("def f(x):\n    return x\n", test, "f") for test in tests]
    for enabled in (True, False):
        jobs = Schedule(programs, enabled).first()
        assert [job.index for job in jobs] == [1, 2, 0]


def test_the_longest_sample_of_each_test_starts_before_any_tests_second():
    # a test's stub answers at once: the samples likely to run long start on every worker
    from codeparrot.eval.replay import Schedule

    tests = ["assert f(1)\n", "assert f(1)\n" * 50]
    bodies = ["    return None\n", "    y = x\n    return y\n"]
    programs = [Program("def f(x):\n" + b, t, "f") for t in tests for b in bodies]
    jobs = Schedule(programs).first()
    assert [job.index for job in jobs] == [3, 1, 2, 0]


def test_the_samples_a_recording_makes_ready_start_before_the_waiting_ones(isolation, monkeypatch):
    """Tests that are recorded (loops, random inputs: no literal asserts) tend to run
    longest: their samples run as soon as their recording is made, not after every sample
    queued meanwhile, where the slowest would hold up the end of the run."""
    from codeparrot.eval.sandbox import Sandbox

    started = []
    original = Sandbox.run

    def spy(self, program, *args, **kwargs):
        started.append(program)
        return original(self, program, *args, **kwargs)

    monkeypatch.setattr(Sandbox, "run", spy)
    literal = "def check(candidate):\n    assert candidate(1) == 2\n\ncheck(f)\n"
    looped = "def check(candidate):\n    for x in range(3):\n        assert candidate(x) == x + 1\n\ncheck(f)\n"  # fmt: skip
    programs = [
        Program(REFERENCE + f"# {i}\n", literal, "f", reference=REFERENCE) for i in range(4)
    ]
    programs.append(Program(REFERENCE + "# looped\n", looped, "f", reference=REFERENCE))
    verdicts = run_programs(programs, workers=1, isolation=isolation)
    assert [v.result for v in verdicts] == ["passed"] * 5
    assert started[0] == "" and started[1].endswith("# looped\n"), started  # the records job
