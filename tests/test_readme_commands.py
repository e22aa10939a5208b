"""Every `gpufleet` command of README.md's ```bash blocks runs, as written, on a fresh demo.

A newcomer pastes the README into a second terminal while `gpufleet demo` runs; this test
does the same: it starts a real `gpufleet demo` process (free port, its own data dir, HOME
and config dir, so no real login is read or written), waits until the demo says its fleet
is in use, then runs each command line in README order through bash, with the demo's URL
and admin token in GPUFLEET_URL / GPUFLEET_TOKEN. A command passes when it exits 0 and
prints no traceback. Shell variables a line sets (`GR=$(gpufleet request create … -q)`)
are kept for the lines after it, as a shell would.

The few lines that cannot run on a demo are listed in NOT_ON_A_DEMO with the reason, and
the live views that run until Ctrl-C in RUN_UNTIL_STOPPED.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.paths import REPO_ROOT
from tests.serve_process import free_port

README = REPO_ROOT / "README.md"

# Lines that cannot run on a demo: prefix of the command -> why.
NOT_ON_A_DEMO = {
    "gpufleet agent ": "an agent is a node of its own: it needs GPUs (nvml, dcgm-exporter) or "
                      "a join token, and its README lines end in placeholder flags (…)",
    "gpufleet whatif requests/": "needs the openb trace files, downloaded as docs/whatif.md "
                                 "says",
}
# Live views that refresh until Ctrl-C: they pass when they have drawn their first screen
# and still run, without a traceback, LIVE_VIEW_DRAWS_S later.
RUN_UNTIL_STOPPED = ("gpufleet top",)
LIVE_VIEW_MARK = b"allocated GPUs"  # a column of `gpufleet top`'s first screen
LIVE_VIEW_DRAWS_S = 5.0

DEMO_READY_MARK = "fleet in use"   # the demo's line once its seeding has finished
DEMO_SEEDING_FAILED = "seeding the demo's requests failed"  # demo.runner logs it so
DEMO_READY_TIMEOUT_S = 600.0       # seeding took 233 s on a 2-core machine at load 9
COMMAND_TIMEOUT_S = 180.0

FENCE = re.compile(r"^```(\w*)\s*$")
ASSIGNMENT = re.compile(r"^([A-Za-z_]\w*)=\$\((gpufleet .*)\)(\s+#.*)?$", re.S)
EVAL = re.compile(r"^eval \"\$\((gpufleet .*)\)\"(\s+#.*)?$", re.S)
EXPORT_LINE = re.compile(r"^export [A-Z_]+=\S+$")


@dataclass(frozen=True)
class ReadmeLine:
    """One command line of the README (continuation lines joined)."""

    text: str        # as bash runs it
    variable: str | None = None  # `NAME=$(gpufleet …)`: NAME
    inner: str | None = None     # the gpufleet command of an assignment or an `eval "$(…)"`

    @property
    def command(self) -> str:
        """The gpufleet command itself (inside `$(…)` where it is wrapped)."""
        return self.inner or self.text


def readme_lines(markdown: str) -> list[ReadmeLine]:
    """The command lines of the ```bash blocks that run gpufleet, in order."""
    lines: list[ReadmeLine] = []
    for block in _bash_blocks(markdown):
        for text in _joined(block):
            if text.startswith("gpufleet "):
                lines.append(ReadmeLine(text))
            elif assigned := ASSIGNMENT.match(text):
                lines.append(ReadmeLine(text, variable=assigned.group(1),
                                        inner=assigned.group(2)))
            elif evaluated := EVAL.match(text):
                lines.append(ReadmeLine(text, inner=evaluated.group(1)))
    return lines


def _bash_blocks(markdown: str) -> list[list[str]]:
    """The lines inside each ```bash fence (other fences are skipped whole)."""
    blocks: list[list[str]] = []
    inside: str | None = None  # the fence's language while inside one
    for line in markdown.splitlines():
        if inside is None:
            fence = FENCE.match(line)
            if fence:
                inside = fence.group(1)
                if inside == "bash":
                    blocks.append([])
        elif line.startswith("```"):
            inside = None
        elif inside == "bash":
            blocks[-1].append(line)
    return blocks


def _joined(block: list[str]) -> list[str]:
    """Logical lines: continuations (`\\` at the end) joined; blank and comment lines gone."""
    joined: list[str] = []
    pending = ""
    for line in block:
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        joined.append((pending + line).strip())
        pending = ""
    if pending:
        joined.append(pending.strip())
    return joined


def _exception(line: ReadmeLine) -> str | None:
    return next((why for prefix, why in NOT_ON_A_DEMO.items()
                 if line.command.startswith(prefix)), None)


# --- the extraction, without a demo -----------------------------------------------------------
SAMPLE = '''
```bash
gpufleet fleet summary                 # a comment
GR=$(gpufleet request create --project p --gpus 8 \\
    --reason "x y" -q)                 # GR-1321
# a comment line
eval "$(gpufleet request wait "$GR" --exports)"   # exports only
pip install -e . && gpufleet demo
```

```toml
gpufleet = "not a command"
```

```
gpufleet not-bash
```
'''


def test_readme_lines_are_found_joined_and_unwrapped():
    assert readme_lines(SAMPLE) == [
        ReadmeLine("gpufleet fleet summary                 # a comment"),
        ReadmeLine('GR=$(gpufleet request create --project p --gpus 8     --reason "x y" -q)'
                   "                 # GR-1321", variable="GR",
                   inner='gpufleet request create --project p --gpus 8     --reason "x y" -q'),
        ReadmeLine('eval "$(gpufleet request wait "$GR" --exports)"   # exports only',
                   inner='gpufleet request wait "$GR" --exports'),
    ]


def test_the_readme_has_commands_and_its_exceptions_still_match_some():
    lines = readme_lines(README.read_text())
    assert len(lines) >= 20
    for prefix in NOT_ON_A_DEMO:
        assert any(line.command.startswith(prefix) for line in lines), \
            f"NOT_ON_A_DEMO names {prefix!r}, which the README no longer has: drop it"
    for live in RUN_UNTIL_STOPPED:
        assert any(line.command.split("#")[0].strip() == live for line in lines), live


# --- the demo and the commands ----------------------------------------------------------------
@dataclass
class Demo:
    env: dict[str, str]  # what a command runs with: the demo's URL and token, a private HOME
    cwd: Path            # where a command writes its files (mig-parted.yaml, …)


def _shims(bin_dir: Path) -> None:
    """`gpufleet` and `python3` on PATH as the interpreter running the tests, whatever
    installed it."""
    bin_dir.mkdir()
    for name, run in (("gpufleet", f'"{sys.executable}" -m gpufleet'),
                      ("python3", f'"{sys.executable}"')):
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {run} "$@"\n')
        shim.chmod(0o755)


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Demo:
    root = tmp_path_factory.mktemp("readme-demo")
    for folder in ("home", "config", "work"):
        (root / folder).mkdir()
    _shims(root / "bin")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUFLEET_") and not k.startswith("XDG_")}
    env.update(HOME=str(root / "home"), GPUFLEET_CONFIG_DIR=str(root / "config"),
               PATH=f"{root / 'bin'}{os.pathsep}{env.get('PATH', '')}", COLUMNS="160")
    port = free_port()
    log_path = root / "demo.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            ["gpufleet", "demo", "--port", str(port), "--data-dir", str(root / "data")],
            env=env, cwd=root / "work", stdout=log, stderr=subprocess.STDOUT,
            executable=str(root / "bin" / "gpufleet"))
    try:
        _wait_until_in_use(process, log_path)
        env.update(GPUFLEET_URL=f"http://127.0.0.1:{port}",
                   GPUFLEET_TOKEN=(root / "data" / "admin-token").read_text().strip())
        yield Demo(env=env, cwd=root / "work")
    finally:
        process.send_signal(signal.SIGINT)  # the demo stops agents, then server
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_until_in_use(process: subprocess.Popen, log_path: Path) -> None:
    deadline = time.monotonic() + DEMO_READY_TIMEOUT_S
    while DEMO_READY_MARK not in (log := log_path.read_text(errors="replace")):
        if DEMO_SEEDING_FAILED in log:
            pytest.fail(f"the demo's seeding failed:\n{log[-3000:]}")
        if process.poll() is not None:
            pytest.fail(f"gpufleet demo exited ({process.returncode}):\n{log[-3000:]}")
        if time.monotonic() > deadline:
            pytest.fail(f"gpufleet demo did not say {DEMO_READY_MARK!r} within "
                        f"{DEMO_READY_TIMEOUT_S:.0f} s:\n{log[-3000:]}")
        time.sleep(1)


def _bash(script: str, demo: Demo, variables: dict[str, str],
          timeout_s: float = COMMAND_TIMEOUT_S) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-e", "-o", "pipefail", "-c", script],
                          env={**demo.env, **variables}, cwd=demo.cwd, capture_output=True,
                          text=True, timeout=timeout_s)


def _problem(line: ReadmeLine, demo: Demo, variables: dict[str, str]) -> str | None:
    """Run one README line as bash would; None when it went well, else what went wrong."""
    if line.command.split("#")[0].strip() in RUN_UNTIL_STOPPED:
        return _live_view_problem(line, demo, variables)
    if line.variable:  # keep what it assigns, as the shell running the README would
        ran = _bash(f'{line.text}\nprintf %s "${line.variable}"', demo, variables)
        if ran.returncode == 0 and ran.stdout.strip():
            variables[line.variable] = ran.stdout.strip()
        elif ran.returncode == 0:
            return f"it set {line.variable} to nothing"
    elif line.inner:  # eval "$(gpufleet …)": eval hides the command's exit status
        ran = _bash(line.inner, demo, variables)
        exports = ran.stdout.splitlines()
        if ran.returncode == 0 and not (exports and all(map(EXPORT_LINE.match, exports))):
            return f"eval was given more than export lines:\n{ran.stdout}"
    else:
        ran = _bash(line.text, demo, variables)
    output = ran.stdout + ran.stderr
    if ran.returncode != 0 or "Traceback" in output:
        return f"exit status {ran.returncode}:\n{output[-2000:]}"
    return None


def _live_view_problem(line: ReadmeLine, demo: Demo, variables: dict[str, str]) -> str | None:
    """Run it in a terminal, as a user does (Rich draws a live view only on a terminal: to a
    pipe it writes nothing until it stops); once its first screen is out, however slow the
    machine is to get there, let it refresh for LIVE_VIEW_DRAWS_S, then send Ctrl-C's
    signal. Exiting by itself before that must be with status 0."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    process = subprocess.Popen(["bash", "-c", line.text], env={**demo.env, **variables},
                               cwd=demo.cwd, stdin=terminal, stdout=terminal, stderr=terminal,
                               start_new_session=True)
    os.close(terminal)
    output = bytearray()
    first_screen_by = time.monotonic() + COMMAND_TIMEOUT_S
    stop_at: float | None = None
    stopped_by_us = False
    while True:
        now = time.monotonic()
        if stop_at is None and LIVE_VIEW_MARK in output:
            stop_at = now + LIVE_VIEW_DRAWS_S
        if not stopped_by_us and now > (stop_at or first_screen_by):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGINT)
            stopped_by_us = True
        if stopped_by_us and now > (stop_at or first_screen_by) + 30:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        if select.select([controller], [], [], 0.2)[0]:
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal closed: every process on it has exited
                chunk = b""
            if not chunk:
                break
            output += chunk
    os.close(controller)
    process.wait()
    text = output.decode(errors="replace")
    if "Traceback" in text or LIVE_VIEW_MARK not in output:
        return f"it printed a traceback or no view:\n{text[-2000:]}"
    if not stopped_by_us and process.returncode != 0:
        return f"exit status {process.returncode}:\n{text[-2000:]}"
    return None


@pytest.mark.timeout(DEMO_READY_TIMEOUT_S + 600)
def test_every_readme_command_runs_on_a_fresh_demo(demo):
    variables: dict[str, str] = {}
    failures = []
    ran = 0
    for line in readme_lines(README.read_text()):
        if _exception(line):
            continue
        try:
            problem = _problem(line, demo, variables)
        except subprocess.TimeoutExpired:
            problem = f"still running after {COMMAND_TIMEOUT_S:.0f} s"
        ran += 1
        if problem:
            failures.append(f"$ {line.text}\n{problem}")
    assert ran >= 20
    assert not failures, "README commands that fail on a fresh demo:\n\n" + "\n\n".join(
        failures)
