"""Wire schemas: the JSON the server, agents and CLI exchange. Plain pydantic, no I/O."""
