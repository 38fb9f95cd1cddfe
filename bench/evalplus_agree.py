"""evalplus's evaluator against ours: per-sample verdicts on the same HumanEval+ samples.

    .venv/bin/python bench/evalplus_agree.py --problem-file HumanEvalPlus-OriginFmt.jsonl.gz
        [--no-small] [--samples MODEL_SAMPLES.jsonl ...] [--workers 2] [--flat-timeout S]

evalplus (``pip install evalplus``; not a dependency of this project) reads its native
dataset schema (``task_id, prompt, contract, canonical_solution, entry_point, base_input,
plus_input, atol``) and computes the expected outputs itself by running each canonical
solution; ``codeparrot eval execute`` reads the release in human-eval's format
(``HumanEvalPlus-OriginFmt``: one ``check`` over the deduplicated base + plus inputs).
The full release cannot be fetched everywhere, so the bench builds both forms of one
fixture: each record of ``--problem-file`` (a part of the OriginFmt release, e.g. its four
heaviest problems) is turned back into the native schema (its ``inputs`` list split into
``base_input``, the inputs HumanEval's own test calls, and ``plus_input``, the rest; its
``atol`` from the assertion), and, unless ``--no-small``, a few small problems with floats
and HumanEval/32's oracle are added in both forms from the installed HumanEval.

Samples per problem: the plus canonical solution (also as evalplus's own ``solution``
line: the whole program), HumanEval's canonical solution, ``return
None``, wrong-but-plausible ones built on the canonical solution (a result of the wrong
type, a result off by one, a loop bound off by one where written below), a result within
the float tolerance, one that does the work twice (slow but right), and any ``--samples``
file (e.g. a model's, from ``codeparrot eval generate --problem-file``).

evalplus runs as its users run it (``evalplus.evaluate``, its default limits: each input
gets ``max(1.0 s, 4 x the reference's time on it)``, a task at most 61 s), pointed at the
native file with ``HUMANEVAL_OVERRIDE_PATH``; ours with evalplus's scheme
(``--gt-time-limit-factor 4``: a test set gets ``max(4 s, 4 x the reference's time on it)``)
or, with ``--flat-timeout``, one flat limit. Prints the agreement k/N on the base and the
plus verdicts and every disagreement with both verdicts.

With ``--codegen CHECKPOINT`` it first starts ``codeparrot serve`` on the checkpoint and
runs ``evalplus.codegen --backend openai --base-url ... --greedy`` against it, as an
evalplus user would (its chat endpoint, its fixed ``max_tokens``), on the same native
fixture; codegen's samples (``solution`` lines, sanitised by evalplus) join the compared
set as kind ``codegen``.
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

# evalplus's human-eval-format layout (the release's own header of every plus test).
ASSERTION = """\
import numpy as np

def is_floats(x) -> bool:
    # check if it is float; List[float]; Tuple[float]
    if isinstance(x, float):
        return True
    if isinstance(x, (list, tuple)):
        return all(isinstance(i, float) for i in x)
    if isinstance(x, np.ndarray):
        return x.dtype == np.float64 or x.dtype == np.float32
    return False


def assertion(out, exp, atol):
    exact_match = out == exp

    if atol == 0 and is_floats(exp):
        atol = 1e-6
    if not exact_match and atol != 0:
        assert np.allclose(out, exp, rtol=1e-07, atol=atol)
    else:
        assert exact_match
"""
POLY = """\
import math

def _poly(xs: list, x: float):
    return sum([coeff * math.pow(x, i) for i, coeff in enumerate(xs)])
