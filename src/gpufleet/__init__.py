"""gpufleet: self-hosted GPU fleet operations.

Who is using how many GPUs, where, and how well — and the GPU lifecycle from request to
chargeback as one system of record. See README.md and DESIGN.md for the map.
"""

__version__ = "0.1.0"
