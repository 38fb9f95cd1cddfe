"""Check the Helix set-up by typing into a real `hx` under tmux, as a user would.

    python lsp/editors/helix_check.py --checkpoint runs/tiny \
        --command $PWD/.venv/bin/codeparrot [--hx hx] [--expect "    return os.path.join(*parts)"]

Writes a languages.toml made from helix-languages.toml (the server's command and
checkpoint filled in) into a throw-away config directory, opens a Python file whose last
line is `    return`, and types `5G` `A` (end of line 5, insert), `Ctrl-x` (completion menu),
`Tab` (select the item), `Enter` (accept), `Esc`, `:wq`. Then reads the file back.
Prints PASS / FAIL lines and the Helix version; exits 1 on a failure. Needs tmux.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
HEAD = "    return"
TEXT = f"import os\n\n\ndef join_all(parts):\n{HEAD}\n"


def languages_toml(command: str, checkpoint: str) -> str:
    """helix-languages.toml with the real command and checkpoint, and no pylsp."""
    text = (HERE / "helix-languages.toml").read_text(encoding="utf-8")
    text = re.sub(r'^command = "codeparrot"', f"command = {command!r}", text, flags=re.M)
    text = text.replace('"/path/to/run"', f"{checkpoint!r}")
    # pylsp may not be installed; a missing server only logs an error, but keep it quiet
    return text.replace('["pylsp", "codeparrot"]', '["codeparrot"]')


class Tmux:
    def __init__(self, socket: str) -> None:
        self.base = ["tmux", "-L", socket]

    def __call__(self, *args: str) -> str:
        return subprocess.run(
            [*self.base, *args], capture_output=True, text=True, check=False
        ).stdout

    def alive(self) -> bool:
        return (
            subprocess.run([*self.base, "has-session", "-t", "hx"], capture_output=True).returncode
            == 0
        )

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "hx")

    def wait_for(self, pattern: str, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if re.search(pattern, screen):
                return screen
            time.sleep(0.1)
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hx", default="hx", help="the Helix executable")
    parser.add_argument("--command", default="codeparrot", help="the codeparrot script")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--expect", help="the line the accepted suggestion must produce")
    parser.add_argument("--timeout", type=float, default=120, help="seconds to wait for the menu")
    args = parser.parse_args(argv)

    failed = False

    def check(ok: bool, what: str) -> None:
        nonlocal failed
        print(("PASS " if ok else "FAIL ") + what, flush=True)
        failed = failed or not ok

    version = subprocess.run([args.hx, "--version"], capture_output=True, text=True).stdout
    with tempfile.TemporaryDirectory() as tmp:
        home, project = Path(tmp, "home"), Path(tmp, "project")
        (home / ".config" / "helix").mkdir(parents=True)
        project.mkdir()
        (home / ".config" / "helix" / "languages.toml").write_text(
            languages_toml(args.command, str(Path(args.checkpoint).resolve()))
        )
        source = project / "example.py"
        source.write_text(TEXT)
        env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
        health = subprocess.run(
            [args.hx, "--health", "python"], capture_output=True, text=True, env=env
        ).stdout
        check("codeparrot" in health, "hx --health python lists codeparrot")

        tmux = Tmux(f"codeparrot-hx-{os.getpid()}")
        command = f"cd {project} && exec {args.hx} example.py"
        tmux_env = [
            arg for key in ("HOME", "XDG_CONFIG_HOME") for arg in ("-e", f"{key}={env[key]}")
        ]
        tmux("new-session", "-d", "-s", "hx", "-x", "100", "-y", "20", *tmux_env, command)
        try:
            check(tmux.wait_for(r"example\.py", 20) is not None, "hx started")
            tmux("send-keys", "-t", "hx", "5G", "A")
            time.sleep(0.5)
            # the first request waits for the model: ask again until the menu shows
            menu = None
            deadline = time.monotonic() + args.timeout
            while menu is None and time.monotonic() < deadline:
                tmux("send-keys", "-t", "hx", "C-x")
                menu = tmux.wait_for(r"\n\s*~?\s+return \S.*text", 5)
            check(menu is not None, "completion menu after Ctrl-x")
            if menu is not None:
                item = re.search(r"return \S.*?(?=\s+text)", menu)
                print("menu item:", item.group(0) if item else menu, flush=True)
                tmux("send-keys", "-t", "hx", "Tab")
                time.sleep(0.5)
                tmux("send-keys", "-t", "hx", "Enter")
                time.sleep(0.5)
            tmux("send-keys", "-t", "hx", "Escape")
            time.sleep(0.3)
            tmux("send-keys", "-t", "hx", ":wq", "Enter")
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and tmux.alive():
                time.sleep(0.1)
        finally:
            tmux("kill-server")
        lines = source.read_text().split("\n")
        got = lines[4] if len(lines) > 4 else ""
        check(lines[:4] == TEXT.split("\n")[:4], "lines before the cursor untouched")
        check(
            got.startswith(HEAD) and len(got) > len(HEAD),
            f"accepted item completed the line: {got!r}",
        )
        check(len(lines) == 6 and lines[5] == "", "no stray line inserted by Enter")
        if args.expect is not None:
            check(got == args.expect, f"the line is {args.expect!r}")
    print(version.strip() or "helix (version unknown)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
