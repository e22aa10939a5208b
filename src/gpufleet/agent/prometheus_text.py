"""Read a Prometheus text exposition (what an exporter's /metrics serves) into flat samples.

Parsing is prometheus_client's (`text_string_to_metric_families`); this module adds what a
scraper needs around it:

- A malformed page still yields what it can. prometheus_client stops at the first bad line
  (ValueError, the only error it raises on bad input), so on failure the page is parsed
  again line by line, skipping and counting the bad lines.
- Each sample keeps the name the page wrote. For a counter declared without `_total`,
  prometheus_client appends `_total` to its samples' names; the family holds the declared
  name, which is the one kept (for a lower-case `*_total` counter it is the name less
  `_total`: no DCGM name is such).
- Label blocks are parsed once per distinct block. Exporters repeat one block per device on
  every series (dcgm-exporter: 8 blocks on a 550-line page), and prometheus_client parses
  each block character by character: two thirds of its time on such pages. Its module-level
  `parse_labels`, which every sample line goes through, is wrapped once in a memo that
  returns a fresh dict per call, so results are the same as without it.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client import parser as _parser

from gpufleet.text_limits import clip

# Distinct label blocks remembered: an 8-GPU page has tens, a MIG-partitioned one a few
# hundred; pods that come and go are forgotten oldest first.
LABEL_BLOCKS_REMEMBERED = 2048


@dataclass(frozen=True, slots=True)
class Sample:
    name: str
    labels: Mapping[str, str]
    value: int | float  # as written: an int where the text is one (DCGM int64 sentinels stay exact)


@dataclass(frozen=True)
class Page:
    samples: tuple[Sample, ...]
    malformed_lines: int = 0
    first_malformed: str | None = None  # "line 17: <text>", for an operator


def parse_page(text: str) -> Page:
    """Every sample of the page; malformed lines skipped and counted, never raised."""
    _memoise_label_blocks()
    try:
        return Page(tuple(_samples(text)))
    except ValueError:
        return _parse_line_by_line(text)


def _samples(text: str):
    for family in _parser.text_string_to_metric_families(text):
        renamed = family.type == "counter"
        for sample in family.samples:
            name = family.name if renamed and sample.name == family.name + "_total" \
                else sample.name
            yield Sample(name, sample.labels, sample.value)


def _parse_line_by_line(text: str) -> Page:
    samples: list[Sample] = []
    bad, first_bad = 0, None
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue  # HELP / TYPE only type a family; each line alone is untyped
        try:
            samples.extend(_samples(stripped))
        except ValueError:
            bad += 1
            if first_bad is None:
                first_bad = f"line {number}: {clip(stripped, 80)}"
    return Page(tuple(samples), bad, first_bad)


def _memoise_label_blocks() -> None:
    if getattr(_parser.parse_labels, "_gpufleet_memo", False):
        return
    parse = functools.lru_cache(maxsize=LABEL_BLOCKS_REMEMBERED)(_parser.parse_labels)

    def parse_labels(*args, **kwargs):
        return copy.copy(parse(*args, **kwargs))  # callers may change what they get

    parse_labels._gpufleet_memo = True  # type: ignore[attr-defined]
    _parser.parse_labels = parse_labels
