"""Every benchmark, run by `armload bench WHAT`: loader, plt, emulate, kallsyms, kallsyms-arm,
probes, task-rename (attach). Targets live here, never in timed unit tests."""
