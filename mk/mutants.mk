# Mutation testing (mutmut) of the modules that must be bit-exact against the kernel:
# armload/loader/relocate.py, plt.py, elf.py, verify.py and armload/probes/booted.py, insn.py, table.py
# (configuration: mk/mutants.cfg).
#   make mutants          stage the tree in $(MUTANTS_DIR), run mutmut there on all cores
#                         (each mutant runs only the fast tests that execute the mutated
#                         function), then print the kill rate per module and the survivors
#   make mutants-report   the report of the last run only
#   MUTANTS='armload.loader.plt*'  only these mutants (mutmut name patterns), e.g. one module
# A full run is long on 2 cores (the relocation driver's mutants run ~500 tests each);
# reruns in the same $(MUTANTS_DIR) reuse the verdicts of unchanged mutants.
MUTANTS_DIR  ?= build/mutants
MUTANTS_JOBS ?= $(shell nproc 2>/dev/null || echo 2)
MUTMUT       := $(abspath $(VENV))/bin/mutmut
MUTANTS      ?=

.PHONY: mutants mutants-report

$(VENV)/.stamp-mutants: pyproject.toml | venv
	$(VENV)/bin/pip install -q -e '.[test,mutants]'
	touch $@

# The compiled sort (built by make venv, ignored by git) is staged too: test_plt requires it, and the
# editable install's finder only maps armload's direct children back to this tree, not armload.loader.*.
mutants: $(VENV)/.stamp-mutants toolchain test-inputs
	mkdir -p $(MUTANTS_DIR)
	rm -rf $(MUTANTS_DIR)/armload $(MUTANTS_DIR)/tests    # a fresh stage (mutmut's verdicts live in mutants/)
	{ git ls-files --cached --others --exclude-standard armload tests sample_modules scripts benchmarks setup.py pyproject.toml; \
	  ls armload/loader/_kernsort*.so 2>/dev/null; } | tar -cf - -T - | tar -xf - -C $(MUTANTS_DIR)
	cp mk/mutants.cfg $(MUTANTS_DIR)/setup.cfg
	cd $(MUTANTS_DIR) && CACHE=$(abspath .cache) $(MUTMUT) run --max-children $(MUTANTS_JOBS) $(MUTANTS) \
	  > mutmut-run.log 2>&1 || \
	  { tail -c 3000 mutmut-run.log >&2; exit 1; }
	$(MAKE) --no-print-directory mutants-report

mutants-report:
	cd $(MUTANTS_DIR) && $(MUTMUT) results --all true > mutmut-results.txt
	$(PY) scripts/mutants_report.py $(MUTANTS_DIR)/mutmut-results.txt
