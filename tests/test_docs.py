"""The docs keep honest: links resolve, commands shown exist, and no file speaks of one machine.

Three checks over the repository's tracked Markdown (and, by adding globs to
``HYGIENE_GLOBS``, over code too):

- every relative link resolves to a file, and an ``#anchor`` into a Markdown file names
  one of its headings (GitHub's slugs);
- every ``codeparrot ...`` command shown in README.md (and the other docs but the log)
  names a real subcommand path and only flags that subcommand defines, and
  ``codeparrot <path> --help`` runs without error (through the console script's ``main``
  in a fresh interpreter);
- no absolute path of a machine (under ``/work``, ``/root``, ``/home/<user>``, or
  ``/tmp/<name>`` in Markdown prose) and no reference to our own history or tracker (the
  words session or issue followed by a number); an upstream project's issue is fine
  ("evalplus issue #5", "owner/repo#12").

This file names the patterns, so its own examples are spelt in pieces.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Files the link check reads: Markdown only.
LINK_GLOBS = ("*.md",)
# Files the hygiene check reads: the docs and the code.
HYGIENE_GLOBS = ("*.md", "*.py", "*.toml", "*.lua", "*.js", "Makefile", ".ci/run")
# Folders never read, even when a glob matches inside them.
SKIP_PARTS = {".venv", "node_modules", ".git", "build", "runs"}


@cache
def repo_files(globs: tuple[str, ...]) -> tuple[Path, ...]:
    """Tracked files (and new files git does not ignore) matching ``globs``."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "--", *globs],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        paths = [REPO / line for line in out.splitlines() if line]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: walk the tree
        paths = [p for g in globs for p in REPO.rglob(g)]
    return tuple(
        sorted(
            {
                p
                for p in paths
                if p.is_file() and not SKIP_PARTS.intersection(p.relative_to(REPO).parts)
            }
        )
    )


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


# --- Markdown structure ---------------------------------------------------------------

FENCE = re.compile(r"^\s*(```|~~~)")
INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"", re.IGNORECASE)
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str, blank_code: bool = True) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks, inline code spans blanked out
    unless ``blank_code`` is False."""
    lines, in_fence = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if not in_fence:
            if blank_code:
                line = INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line)
            lines.append((number, line))
    return lines


def fenced_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) inside fenced code blocks."""
    lines, in_fence = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed,
    spaces turned into hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links keep their text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


@cache
def anchors(path: Path) -> frozenset[str]:
    """Every anchor a Markdown file offers: its headings' slugs (numbered on repeats, as
    GitHub does) and explicit ``<a id=...>`` / ``<a name=...>``."""
    text = path.read_text(encoding="utf-8")
    seen: dict[str, int] = {}
    found = set(HTML_ANCHOR.findall(text))
    for _, line in prose_lines(text, blank_code=False):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return frozenset(found)


def links(path: Path) -> list[tuple[int, str]]:
    text = path.read_text(encoding="utf-8")
    out = []
    for number, line in prose_lines(text):
        out += [(number, m.group(1)) for m in INLINE_LINK.finditer(line)]
        m = REFERENCE_LINK.match(line)
        if m:
            out.append((number, m.group(1)))
    return out


