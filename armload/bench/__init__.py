"""Every benchmark, run by `armload bench WHAT`: loader, plt, emulate, coverage, kallsyms,
kallsyms-arm, probes. Targets live here, never in timed unit tests."""
