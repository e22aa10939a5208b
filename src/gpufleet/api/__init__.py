"""HTTP adapter: parse, authorise, call a service, render. No state changes of its own."""
