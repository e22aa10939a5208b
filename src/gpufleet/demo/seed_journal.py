"""What the demo's lifecycle seeding has done, kept so that an interrupted seeding is finished.

The seeding (`demo.lifecycle_seed`) is a deterministic program of lifecycle service calls
for a seed and a fleet. Each call's outcome is appended to `<data-dir>/lifecycle-seed.jsonl`
as one JSON line when it returns; the last line marks completion. A start that finds the
journal without that line runs the same program again: the calls the journal holds are not
made again, their recorded outcomes are handed back instead, so the program takes the path it
took before and goes on making calls from where it stopped. Nothing is undone or deleted, so
whatever a user created in the meantime stays.

    {"version": 1, "seed": 7, "world": "3f2a…"}       the header: what the plan was made from
    {"call": "create", "code": "GR-12", "state": "active", "gpus": ["GPU-…"]}
    {"call": "create", "refused": "quota_exceeded"}    a refusal the program expected
    {"completed": true}

Ctrl-C stops the seeding between two calls, so the journal always matches the store. A
process killed outright between a call's commit and its line makes the resumed seeding
repeat that one call. Lines are flushed, not fsynced: a killed process loses none, and the
demo does not promise more than that.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

VERSION = 1
FILE_NAME = "lifecycle-seed.jsonl"


class JournalMismatch(Exception):
    """The program asked for a different call than the journal recorded next: it cannot be
    resumed from this journal."""


@dataclass(frozen=True)
class Outcome:
    """What the seeding uses of a call's reply."""

    code: str | None = None
    state: str | None = None
    gpus: tuple[str, ...] = ()
    refused: str | None = None  # the error code of a refusal the program expected


@dataclass(frozen=True)
class Header:
    seed: int
    world: str  # a digest of what the plan was made from (fleet groups, people)


class SeedJournal:
    """The journal of one seeding: outcomes to replay first, then new ones to record."""

    def __init__(self, path: Path | None, recorded: list[dict] | None = None):
        self.path = path
        self._recorded = recorded or []
        self._next = 0

    @classmethod
    def start(cls, path: Path | None, header: Header) -> SeedJournal:
        """A new journal (replacing any old one); `path` None keeps nothing."""
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({"version": VERSION, "seed": header.seed,
                                        "world": header.world}) + "\n")
        return cls(path)

    @classmethod
    def resume(cls, path: Path) -> SeedJournal:
        """The journal of an interrupted seeding, rewritten to its whole lines (a torn last
        line is dropped), ready to replay what it holds and record what follows."""
        lines = _whole_lines(path)
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        return cls(path, lines[1:])

    @property
    def replaying(self) -> bool:
        return self._next < len(self._recorded)

    def replay(self, call: str) -> Outcome | None:
        """The recorded outcome of the next call; None when the journal holds no more (the
        call is to be made)."""
        if not self.replaying:
            return None
        line = self._recorded[self._next]
        if line.get("call") != call:
            raise JournalMismatch(f"call {self._next + 1} was {line.get('call')!r}, "
                                  f"now {call!r}")
        self._next += 1
        return Outcome(line.get("code"), line.get("state"), tuple(line.get("gpus", ())),
                       line.get("refused"))

    def record(self, call: str, outcome: Outcome) -> None:
        fields = (("code", outcome.code), ("state", outcome.state),
                  ("gpus", list(outcome.gpus)), ("refused", outcome.refused))
        self._append({"call": call, **{name: value for name, value in fields if value}})

    def complete(self) -> None:
        self._append({"completed": True})

    def _append(self, line: dict) -> None:
        if self.path is None:
            return
        with self.path.open("a") as out:
            out.write(json.dumps(line) + "\n")


def read_header(path: Path) -> tuple[Header | None, bool]:
    """(the header, whether the seeding completed); (None, False) without a usable journal."""
    if not path.exists():
        return None, False
    lines = _whole_lines(path)
    if not lines or lines[0].get("version") != VERSION:
        return None, False
    header = Header(seed=lines[0]["seed"], world=lines[0]["world"])
    return header, lines[-1] == {"completed": True}


def _whole_lines(path: Path) -> list[dict]:
    """The journal's lines up to the first that is not a whole JSON object."""
    lines = []
    for text in path.read_text().splitlines(keepends=True):
        try:
            line = json.loads(text) if text.endswith("\n") else None
        except json.JSONDecodeError:
            line = None
        if not isinstance(line, dict):
            break
        lines.append(line)
    return lines