def broken_link(path: Path, target: str) -> str | None:
    """Why a link from ``path`` to ``target`` does not resolve, or None."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto:, ...
        return None
    file_part, _, anchor = target.partition("#")
    if file_part.startswith("/"):
        return "an absolute link: use a path relative to the file"
    dest = (path.parent / file_part).resolve() if file_part else path
    try:
        dest.relative_to(REPO)
    except ValueError:
        return "points outside the repository"
    if not dest.exists():
        return "no such file"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"{rel(dest)} has no heading with the anchor #{anchor}"
    return None


def test_slug_follows_github() -> None:
    assert slug("Tokenizer (`bench/tokenizer.py`)") == "tokenizer-benchtokenizerpy"
    assert slug("How the numbers compare") == "how-the-numbers-compare"
    assert slug("Without LSP: `codeparrot serve`, an OpenAI-compatible endpoint") == (
        "without-lsp-codeparrot-serve-an-openai-compatible-endpoint"
    )
    assert slug("**Bold** and [a link](x.md)") == "bold-and-a-link"


def test_broken_links_are_found(tmp_path: Path) -> None:
    """The checker itself can fail: a missing file and a missing heading are reported."""
    doc = REPO / "README.md"
    assert broken_link(doc, "no-such-file.md") == "no such file"
    assert "no heading" in (broken_link(doc, "README.md#no-such-heading") or "")
    assert broken_link(doc, "https://example.com/x.md") is None


@pytest.mark.parametrize("path", repo_files(LINK_GLOBS), ids=rel)
def test_relative_links_resolve(path: Path) -> None:
    problems = [
        f"{rel(path)}:{number}: {target}: {why}"
        for number, target in links(path)
        if (why := broken_link(path, target))
    ]
    assert not problems, "broken links:\n" + "\n".join(problems)


# --- Commands shown in the docs --------------------------------------------------------

# Docs whose ``codeparrot ...`` commands are checked against the parser: every tracked
# Markdown file but the log, whose dated entries show the commands of their day.
COMMAND_DOCS = tuple(rel(p) for p in repo_files(LINK_GLOBS) if not rel(p).startswith("docs/log/"))

COMMAND = re.compile(r"(?<![^\s`$(])(?:[\w.~$/-]*/)?codeparrot(?![\w./:-])((?:[ \t]+[^\s`|;&#]+)*)")
WORD = re.compile(r"[a-z][a-z0-9-]*")
# An inline code span, possibly over several lines of one paragraph (no blank line inside).
CODE_SPAN = re.compile(r"(`+)((?:(?!\1)[^\n]|\n(?![ \t]*\n))+?)\1")


def shown_commands(text: str) -> list[tuple[int, list[str]]]:
    """(line, words after ``codeparrot``) for each command in code blocks and code spans."""
    candidates = list(fenced_lines(text))
    fenced = {number for number, _ in candidates}
    prose = "\n".join("" if n in fenced else line for n, line in enumerate(text.splitlines(), 1))
    for m in CODE_SPAN.finditer(prose):  # a span may run over a line break
        number = prose.count("\n", 0, m.start()) + 1
        candidates.append((number, " ".join(m.group(2).split())))
    return [
        (number, m.group(1).split()) for number, line in candidates for m in COMMAND.finditer(line)
    ]


def subparsers_of(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def subcommand_path(words: list[str]) -> tuple[list[str], argparse.ArgumentParser, str | None]:
    """The subcommand words at the start of ``words`` (up to the first flag or argument),
    the parser they lead to, and an error when a word in a subcommand's place names none."""
    from codeparrot.cli import build_parser

    parser, path = build_parser(), []
    for word in words:
        choices = subparsers_of(parser)
        if not choices or not WORD.fullmatch(word):
            break  # a flag, an argument or a placeholder (RUN, <dir>, [--x])
        if word not in choices:
            if parser.prog != "codeparrot" and _takes_positionals(parser):
                break  # an argument of a command that also has subcommands
            return path, parser, f"`{word}` is not a subcommand of `{parser.prog}`"
        parser, path = choices[word], [*path, word]
    return path, parser, None


def unknown_flags(parser: argparse.ArgumentParser, words: list[str]) -> list[str]:
    """The ``--flags`` among ``words`` that ``parser`` does not define (exactly, without
    relying on argparse's abbreviations)."""
    flags = {w.strip("[]").split("=")[0] for w in words if w.strip("[").startswith("--")}
    return sorted(f for f in flags if f not in parser._option_string_actions)


def _takes_positionals(parser: argparse.ArgumentParser) -> bool:
    return any(
        not a.option_strings and not isinstance(a, argparse._SubParsersAction)
        for a in parser._actions
    )


