"""`gpufleet demo`: a server with embedded defaults and a simulated fleet in use."""

from gpufleet.demo.runner import run_demo

__all__ = ["run_demo"]
