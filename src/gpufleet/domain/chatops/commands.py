"""`/gpu …` text → a typed command, or a `Unparsed` naming the problem and showing usage.

The grammar mirrors `gpufleet request …` so a user who knows one knows the other:
`request 8 H100-80GB --project vision --days 14 --reason "…"`, `status GR-1042`, `mine`,
`why GR-1042`, `release GR-1042`, `idle`, `help [verb]`. Words are split the way a shell
splits them (shlex), after the typographic quotes chat clients put in (“ ” ‘ ’) are turned
back into plain ones. Parsing never raises: whatever a user types — huge text, NUL, unbalanced
quotes, mentions, unknown flags — comes back as an `Unparsed` whose `problem` says what is
wrong, for an ephemeral reply. Names (models, projects, MIG profiles) are only checked for
shape here; the server judges whether they exist, in its own words.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field

from gpufleet.domain.requests import request_code, request_id_from_code
from gpufleet.text_limits import MAX_DURATION_DAYS, clip, is_label_text

MAX_TEXT_CHARS = 4000  # longer than any sane command; Slack's own message limit is 4000 too
MAX_COUNT = 4096  # as the API's request schema
MAX_REASON_CHARS = 1000
_QUOTES = str.maketrans({"“": '"', "”": '"', "„": '"', "‘": "'", "’": "'"})
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")  # tab and newline are ordinary spaces
MIG_PROFILE = re.compile(r"\d+c\.\d+g\.\d+gb|\d+g\.\d+gb(\+me)?", re.IGNORECASE)
_LONGEST_CODE = 21  # `GR-` and a number a 64-bit id holds
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/+-]*")

USAGE = {
    "request": "/gpu request COUNT [MODEL …] [MIG-PROFILE] --project P --reason \"why\" "
               "[--days D | --hours H] [--mig 1g.10gb | --fraction 0.5] [--same-node] "
               "[--nvlink] [--env E]",
    "status": "/gpu status GR-1042",
    "why": "/gpu why GR-1042",
    "release": "/gpu release GR-1042",
    "mine": "/gpu mine",
    "idle": "/gpu idle",
    "link": "/gpu link",
    "help": "/gpu help [request|status|why|release|mine|idle|link]",
}
VERBS = tuple(USAGE)


@dataclass(frozen=True)
class RequestCommand:
    """`gpufleet request create`'s options; `duration_hours` None: the server's default."""

    count: int
    project: str
    reason: str
    models: tuple[str, ...] = ()
    mig_profile: str | None = None
    fraction: float | None = None
    duration_hours: float | None = None
    same_node: bool = False
    nvlink: bool = False
    environment: str | None = None
    verb: str = field(default="request", init=False)


@dataclass(frozen=True)
class CodeCommand:
    """`status`, `why` or `release` of one request, its code written as `GR-1042`."""

    verb: str
    code: str


@dataclass(frozen=True)
class PlainCommand:
    """`mine`, `idle` or `link`: nothing more to say."""

    verb: str


@dataclass(frozen=True)
class HelpCommand:
    topic: str | None = None
    verb: str = field(default="help", init=False)


@dataclass(frozen=True)
class Unparsed:
    """Text that is no command: `problem` names what is wrong, `usage` shows the right form."""

    problem: str
    usage: str


Command = RequestCommand | CodeCommand | PlainCommand | HelpCommand


def parse(text: str) -> Command | Unparsed:
    """The command `text` (what follows `/gpu`) asks for; empty text asks for help."""
    if len(text) > MAX_TEXT_CHARS:
        return Unparsed(f"the command is {len(text)} characters long; at most "
                        f"{MAX_TEXT_CHARS} are read", USAGE["help"])
    if _CONTROL.search(text):
        return Unparsed("the command holds control characters; type it as plain text",
                        USAGE["help"])
    try:
        words = shlex.split(text.translate(_QUOTES))
    except ValueError as error:  # "No closing quotation", "No escaped character"
        return Unparsed(f"could not split the command into words: {str(error).lower()}",
                        USAGE["help"])
    if not words:
        return HelpCommand()
    verb, rest = words[0].lower(), words[1:]
    if verb not in USAGE:
        return Unparsed(f"unknown command '{_shown(words[0])}'; the commands are: "
                        f"{', '.join(VERBS)}", USAGE["help"])
    if verb == "request":
        return _request(rest)
    if verb in ("status", "why", "release"):
        return _code_command(verb, rest)
    if verb == "help":
        return _help(rest)
    if rest:
        return Unparsed(f"'{verb}' takes nothing more, not '{_shown(rest[0])}'", USAGE[verb])
    return PlainCommand(verb)


def _shown(word: str) -> str:
    """A user's word quoted back in a message: short, one line."""
    return clip(word, 40)


def _help(rest: list[str]) -> HelpCommand | Unparsed:
    if not rest:
        return HelpCommand()
    topic = rest[0].lower()
    if len(rest) > 1 or topic not in USAGE:
        return Unparsed(f"no help on '{_shown(' '.join(rest))}'", USAGE["help"])
    return HelpCommand(topic)


def _code_command(verb: str, rest: list[str]) -> CodeCommand | Unparsed:
    if len(rest) != 1:
        problem = "which request? give its code" if not rest else "give one request code"
        return Unparsed(problem, USAGE[verb])
    request_id = request_id_from_code(rest[0]) if len(rest[0]) <= _LONGEST_CODE else None
    if request_id is None:
        return Unparsed(f"'{_shown(rest[0])}' is not a request code like GR-1042", USAGE[verb])
    return CodeCommand(verb, request_code(request_id))