# Run in a fresh interpreter: each path's `--help` through the console script's own
# `main`, as `codeparrot PATH --help` runs it (one process for all paths: seconds, not one
# start-up of Python per path).
HELP_SCRIPT = """
import contextlib, io, json, sys
from codeparrot.cli import main
failed = {}
for path in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([*path, "--help"])
    except SystemExit as e:
        code = e.code
    except Exception as e:  # an import error, a broken parser: report it, go on
        code, err = 1, io.StringIO(f"{type(e).__name__}: {e}")
    if code not in (0, None) or not out.getvalue().strip():
        failed[" ".join(path)] = err.getvalue()[-500:] or f"exit status {code}"
print(json.dumps(failed))
"""


def help_failures(paths: list[tuple[str, ...]]) -> dict[str, str]:
    """``{path: what it said}`` for each subcommand path whose ``--help`` fails."""
    done = subprocess.run(
        [sys.executable, "-c", HELP_SCRIPT, json.dumps([list(p) for p in paths])],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


# A path that must fail, run with the real ones: the check can tell a failure.
BROKEN_PATH = ("no-such-command",)


@cache
def shown_paths(doc: str) -> tuple[list[str], frozenset[tuple[str, ...]]]:
    """The problems of the commands ``doc`` shows, and the subcommand paths they name."""
    problems, paths = [], set()
    for number, words in shown_commands((REPO / doc).read_text(encoding="utf-8")):
        path, parser, error = subcommand_path(words)
        if not error and (flags := unknown_flags(parser, words[len(path) :])):
            error = f"`{parser.prog}` has no {', '.join(flags)}"
        if error:
            problems.append(f"{doc}:{number}: codeparrot {' '.join(words)}: {error}")
        else:
            paths.add(tuple(path))
    return problems, frozenset(paths)


@cache
def all_help_failures() -> dict[str, str]:
    """``--help`` of every path any checked doc shows, in one interpreter."""
    paths = {p for doc in COMMAND_DOCS for p in shown_paths(doc)[1]}
    return help_failures(sorted(paths | {BROKEN_PATH}))


def test_a_failing_help_is_reported() -> None:
    assert " ".join(BROKEN_PATH) in all_help_failures()


def test_console_script_answers_help() -> None:
    """The installed entry point itself starts (the checks above call its ``main``)."""
    script = Path(sys.executable).with_name("codeparrot")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "codeparrot"]
    done = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "quickstart" in done.stdout, done.stderr[-2000:]


