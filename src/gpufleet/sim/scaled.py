"""Fleet specs of any size, for benchmarks (`scaled_spec(12_500)`: 100,000 GPUs).

Only 8-GPU shapes are used, so `nodes` nodes always carry exactly `8 * nodes` GPUs, spread
over the default fleet's three environments in the default fleet's proportions.
"""

from __future__ import annotations

from .fleet_spec import FleetSpec, load_default_spec

GPUS_PER_NODE = 8

# (environment, shape, hostname prefix, share of the nodes)
_MIX = (
    ("azure-koreacentral", "azure-nd-h100-v5", "ndh100v5", 0.45),
    ("onprem-hpc", "dgx-h100", "dgx-h100", 0.20),
    ("onprem-hpc", "hgx-a100", "hgx-a100", 0.15),
    ("onprem-hpc", "l40s-8", "inf-l40s8", 0.10),
    ("onprem-slicing", "mig-h100", "mig-h100", 0.05),
    ("onprem-slicing", "mig-a100", "mig-a100", 0.05),
)


def scaled_spec(nodes: int, seed: int = 0) -> FleetSpec:
    """`nodes` nodes x 8 GPUs; the first group takes the rounding remainder."""
    if nodes < 1:
        raise ValueError("a fleet needs at least one node")
    counts = [int(nodes * share) for *_, share in _MIX]
    counts[0] += nodes - sum(counts)
    groups = [
        {"environment": env, "shape": shape, "count": count, "hostname_prefix": prefix,
         "rack_size": 16}
        for (env, shape, prefix, _), count in zip(_MIX, counts, strict=True) if count > 0
    ]
    environments = [env.model_dump() for env in load_default_spec().environments]
    return FleetSpec.model_validate(
        {"seed": seed, "environments": environments, "node_groups": groups})
