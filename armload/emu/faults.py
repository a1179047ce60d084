"""Exceptions a model raises to end the run with a report (never to return a made-up value)."""
from __future__ import annotations


class ModelFault(Exception):
    """The simulated kernel hit a condition the real one reports as an oops, BUG or panic."""

    def __init__(self, message: str, kind: str = "bug"):
        super().__init__(message)
        self.kind = kind


class Unmodelled(Exception):
    """The run reached something armload does not simulate: stop and say so."""

    def __init__(self, name: str, message: str):
        super().__init__(message)
        self.name = name