def test_readme_shows_commands() -> None:
    """The command check reads something: the README shows the set-up commands and a table
    of subcommands."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert "make quickstart" in text and "make test" in text
    assert len({tuple(w[:1]) for _, w in shown_commands(text)}) >= 8


@pytest.mark.parametrize("doc", COMMAND_DOCS)
def test_commands_shown_exist(doc: str) -> None:
    """Each ``codeparrot ...`` shown names a real subcommand and only flags it defines, and
    ``codeparrot <subcommand> --help`` runs."""
    problems, paths = shown_paths(doc)
    failures = all_help_failures()
    problems = problems + [
        f"codeparrot {' '.join(p)} --help failed: {failures[' '.join(p)]}"
        for p in sorted(paths)
        if " ".join(p) in failures
    ]
    assert not problems, "\n".join(problems)


def test_a_misspelt_command_or_flag_is_caught() -> None:
    assert subcommand_path(["evall", "humaneval"])[2] is not None
    path, parser, error = subcommand_path(["eval", "humaneval", "--checkpoint", "run"])
    assert (path, error) == (["eval", "humaneval"], None)
    assert unknown_flags(parser, ["--checkpoint", "run", "--n=5"]) == []
    assert unknown_flags(parser, ["--checkpoint", "run", "[--no-such-flag]"]) == ["--no-such-flag"]


# --- What no file says --------------------------------------------------------------

# (pattern, Markdown prose only: /tmp/<name> may appear in a code block or in code, where
# the sandbox uses such paths inside its own root)
MACHINE_PATHS = (
    (re.compile(r"(?<![\w.~-])/(?:work|root)/"), False),
    (re.compile(r"(?<![\w.~-])/home/(?!<)[A-Za-z_][\w.-]*"), False),
    (re.compile(r"(?<![\w.~-])/tmp/[\w.-]+"), True),
)
SESSION = re.compile(r"\bsessions?\s+\d+", re.IGNORECASE)
ISSUE = re.compile(r"(\S+)?\s*\bissues?\s+(#?)(\d+)", re.IGNORECASE)
NOT_A_PROJECT = {
    "the", "this", "that", "our", "their", "its", "an", "a", "in", "of", "see", "and",
    "or", "by", "for", "to", "from", "same", "which", "tracker", "open", "(", "as", "on",
}  # fmt: skip


def our_issue(match: re.Match[str]) -> bool:
    """True for our tracker's numbers, False for "evalplus issue #5" (upstream's)."""
    before, hash_sign = (match.group(1) or "").strip("(["), match.group(2)
    return not (hash_sign and before and before.lower() not in NOT_A_PROJECT)


def hygiene_problems(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    prose = dict(prose_lines(text)) if path.suffix == ".md" else None
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        for pattern, prose_only in MACHINE_PATHS:
            if prose_only and (prose is None or number not in prose):
                continue
            if m := pattern.search(line):
                problems.append(f"{rel(path)}:{number}: a machine's path: {m.group(0)}")
        if m := SESSION.search(line):
            problems.append(f"{rel(path)}:{number}: our history: {m.group(0)!r}")
        for m in ISSUE.finditer(line):
            if our_issue(m):
                problems.append(f"{rel(path)}:{number}: our tracker: {m.group(0).strip()!r}")
    return problems


def test_hygiene_patterns() -> None:
    def issues(s: str) -> list[bool]:
        return [our_issue(m) for m in ISSUE.finditer(s)]

    issue, session = "issue", "session"
    assert issues(f"{issue} 20's target") == [True]
    assert issues(f"see {issue} #20") == [True]
    assert issues(f"evalplus {issue} #5") == [False]
    assert issues(f"(bigcode-evaluation-harness {issue} #221)") == [False]
    assert SESSION.search(f"as in {session} 12")
    assert not SESSION.search(f"for the {session}, once")
    assert MACHINE_PATHS[0][0].search("ran in /" + "work/qs-clone") is not None
    assert MACHINE_PATHS[1][0].search("cmd = /" + "home/me/x") is not None
    assert MACHINE_PATHS[1][0].search("~/codeparrot/runs") is None
    assert MACHINE_PATHS[2][0].search("a copy in `/tmp`") is None


@pytest.mark.parametrize("path", repo_files(HYGIENE_GLOBS), ids=rel)
def test_no_machine_paths_or_tracker_references(path: Path) -> None:
    problems = hygiene_problems(path)
    assert not problems, "\n".join(problems)


# --- RESULTS.md's rows ----------------------------------------------------------------

DATE = re.compile(r"^20\d\d-[01]\d-[0-3]\d$")
COMMIT = re.compile(r"\b[0-9a-f]{7,40}\b")


def table_rows(text: str) -> list[tuple[int, dict[str, str]]]:
    """(line, {header: cell}) for every row of every table outside code blocks."""
    rows, header = [], None
    for number, line in prose_lines(text, blank_code=False):
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in INLINE_CODE.sub("code", line).strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
        elif not all(set(c) <= set("-: ") for c in cells):
            rows.append((number, dict(zip(header, cells, strict=False))))
    return rows


def test_results_rows_carry_date_and_commit() -> None:
    """A row of a RESULTS.md table with date and commit columns names both."""
    rows = [
        (n, r) for n, r in table_rows((REPO / "RESULTS.md").read_text(encoding="utf-8"))
        if "date" in r and "commit" in r
    ]  # fmt: skip
    assert len(rows) >= 20
    problems = [
        f"RESULTS.md:{n}: date {r['date']!r}, commit {r['commit']!r}"
        for n, r in rows
        if not DATE.match(r["date"]) or not COMMIT.search(r["commit"])
    ]
    assert not problems, "\n".join(problems)


# --- The README's figures -----------------------------------------------------------

README_FIGURE = re.compile(r"\[([^\]]*\d[^\]]*)\]\(RESULTS\.md#([\w-]+)\)")
# a figure: 4.49, 5,936 (not the 50 of p50)
NUMBER = re.compile(r"(?<![\w.])\d+(?:,\d{3})*(?:\.\d+)?")


def results_sections(text: str) -> dict[str, str]:
    """RESULTS.md's text under each heading, by the heading's anchor (a section runs to
    the next heading of any level)."""
    sections: dict[str, list[str]] = {}
    current = ""
    for line in text.splitlines():
        m = HEADING.match(line)
        if m:
            current = slug(m.group(2))
            sections.setdefault(current, [])
        else:
            sections.setdefault(current, []).append(line)
    return {k: "\n".join(v) for k, v in sections.items()}


def figure_problems(readme: str, results: str) -> list[str]:
    """Each number in a README link into RESULTS.md that is missing from that section."""
    sections = results_sections(results)
    problems = []
    for text, anchor in README_FIGURE.findall(readme):
        section = sections.get(anchor, "")
        for number in NUMBER.findall(text):
            if not re.search(rf"(?<![\d.,]){re.escape(number)}(?![\d]|\.\d)", section):
                problems.append(f"[{text}](RESULTS.md#{anchor}): {number} is not in that section")
    return problems


def test_readme_figures_equal_their_results_rows() -> None:
    """A figure the README links into RESULTS.md is written in the section it links to, so
    that the README cannot drift from the current row."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    results = (REPO / "RESULTS.md").read_text(encoding="utf-8")
    assert README_FIGURE.search(readme), "the README links no figure into RESULTS.md"
    problems = figure_problems(readme, results)
    assert not problems, "\n".join(problems)


