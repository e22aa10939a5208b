"""Pure domain: concepts, rules and maths. No I/O, no database, no HTTP, no clock reads."""
