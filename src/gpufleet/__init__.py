"""gpufleet: self-hosted GPU fleet operations.

Who is using how many GPUs, where, and how well — and the GPU lifecycle from request to
chargeback as one system of record. See README.md and docs/design.md for the map.

For workloads: `gpufleet.tag(allocation=..., model=..., dataset=...)` names the work of the
calling process for the node agent (gpufleet/tagging.py, docs/attribution.md). This import
stays light — the standard library only, nothing of the server — so any training script
can afford it; `tag` and `untag` are loaded on first use, so the `gpufleet` command, which
imports this package first, does not pay for them either.
"""

from __future__ import annotations

from typing import Any

__all__ = ["tag", "untag"]
__version__ = "0.1.0"

_TAGGING = frozenset(__all__)


def __getattr__(name: str) -> Any:
    if name in _TAGGING:
        from gpufleet import tagging

        return getattr(tagging, name)
    raise AttributeError(f"module 'gpufleet' has no attribute {name!r}")
