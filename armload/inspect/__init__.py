"""Human views of a load: the load report, disassembly, per-relocation explanations, pictures
and the HTML report. Reads what the loader produced; never changes it."""
