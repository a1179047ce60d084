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

# The booted Debian kernel's own register_kprobe as the oracle of armload's kprobes verdicts
# (`armload agree kprobes`, armload/agree/kprobes.py): the 1,447 ARM encodings of
# tests/probes/test_kprobe_decode.py plus one word per decode-table entry, written into a loaded module's text and registered as disabled kprobes;
# the kernel's kprobe_blacklist list and __jump_table against armload's (probes/ktext.py). About 6 s.
PROBES_AGREE_JSON := $(PROBES_RESULTS)/probes-agree.json

.PHONY: probes-agree
probes-agree: venv test-inputs
	nice -n 10 $(ARMLOAD) agree kprobes --json $(PROBES_AGREE_JSON)
