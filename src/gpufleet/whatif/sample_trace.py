"""The sample workload that ships with gpufleet: `gpufleet whatif sample --fleet-spec default`.

Three busy days of requests shaped like the demo fleet's users (docs/whatif.md, "The sample
workload"): 8-GPU NVLink training runs on H100s, 4-GPU fine-tuning on A100s, single-GPU
inference on L40S, MIG notebooks and shared fractions, arriving through the day and leaving
after hours to days. It is generated here, from a seed, so that anyone can see what it
holds and make a bigger one; `data/sample-trace.jsonl` is this module's output, and a test
keeps the two equal.

    python -c 'from gpufleet.whatif.sample_trace import write_sample; write_sample()'
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from importlib import resources

SAMPLE_NAME = "sample"
SAMPLE_SEED = 20261125
SAMPLE_DAYS = 3
HOUR_S = 3600
DAY_S = 24 * HOUR_S


@dataclass(frozen=True)
class _Kind:
    """One kind of request: how often it comes and what it asks for."""

    name: str
    per_day: float
    task: dict
    hours: tuple[float, float]  # how long it stays: uniform between these


_KINDS = (
    _Kind("pretrain", 36, {"kind": "whole", "count": 8, "nvlink": True,
                          "models": ["H100-80GB"], "cpu_milli": 96_000,
                          "memory_mib": 1_048_576}, (24, 120)),
    _Kind("finetune", 60, {"kind": "whole", "count": 4, "same_node": True,
                           "models": ["A100-80GB"], "cpu_milli": 32_000,
                           "memory_mib": 262_144}, (4, 48)),
    _Kind("infer", 40, {"kind": "whole", "count": 1, "models": ["L40S-48GB"],
                        "cpu_milli": 8_000, "memory_mib": 65_536}, (12, 96)),
    _Kind("notebook", 200, {"kind": "mig", "mig_profile": "1g.10gb", "cpu_milli": 4_000,
                           "memory_mib": 32_768}, (1, 10)),
    _Kind("eval", 40, {"kind": "mig", "mig_profile": "3g.40gb", "cpu_milli": 8_000,
                      "memory_mib": 65_536}, (2, 12)),
    _Kind("shared", 80, {"kind": "shared", "milli": 500, "count": 1, "cpu_milli": 2_000,
                         "memory_mib": 16_384}, (2, 24)),
)


def sample_trace(seed: int = SAMPLE_SEED, days: int = SAMPLE_DAYS) -> list[dict]:
    """The trace's tasks in arrival order: Poisson arrivals per kind, twice as many in
    working hours (09:00–18:00) as at night."""
    rng = random.Random(seed)
    tasks: list[tuple[float, dict]] = []
    for kind in _KINDS:
        at_s = 0.0
        number = 0
        while True:
            working = 9 * HOUR_S <= at_s % DAY_S < 18 * HOUR_S
            rate_per_s = kind.per_day / DAY_S * (2.0 if working else 0.5)
            at_s += rng.expovariate(rate_per_s)
            if at_s >= days * DAY_S:
                break
            number += 1
            stay_s = rng.uniform(*kind.hours) * HOUR_S
            tasks.append((at_s, {"name": f"{kind.name}-{number}", "arrival_s": round(at_s),
                                 "departure_s": round(at_s + stay_s), **kind.task}))
    tasks.sort(key=lambda pair: (pair[0], pair[1]["name"]))
    return [task for _, task in tasks]


def shipped_sample():
    """The shipped sample file, as a context manager giving its path on disk."""
    return resources.as_file(resources.files("gpufleet.whatif") / "data" / "sample-trace.jsonl")


def render(tasks: list[dict]) -> str:
    return "".join(json.dumps(task) + "\n" for task in tasks)


def write_sample(path: str = "src/gpufleet/whatif/data/sample-trace.jsonl") -> None:
    """Regenerate the shipped file (run from the repository's root)."""
    with open(path, "w") as out:
        out.write(render(sample_trace()))
