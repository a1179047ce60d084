"""Inputs armload makes itself: synthetic modules of any size (`synth`) and mutated samples for
the fuzz campaign (`fuzz`)."""