"""

# Small problems added in both forms (--no-small leaves them out): extra inputs beside
# the ones HumanEval's own test calls (base_input), and the atol the release gives them.
SMALL = {
    "HumanEval/0": ([[[1.0, 2.0, 3.0], 0.5], [[], 1.0], [[0.5], 1e-9], [[1.0, 1.5], 0.5]], 0),
    "HumanEval/2": ([[1e6 + 0.25], [0.0], [7.125]], 0),
    "HumanEval/4": ([[[1.0]], [[-1.5, 2.5, 1e3]], [[0.1, 0.2, 0.3]]], 0),
    "HumanEval/32": ([[[-6, 11, -6, 1]], [[1, 2]], [[-3, -6, 4, 7]], [[5, 0, 0, 2]]], 1e-4),
}
FIND_ZERO_BASE = [[[1, 2]], [[-6, 11, -6, 1]]]  # its HumanEval test draws random inputs

# A loop bound off by one, written for the heavy problems (replacing part of the canonical).
OFF_BY_ONE = {
    "HumanEval/83": ("10 ** (n - 2)", "10 ** (n - 1)"),
    "HumanEval/96": ("range(2, n)", "range(2, n + 1)"),
    "HumanEval/130": ("range(2, n + 1)", "range(2, n)"),
    "HumanEval/139": ("range(2, n + 1)", "range(2, n)"),
}

TRANSFORMS = {
    # a result of the wrong type, equal in value where the types allow it
    "wrong-type": (
        "    if isinstance(r, bool): return int(r)\n"
        "    if isinstance(r, int): return float(r)\n"
        "    if isinstance(r, float): return [r]\n"
        "    if isinstance(r, list): return tuple(r)\n"
        "    if isinstance(r, str): return list(r)\n"
        "    return r\n"
    ),
    "result-off-by-one": (
        "    if isinstance(r, bool): return not r\n"
        "    if isinstance(r, int): return r + 1\n"
        "    if isinstance(r, float): return r + 1e-3\n"
        "    if isinstance(r, (list, tuple, str)): return r[:-1]\n"
        "    return r\n"
    ),
    # within evalplus's float tolerance: right
    "within-tolerance": (
        "    if isinstance(r, float): return r + 1e-9\n"
        "    if isinstance(r, list) and r and all(isinstance(x, float) for x in r):\n"
        "        return [x + 1e-9 for x in r]\n"
        "    return r\n"
    ),
    # right, at half the speed
    "slow-2x": "    _canonical(*args)\n    return r\n",
}


def _literal(node: ast.AST) -> Any:
    return ast.literal_eval(node)


def parse_origin_test(test: str) -> tuple[list, float]:
    """The ``inputs`` list and the ``atol`` of an evalplus OriginFmt test."""
    tree = ast.parse(test)
    check = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check")
    inputs = next(
        _literal(n.value)
        for n in check.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "inputs"
    )
    atol = 0.0
    for node in ast.walk(check):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "assertion":
            atol = _literal(node.args[2])
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.LtE):
            atol = _literal(node.comparators[0])  # HumanEval/32: _poly(...) <= atol
    return inputs, atol


def humaneval_inputs(test: str) -> list[list]:
    """The literal arguments of each ``candidate(...)`` call in HumanEval's own test."""
    calls = []
    for node in ast.walk(ast.parse(test)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "candidate":
            try:
                args = [_literal(a) for a in node.args]
            except ValueError:
                continue
            if args not in calls:
                calls.append(args)
    return calls


def native_record(origin: dict, humaneval: dict) -> dict:
    """An OriginFmt record in evalplus's native schema (inputs split as the release has them:
    HumanEval's own first, then evalplus's)."""
    inputs, atol = parse_origin_test(origin["test"])
    base = humaneval_inputs(humaneval[origin["task_id"]]["test"])
    if origin["entry_point"] == "find_zero":
        base = FIND_ZERO_BASE
    keys = ("task_id", "prompt", "canonical_solution", "entry_point")
    return {k: origin[k] for k in keys} | {
        "contract": "",
        "base_input": [i for i in inputs if i in base],
        "plus_input": [i for i in inputs if i not in base],
        "atol": atol,
    }


def small_origin_records(humaneval: dict) -> list[dict]:
    """The SMALL problems in evalplus's OriginFmt layout, expected outputs from their
    canonical solutions (installed HumanEval: trusted)."""
    records = []
    for task_id, (extra, atol) in SMALL.items():
        p = humaneval[task_id]
        base = FIND_ZERO_BASE if p["entry_point"] == "find_zero" else humaneval_inputs(p["test"])
        inputs = base + [i for i in extra if i not in base]
        namespace: dict[str, Any] = {}
        exec(p["prompt"] + p["canonical_solution"], namespace)  # trusted: the installed HumanEval
        results = [namespace[p["entry_point"]](*inp) for inp in inputs]
        if p["entry_point"] == "find_zero":
            # the release's form of HumanEval/32's oracle (its arguments swapped, no abs)
            header, check = POLY, "assert _poly(*candidate(*inp), inp) <= {atol}"
        else:
            header, check = ASSERTION, "assertion(candidate(*inp), exp, {atol})"
        test = (
            f"{header}\n\ndef check(candidate):\n    inputs = {inputs!r}\n"
            f"    results = {results!r}\n"
            f"    for i, (inp, exp) in enumerate(zip(inputs, results)):\n"
            f"        {check.format(atol=atol)}\n"
        )
        keys = ("task_id", "prompt", "canonical_solution", "entry_point")
        records.append({k: p[k] for k in keys} | {"test": test})
    return records


def wrapped(problem: dict, transform: str) -> str:
    """The canonical solution, its result passed through ``transform`` (body using r, args)."""
    entry = problem["entry_point"]
    return (
        f"{problem['canonical_solution']}\n_canonical = {entry}\n"
        f"def {entry}(*args):\n    r = _canonical(*args)\n{transform}"
    )


def build_samples(problems: dict, humaneval: dict, extra: list[dict]) -> list[dict]:
    samples = []
    for task_id, p in problems.items():
        add = [("canonical", p["canonical_solution"]), ("none", "    return None\n")]
        if task_id in humaneval:
            add.append(("humaneval-canonical", humaneval[task_id]["canonical_solution"]))
        add += [(name, wrapped(p, body)) for name, body in TRANSFORMS.items()]
        if task_id in OFF_BY_ONE:
            old, new = OFF_BY_ONE[task_id]
            if old in p["canonical_solution"]:
                add.append(("loop-off-by-one", p["canonical_solution"].replace(old, new, 1)))
        samples += [{"task_id": task_id, "completion": c, "kind": k} for k, c in add]
        # evalplus's own sample form: the whole program as a `solution` line
        whole = p["prompt"] + p["canonical_solution"]
        samples.append({"task_id": task_id, "solution": whole, "kind": "canonical-solution"})
    samples += [
        {"task_id": s["task_id"], "completion": s["completion"], "kind": "model"}
        for s in extra
        if s["task_id"] in problems
    ]
    return samples


EVALPLUS = (
    "import os, sys\nfrom evalplus.evaluate import evaluate\n"
    "evaluate(dataset='humaneval', samples=sys.argv[1], parallel=int(sys.argv[2]))\n"
    # its watchdog thread sleeps 20 s before it sees that everything finished
    "sys.stdout.flush(); os._exit(0)\n"
)


def run_evalplus(native: Path, samples: Path, workers: int, tmp: Path) -> tuple[float, list]:
    """evalplus.evaluate on ``samples`` against ``native``: (seconds, one verdict per sample
    in file order: (base_status, plus_status))."""
    env = os.environ | {"HUMANEVAL_OVERRIDE_PATH": str(native), "XDG_CACHE_HOME": str(tmp)}
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", EVALPLUS, str(samples), str(workers)],
        env=env,
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    result_path = samples.with_name(samples.stem + "_eval_results.json")
    if done.returncode != 0 or not result_path.is_file():
        sys.exit(f"evalplus failed ({done.returncode}):\n{done.stderr[-3000:]}")
    by_task = json.loads(result_path.read_text())["eval"]
    seen: dict[str, int] = {}
    verdicts = []
    for line in samples.read_text().splitlines():
        task_id = json.loads(line)["task_id"]
        row = by_task[task_id][seen.get(task_id, 0)]
        seen[task_id] = seen.get(task_id, 0) + 1
        failed = row["base_fail_tests"] or row["plus_fail_tests"]
        verdicts.append((row["base_status"], row["plus_status"], str(failed)[:40]))
    return seconds, verdicts


def run_ours(
    origin: Path, samples: Path, workers: int, flat_timeout: float | None
) -> tuple[float, list]:
    out = samples.with_name("ours_results.jsonl")
    command = [sys.executable, "-m", "codeparrot", "eval", "execute", str(samples),
               "--problem-file", str(origin), "--allow-code-execution", "--output", str(out),
               "--workers", str(workers)]  # fmt: skip
    if flat_timeout is None:
        command += ["--gt-time-limit-factor", "4"]
    else:
        command += ["--timeout", str(flat_timeout)]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"codeparrot eval execute failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, [json.loads(line) for line in out.read_text().splitlines()]


def start_serve(checkpoint: Path, name: str) -> tuple[subprocess.Popen, str]:
    """``codeparrot serve`` on ``checkpoint`` at a free port: (process, its /v1 URL)."""
    server = subprocess.Popen(
        [sys.executable, "-m", "codeparrot", "serve", "--checkpoint", str(checkpoint),
         "--port", "0", "--model-name", name, "--quantize", "none"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    seen = []
    for line in server.stdout:  # the line that names the URL comes once the model is loaded
        seen.append(line)
        if " on http://" in line:  # then its request log is read and dropped
            threading.Thread(target=server.stdout.read, daemon=True).start()
            return server, line.split(" on ", 1)[1].split()[0]
    server.wait()
    sys.exit(f"codeparrot serve ended ({server.returncode}):\n{''.join(seen)[-3000:]}")


def run_codegen(checkpoint: Path, native: Path, tmp: Path, count: int) -> tuple[float, list]:
    """evalplus.codegen against ``codeparrot serve`` of ``checkpoint``: (seconds, its
    sanitised samples, one per problem)."""
    name = "codeparrot-fixture"
    server, url = start_serve(checkpoint, name)
    env = os.environ | {"HUMANEVAL_OVERRIDE_PATH": str(native), "XDG_CACHE_HOME": str(tmp),
                        "OPENAI_API_KEY": "none"}  # fmt: skip
    try:
        start = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "evalplus.codegen", "--model", name, "--dataset", "humaneval",
             "--backend", "openai", "--base-url", url, "--greedy", "--root", str(tmp / "codegen")],
            env=env, capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        seconds = time.perf_counter() - start
    finally:
        server.terminate()
        server.wait(timeout=30)
    found = sorted((tmp / "codegen" / "humaneval").glob("*.jsonl"))
    found = [f for f in found if not f.name.endswith(".raw.jsonl")]
    if done.returncode != 0 or not found:
        sys.exit(f"evalplus.codegen failed ({done.returncode}):\n{done.stderr[-3000:]}")
    rows = read_jsonl(found[0])
    if len(rows) != count:
        sys.exit(f"evalplus.codegen wrote {len(rows)} samples for {count} problems")
    return seconds, rows


def write_jsonl(path: Path, rows: list[dict]) -> None:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt") as fh:
        fh.writelines(json.dumps(row) + "\n" for row in rows)


def read_jsonl(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return [json.loads(line) for line in fh if line.strip()]


# Samples whose answers are right by construction (the canonical solution's, or within the
# float tolerance): evalplus failing one of them with no wrong answer is its time limit.
RIGHT = ("canonical", "canonical-solution", "within-tolerance", "slow-2x")


def cause(problem: dict, kind: str, theirs: tuple[str, str, str], row: dict) -> str:
    """The known reason of a disagreement, where there is one."""
    if problem["entry_point"] == "find_zero" and theirs[0] == "fail":
        return ("evalplus 0.3.1's find_zero oracle skips its progress count, so every sample "
                "fails (fixed upstream after 0.3.1)")  # fmt: skip
    if "timeout" in theirs or "timed out" in row["result"] + row.get("plus_result", ""):
        return ("time limits: evalplus gives each input max(1 s, 4 x the reference's time), "
                "ours each test set max(4 s, 4 x the reference's time)")  # fmt: skip
    if kind in RIGHT and "fail" in theirs[:2]:
        return (f"right by construction: evalplus's limit on input {theirs[2]} (its "
                "timeouts read 'fail': max(1 s, 4 x one timing of the reference))")  # fmt: skip
    if theirs[0] == "pass" and not row["passed"] and row.get("plus_passed"):
        return ("ours' base verdict is HumanEval's own test (exact float asserts), evalplus's "
                "its oracle on HumanEval's inputs (within its tolerance)")  # fmt: skip
    return "unexplained"


def report(samples: list[dict], theirs: list, ours: list[dict], problems: dict) -> None:
    n = len(samples)
    base_agree = plus_agree = 0
    lines = []
    for s, (base_status, plus_status, failed), row in zip(samples, theirs, ours, strict=True):
        assert row["task_id"] == s["task_id"], (row["task_id"], s["task_id"])
        their_base = base_status == "pass"
        their_plus = their_base and plus_status == "pass"
        our_plus = bool(row.get("plus_passed", row["passed"]))
        base_agree += their_base == bool(row["passed"])
        plus_agree += their_plus == our_plus
        if their_base != bool(row["passed"]) or their_plus != our_plus:
            why = cause(problems[s["task_id"]], s["kind"], (base_status, plus_status, failed), row)
            lines.append(
                f"  {s['task_id']} ({s['kind']}): evalplus base {base_status}, plus "
                f"{plus_status}; ours base {row['result'][:60]!r}, plus "
                f"{row.get('plus_result', '')[:60]!r}\n    ({why})"
            )
    kinds: dict[str, list[int]] = {}
    for s, (b, p, _), row in zip(samples, theirs, ours, strict=True):
        tally = kinds.setdefault(s["kind"], [0, 0, 0])
        tally[0] += 1
        tally[1] += b == p == "pass"
        tally[2] += bool(row.get("plus_passed", row["passed"]))
    for kind, (count, their_pass, our_pass) in kinds.items():
        print(f"  {kind}: {count} samples; plus passed: evalplus {their_pass}, ours {our_pass}")
    print(f"agreement: base verdicts {base_agree}/{n}, plus verdicts {plus_agree}/{n}")
    print(f"disagreements: {len(lines)}")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem-file", type=Path, action="append", default=[],
                        help="evalplus's HumanEvalPlus-OriginFmt release, or a part of it")  # fmt: skip
    parser.add_argument("--no-small", action="store_true", help="leave out the small problems")
    parser.add_argument("--samples", type=Path, action="append", default=[],
                        help="more samples (task_id, completion per line), e.g. a model's")  # fmt: skip
    parser.add_argument("--workers", type=int, default=2, help="both evaluators' workers")
    parser.add_argument("--flat-timeout", type=float, default=None,
                        help="ours with this flat --timeout instead of evalplus's scheme")  # fmt: skip
    parser.add_argument("--keep", type=Path, default=None, help="write the fixtures here")
    parser.add_argument("--codegen", type=Path, default=None, metavar="CHECKPOINT",
                        help="also run evalplus.codegen against codeparrot serve of it")  # fmt: skip
    args = parser.parse_args()
    try:
        import evalplus
    except ImportError:
        print("skipped: evalplus is not installed (pip install evalplus)")
        return
    from codeparrot.eval.data import load_problems
    from codeparrot.eval.sandbox import detect_isolation

    humaneval = load_problems()
    origin = [] if args.no_small else small_origin_records(humaneval)
    for path in args.problem_file:
        origin += read_jsonl(path)
    if not origin:
        parser.error("nothing to compare: give --problem-file or leave out --no-small")
    native = [native_record(r, humaneval) for r in origin]
    problems = {r["task_id"]: r for r in origin}
    extra = [row for path in args.samples for row in read_jsonl(path)]
    samples = build_samples(problems, humaneval, extra)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = args.keep or Path(tmp_name)
        tmp.mkdir(parents=True, exist_ok=True)
        write_jsonl(tmp / "HumanEvalPlus-OriginFmt.jsonl.gz", origin)
        write_jsonl(tmp / "HumanEvalPlus.jsonl", native)
        if args.codegen:
            codegen_seconds, generated = run_codegen(
                args.codegen, tmp / "HumanEvalPlus.jsonl", tmp, len(problems)
            )
            samples += [{"task_id": g["task_id"], "solution": g["solution"], "kind": "codegen"}
                        for g in generated]  # fmt: skip
            print(f"evalplus.codegen --backend openai against codeparrot serve: "
                  f"{len(generated)} samples of {len(problems)} problems in "
                  f"{codegen_seconds:.1f} s, no error")  # fmt: skip
        text = ("task_id", "completion", "solution")
        write_jsonl(tmp / "samples.jsonl", [{k: s[k] for k in text if k in s} for s in samples])
        ours_seconds, ours = run_ours(
            tmp / "HumanEvalPlus-OriginFmt.jsonl.gz", tmp / "samples.jsonl", args.workers,
            args.flat_timeout,
        )  # fmt: skip
        their_seconds, theirs = run_evalplus(
            tmp / "HumanEvalPlus.jsonl", tmp / "samples.jsonl", args.workers, tmp
        )
    limits = f"flat --timeout {args.flat_timeout}" if args.flat_timeout else "evalplus's scheme"
    print(
        f"{len(samples)} samples of {len(problems)} problems; evalplus {evalplus.__version__} "
        f"{their_seconds:.1f} s, codeparrot eval execute ({limits}) {ours_seconds:.1f} s; "
        f"{args.workers} workers each; sandbox mode {detect_isolation().mode}; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    report(samples, theirs, ours, problems)


if __name__ == "__main__":
    main()
