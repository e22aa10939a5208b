"""The fleet simulator (docs/design.md, "Layers"): simulated nodes for the agent and load.

`SimBackend` is a GPU backend for the agent that reports real hardware shapes (`shapes.py`)
deterministically from a seed; fleet specs (`fleet_spec.py`, the shipped
`default_fleet.yaml`) describe many nodes; `run_simulated_fleet` (`fleet_runner.py`) runs
a whole fleet of agents in one process against a server.
"""
