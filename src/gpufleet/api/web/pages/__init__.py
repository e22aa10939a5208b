"""One module a dashboard page: the service calls behind its sections, and its route."""