# --- request -----------------------------------------------------------------------------
_VALUE_FLAGS = {"--project": "project", "-p": "project", "--reason": "reason",
                "--days": "days", "--hours": "hours", "--mig": "mig", "--fraction": "fraction",
                "--env": "environment", "--model": "model", "-m": "model"}
_SWITCHES = {"--same-node": "same_node", "--nvlink": "nvlink"}


class _Refused(Exception):
    """Internal: unwinds to `_request`, which turns it into an `Unparsed`."""


def _request(words: list[str]) -> RequestCommand | Unparsed:
    try:
        return _request_command(words)
    except _Refused as refused:
        return Unparsed(str(refused), USAGE["request"])


def _request_command(words: list[str]) -> RequestCommand:
    options, switches, positional = _split_options(words)
    if not positional:
        raise _Refused("how many? give a count first, e.g. `request 8 H100-80GB …`")
    count = _count(positional[0])
    models = list(options.get("model", []))
    mig = _one(options, "mig")
    for word in positional[1:]:
        if MIG_PROFILE.fullmatch(word):
            if mig is not None and mig.lower() != word.lower():
                raise _Refused(f"two MIG profiles, '{mig}' and '{_shown(word)}'; give one")
            mig = word
        else:
            models.append(word)
    for name in models:
        if not _NAME.fullmatch(name) or not is_label_text(name):
            raise _Refused(f"'{_shown(name)}' is not a GPU model name like H100-80GB")
    if mig is not None and not MIG_PROFILE.fullmatch(mig):
        raise _Refused(f"'{_shown(mig)}' is not a MIG profile like 1g.10gb")
    fraction = _fraction(_one(options, "fraction"))
    if mig is not None and fraction is not None:
        raise _Refused("ask for either a MIG profile or a fraction, not both")
    project = _one(options, "project")
    reason = _one(options, "reason")
    if project is None:
        raise _Refused("which project? add --project NAME")
    if not _NAME.fullmatch(project) or not is_label_text(project):
        raise _Refused(f"'{_shown(project)}' is not a project name")
    if reason is None or not reason.strip():
        raise _Refused("why? add --reason \"…\" (it is kept in the audit log)")
    if len(reason) > MAX_REASON_CHARS:
        raise _Refused(f"the reason is {len(reason)} characters; at most {MAX_REASON_CHARS}")
    environment = _one(options, "environment")
    if environment is not None and not (_NAME.fullmatch(environment)
                                        and is_label_text(environment)):
        raise _Refused(f"'{_shown(environment)}' is not an environment name")
    return RequestCommand(
        count=count, project=project, reason=reason.strip(),
        models=tuple(dict.fromkeys(models)), mig_profile=mig.lower() if mig else None,
        fraction=fraction, duration_hours=_duration_hours(options),
        same_node="same_node" in switches or "nvlink" in switches,
        nvlink="nvlink" in switches, environment=environment)


def _split_options(words: list[str]) -> tuple[dict[str, list[str]], set[str], list[str]]:
    """Flags with values (`--days 14` or `--days=14`), switches, and the other words."""
    options: dict[str, list[str]] = {}
    switches: set[str] = set()
    positional: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        index += 1
        flag, equals, inline = word.partition("=")
        if flag in _SWITCHES and not equals:
            switches.add(_SWITCHES[flag])
        elif flag in _VALUE_FLAGS:
            if equals:
                value = inline
            elif index < len(words):
                value, index = words[index], index + 1
            else:
                raise _Refused(f"{flag} needs a value")
            options.setdefault(_VALUE_FLAGS[flag], []).append(value)
        elif word.startswith("-") and not _is_number(word):
            raise _Refused(f"unknown option '{_shown(word)}'")
        else:
            positional.append(word)
    return options, switches, positional


def _one(options: dict[str, list[str]], name: str) -> str | None:
    values = options.get(name, [])
    if len(values) > 1:
        raise _Refused(f"--{name.replace('_', '-')} given {len(values)} times; give it once")
    return values[0] if values else None


def _is_number(word: str) -> bool:
    try:
        float(word)
    except ValueError:
        return False
    return True


def _count(word: str) -> int:
    if not word.isascii() or not word.isdigit() or not 1 <= int(word) <= MAX_COUNT:
        raise _Refused(f"the count must be a whole number from 1 to {MAX_COUNT}, "
                       f"not '{_shown(word)}'")
    return int(word)


def _number(flag: str, text: str) -> float:
    try:
        value = float(text) if text.isascii() else float("nan")
    except ValueError:
        value = float("nan")
    if value != value:  # nan, or no number at all
        raise _Refused(f"{flag} must be a number, not '{_shown(text)}'")
    return value


def _fraction(text: str | None) -> float | None:
    if text is None:
        return None
    value = _number("--fraction", text)
    if not 0 < value < 1 or round(value * 1000) < 1:
        raise _Refused(f"--fraction must be above 0.001 and below 1, not {value:g}")
    return value


def _duration_hours(options: dict[str, list[str]]) -> float | None:
    days, hours = _one(options, "days"), _one(options, "hours")
    if days is not None and hours is not None:
        raise _Refused("give one of --days and --hours")
    for flag, text, most, per_hour in (("--days", days, MAX_DURATION_DAYS, 24),
                                       ("--hours", hours, MAX_DURATION_DAYS * 24, 1)):
        if text is None:
            continue
        value = _number(flag, text)
        if not 0 < value <= most:
            raise _Refused(f"{flag} must be above 0 and at most {most:g}, not {value:g}")
        return value * per_hour
    return None
