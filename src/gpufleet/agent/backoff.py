"""Capped exponential backoff with jitter, for retrying an unreachable server.

Jitter matters at fleet scale: after a server restart thousands of agents retry at once,
and without it they would keep arriving in synchronised waves. Each delay is drawn
uniformly from [cap / 2, cap] where cap = min(max_s, initial_s * 2**attempt), so retries
spread out but never come faster than half the intended pace.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass
class Backoff:
    initial_s: float = 1.0
    max_s: float = 60.0
    rng: random.Random = field(default_factory=random.Random)
    attempt: int = 0

    def next_delay_s(self) -> float:
        """The delay before the next retry; each call backs off further."""
        cap_s = min(self.max_s, self.initial_s * 2 ** min(self.attempt, 32))
        self.attempt += 1
        return self.rng.uniform(cap_s / 2, cap_s)

    def reset(self) -> None:
        """Call after a success: the next failure starts again from `initial_s`."""
        self.attempt = 0
