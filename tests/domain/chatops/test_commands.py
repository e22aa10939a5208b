"""The `/gpu` grammar: every verb, every option, and hostile text, which never raises."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpufleet.domain.chatops.commands import (
    MAX_TEXT_CHARS,
    USAGE,
    CodeCommand,
    HelpCommand,
    PlainCommand,
    RequestCommand,
    Unparsed,
    parse,
)

BASE = "request 8 H100-80GB --project vision --reason 'train it'"

GOOD = {
    "the issue's example": (
        "request 8 H100-80GB --project vision --days 14 --reason 'a big run'",
        RequestCommand(8, "vision", "a big run", ("H100-80GB",), duration_hours=336)),
    "typographic quotes from a chat client": (
        "request 8 H100-80GB --project vision --reason “a big run”",
        RequestCommand(8, "vision", "a big run", ("H100-80GB",))),
    "several models, --model too, duplicates once": (
        "request 2 H100-80GB A100-80GB -m H100-80GB -p vision --reason x",
        RequestCommand(2, "vision", "x", ("H100-80GB", "A100-80GB"))),
    "any model": ("request 1 -p vision --reason x", RequestCommand(1, "vision", "x")),
    "MIG profile as a word": (
        "request 4 H100-80GB 1G.10GB -p vision --reason x --hours=3",
        RequestCommand(4, "vision", "x", ("H100-80GB",), mig_profile="1g.10gb",
                       duration_hours=3)),
    "MIG profile with media extensions, by --mig": (
        "request 1 --mig 1g.10gb+me -p vision --reason x",
        RequestCommand(1, "vision", "x", mig_profile="1g.10gb+me")),
    "a fraction, placement switches, an environment": (
        "request 2 L40S-48GB --fraction 0.25 --nvlink --env lab -p vision --reason x",
        RequestCommand(2, "vision", "x", ("L40S-48GB",), fraction=0.25, same_node=True,
                       nvlink=True, environment="lab")),
    "same node": ("request 2 -p v --reason x --same-node",
                  RequestCommand(2, "v", "x", same_node=True)),
    "the verb in capitals": ("REQUEST 1 -p v --reason x", RequestCommand(1, "v", "x")),
    "status, code in lower case": ("status gr-1042", CodeCommand("status", "GR-1042")),
    "why": ("why GR-1042", CodeCommand("why", "GR-1042")),
    "release": ("  release   GR-1001 ", CodeCommand("release", "GR-1001")),
    "mine": ("mine", PlainCommand("mine")),
    "idle": ("idle", PlainCommand("idle")),
    "help": ("help", HelpCommand()),
    "help on a verb": ("help request", HelpCommand("request")),
    "nothing at all": ("", HelpCommand()),
    "only spaces and newlines": (" \n\t ", HelpCommand()),
}


@pytest.mark.parametrize("text, expected", GOOD.values(), ids=GOOD.keys())
def test_commands_parse(text, expected):
    assert parse(text) == expected


BAD = {
    "unknown verb": ("launch 8", "unknown command 'launch'", "help"),
    "unclosed quote": ("request 1 --reason 'oops", "no closing quotation", "help"),
    "NUL": ("mine\x00", "control characters", "help"),
    "escape sequence": ("status \x1b[31mGR-1042", "control characters", "help"),
    "huge text": ("request " + "8 " * MAX_TEXT_CHARS, "at most 4000", "help"),
    "no count": ("request H100-80GB -p v --reason x", "must be a whole number", "request"),
    "nothing after request": ("request", "how many?", "request"),
    "count zero": ("request 0 -p v --reason x", "from 1 to 4096", "request"),
    "count negative": ("request -3 -p v --reason x", "not '-3'", "request"),
    "count too many": ("request 5000 -p v --reason x", "from 1 to 4096", "request"),
    "count in other digits": ("request ٣ -p v --reason x", "whole number", "request"),
    "count a fraction": ("request 1.5 -p v --reason x", "whole number", "request"),
    "no project": ("request 1 --reason x", "which project?", "request"),
    "no reason": ("request 1 -p vision", "why? add --reason", "request"),
    "blank reason": ("request 1 -p vision --reason '  '", "why? add --reason", "request"),
    "reason too long": (f"request 1 -p v --reason '{'x' * 1001}'", "at most 1000", "request"),
    "days and hours": ("request 1 -p v --reason x --days 1 --hours 2", "one of --days",
                       "request"),
    "days zero": ("request 1 -p v --reason x --days 0", "above 0", "request"),
    "days infinite": ("request 1 -p v --reason x --days inf", "at most 36500", "request"),
    "days nan": ("request 1 -p v --reason x --days nan", "must be a number", "request"),
    "days not a number": ("request 1 -p v --reason x --days two", "not 'two'", "request"),
    "hours too long": ("request 1 -p v --reason x --hours 1e400", "at most", "request"),
    "flag without value": ("request 1 -p v --reason", "--reason needs a value", "request"),
    "flag twice": ("request 1 -p v -p w --reason x", "given 2 times", "request"),
    "unknown flag": ("request 1 -p v --reason x --gpus 3", "unknown option '--gpus'",
                     "request"),
    "fraction one": ("request 1 -p v --reason x --fraction 1", "below 1", "request"),
    "fraction tiny": ("request 1 -p v --reason x --fraction 0.0001", "above 0.001", "request"),
    "MIG and fraction": ("request 1 1g.10gb --fraction 0.5 -p v --reason x", "not both",
                         "request"),
    "two MIG profiles": ("request 1 1g.10gb 2g.20gb -p v --reason x", "two MIG profiles",
                         "request"),
    "bad --mig": ("request 1 --mig big -p v --reason x", "not a MIG profile", "request"),
    "mention as a model": ("request 1 <!channel> -p v --reason x", "not a GPU model",
                           "request"),
    "shell injection as project": ("request 1 -p 'v; rm -rf /' --reason x",
                                   "not a project name", "request"),
    "SQL as environment": ("request 1 -p v --env \"x' OR 1=1--\" --reason x",
                           "not an environment name", "request"),
    "status without code": ("status", "which request?", "status"),
    "status with two codes": ("status GR-1042 GR-1043", "one request code", "status"),
    "status of a pool": ("status POOL-3", "not a request code", "status"),
    "release of nothing real": ("release GR-12", "not a request code", "release"),
    "why of a path": ("why ../../etc/passwd", "not a request code", "why"),
    "mine with more": ("mine all", "takes nothing more", "mine"),
    "help on nothing known": ("help me", "no help on 'me'", "help"),
}


@pytest.mark.parametrize("text, problem, usage", BAD.values(), ids=BAD.keys())
def test_bad_text_is_refused_naming_the_problem(text, problem, usage):
    outcome = parse(text)
    assert isinstance(outcome, Unparsed), outcome
    assert problem in outcome.problem
    assert outcome.usage == USAGE[usage]


def test_a_long_word_is_quoted_back_clipped():
    outcome = parse("status GR-" + "9" * 3000)
    assert isinstance(outcome, Unparsed) and len(outcome.problem) < 100


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_text_parses_or_is_refused_never_raises(text):
    outcome = parse(text)
    assert isinstance(outcome, RequestCommand | CodeCommand | PlainCommand | HelpCommand
                      | Unparsed)
    if isinstance(outcome, Unparsed):
        assert outcome.problem and len(outcome.problem) < 300


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["request", "8", "H100-80GB", "1g.10gb", "-p", "--project",
                                 "vision", "--reason", "'a b'", "--days", "14", "--hours",
                                 "--fraction", "0.5", "--nvlink", "--same-node", "\"",
                                 "--env", "=", "--days=3", "GR-1042", "status", "why"]),
                max_size=14))
def test_any_arrangement_of_real_words_never_raises(words):
    assert parse(" ".join(words)) is not None


@settings(max_examples=200, deadline=None)
@given(count=st.integers(1, 4096), project=st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
       # Typographic quotes are read as plain ones (the grammar's rule), so not read back.
       reason=st.text(st.characters(blacklist_categories=("Cc", "Cs"),
                                    blacklist_characters="“”„‘’"), min_size=1,
                      max_size=200).filter(str.strip),
       days=st.none() | st.integers(1, 365))
def test_a_written_request_reads_back_as_itself(count, project, reason, days):
    text = (f"request {count} H100-80GB --project {project} --reason {shlex.quote(reason)}"
            + (f" --days {days}" if days else ""))
    command = parse(text)
    assert command == RequestCommand(count, project, reason.strip(), ("H100-80GB",),
                                     duration_hours=days * 24 if days else None)
