"""The node agent: discovers GPUs through a backend, registers, heartbeats (DESIGN.md §5).

It imports the domain and the wire schemas, never the server.
"""
