"""Deterministic identities for simulated hardware.

Every identifier a simulated node reports (machine id, GPU UUIDs, MIG UUIDs) is a hash of
(seed, hostname, what, index...), so the same fleet spec and seed give byte-identical
registrations on every run and every machine — a demo or benchmark restarted against the
same server re-registers the same nodes instead of inventing new ones — while a different
seed gives a disjoint fleet. Hashing (not one shared RNG stream) keeps a node's identity
independent of the nodes built before it.
"""

from __future__ import annotations

import hashlib
import random


def _digest(seed: int, parts: tuple[object, ...], size_bytes: int) -> bytes:
    text = "\x1f".join(str(p) for p in (seed, *parts))
    return hashlib.blake2b(text.encode(), digest_size=size_bytes).digest()


def _uuid_text(seed: int, parts: tuple[object, ...]) -> str:
    h = _digest(seed, parts, 16).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def gpu_uuid(seed: int, hostname: str, index: int) -> str:
    """NVML form: `GPU-` and 32 lowercase hex digits in 8-4-4-4-12 groups."""
    return "GPU-" + _uuid_text(seed, (hostname, "gpu", index))


def mig_uuid(seed: int, hostname: str, gpu_index: int, generation: int, profile_id: int,
             placement_start: int) -> str:
    """`MIG-<uuid>` (drivers >= R470). `generation` changes when instances are recreated,
    because the driver hands out a new UUID every time — a MIG UUID is never a key."""
    return "MIG-" + _uuid_text(seed, (hostname, "mig", gpu_index, generation, profile_id,
                                      placement_start))


def machine_id(seed: int, hostname: str) -> str:
    """/etc/machine-id form: 32 lowercase hex digits."""
    return _digest(seed, (hostname, "machine-id"), 16).hex()


def stable_key(seed: int, *parts: object) -> int:
    """A 64-bit key for one thing (a workload, a GPU's faults): the same on every run."""
    return int.from_bytes(_digest(seed, parts, 8), "big")


def rng(seed: int, *parts: object) -> random.Random:
    """A private RNG for one decision (e.g. one node's random MIG layouts)."""
    return random.Random(stable_key(seed, *parts))
