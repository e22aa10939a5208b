"""One error for every bad input a what-if can meet (a file, a line, a model, a policy)."""


class WhatifError(ValueError):
    """Bad input; `str(error)` is one line naming the file, the line and the problem."""
