"""The one compiled part of armload: lib/sort.c's heapsorts for exact REL tie order (armload/loader/_kernsort.c).

Optional: if it cannot be built, armload uses the pure-Python transcription in armload/loader/plt.py (same
permutation, ~100x slower on large tables with mixed-addend ties). The source's SHA-256 is compiled in
so a build left over from an older _kernsort.c is detected and not used.
"""
import hashlib
import os

from setuptools import Extension, setup

SRC = os.path.join("armload", "loader", "_kernsort.c")
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), SRC), "rb") as f:
    SHA = hashlib.sha256(f.read()).hexdigest()

setup(ext_modules=[Extension("armload.loader._kernsort", [SRC], optional=True,
                             define_macros=[("KERNSORT_SOURCE_SHA256", f'"{SHA}"')],
                             extra_compile_args=["-O2"])])