def test_a_drifted_figure_is_caught() -> None:
    results = "## Speed (`bench/x.py`)\n\n| a | **2.69x** |\n\n## Other\n\n3.35x\n"
    assert figure_problems("[2.69x](RESULTS.md#speed-benchxpy)", results) == []
    assert figure_problems("[3.35x](RESULTS.md#speed-benchxpy)", results) == [
        "[3.35x](RESULTS.md#speed-benchxpy): 3.35 is not in that section"
    ]
    assert figure_problems("[83.4 ms p95](RESULTS.md#speed-benchxpy)", results)


def families_section(readme: str) -> str | None:
    """The README's text between the families markers, None where a marker is missing."""
    from codeparrot.families import TABLE_BEGIN, TABLE_END

    start, end = readme.find(TABLE_BEGIN), readme.find(TABLE_END)
    if start < 0 or end < start:
        return None
    return readme[start + len(TABLE_BEGIN) : end].strip()


def test_readme_families_table_is_the_generated_one() -> None:
    """The README's capability table is what codeparrot.families generates from its
    records: a family added, or a capability changed, without the README fails here.
    (To update it, paste the output of ``python -m codeparrot.families`` between the markers.)"""
    from codeparrot.families import capability_table

    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = families_section(readme)
    assert section is not None, "README.md has no <!-- families:begin/end --> markers"
    assert "## Model families" in readme[: readme.find("<!-- families:begin -->")]
    assert section == capability_table(), (
        "README.md's families table differs from codeparrot.families.capability_table()"
    )


def test_a_stale_families_table_is_caught() -> None:
    from codeparrot.families import TABLE_BEGIN, TABLE_END, capability_table

    table = capability_table()
    fresh = f"## Model families\n{TABLE_BEGIN}\n{table}\n{TABLE_END}\n"
    assert families_section(fresh) == table
    stale = fresh.replace("| CodeGen |", "| CodeGen 2 |")
    assert families_section(stale) != table
    assert families_section("no markers") is None


def test_readme_stays_short() -> None:
    """The README is for a user deciding and starting: at most 1,300 words (contributor
    matter lives in CONTRIBUTING.md, figures in RESULTS.md)."""
    words = len((REPO / "README.md").read_text(encoding="utf-8").split())
    assert words <= 1300, f"README.md has {words} words"
