# probes (issue 24): the seeds' benchmarks on 32-bit ARM 6.1; slow ones write their results here
# (committed; `make bench-probes-check` compares a fresh run's deterministic counts with them).
PROBES_RESULTS := benchmarks/results

.PHONY: bench-probes bench-probes-check

bench-probes: venv
	nice -n 10 $(ARMLOAD) bench probes --many --json > $(PROBES_RESULTS)/probes.json
	nice -n 10 $(ARMLOAD) bench task-rename --json > $(PROBES_RESULTS)/task-rename.json
	nice -n 10 $(ARMLOAD) bench kallsyms-arm --json > $(PROBES_RESULTS)/kallsyms-arm.json

bench-probes-check: venv
	$(PY) benchmarks/check_probes_results.py $(PROBES_RESULTS)
