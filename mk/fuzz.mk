# Fuzzing (issues 14 and 21). Both engines run niced; neither is part of `make test`.
#   make fuzz          coverage-guided (Atheris/libFuzzer) for FUZZ_TIME seconds (default 600) over
#                      armload.inputs.target (load, load --object, verify, report/explain, init with a
#                      20,000-instruction budget), corpus kept in $(CACHE)/fuzz-corpus (not committed),
#                      crashes in $(CACHE)/fuzz-crashes; then the deterministic campaign below with
#                      FUZZ_CASES cases. Installs the optional extra `fuzz` (atheris) into the venv.
#   make fuzz-campaign the deterministic mutation campaign alone: FUZZ_CASES (default 20000) cases,
#                      outcomes per class, internal errors, worst cost per case; exit 1 on any internal
#                      error, unexplained verify failure or budget overrun
#   FUZZ_SEED=N FUZZ_ARGS=...   another deterministic sequence / extra options (--no-measure, --json F)
# A crash found is minimised (FUZZ_MIN=FILE make fuzz-minimise) and committed under tests/fuzz_crashes/;
# `make test` replays those and tests/fuzz_seeds/ without Atheris (tests/test_fuzz_replay.py).
FUZZ_TIME  ?= 600
FUZZ_CASES ?= 20000
FUZZ_SEED  ?= 1
FUZZ_ARGS  ?= --big --run --json $(CACHE)/fuzz-$(FUZZ_SEED).json
FUZZ_NICE  ?= nice -n 10

.PHONY: fuzz fuzz-campaign fuzz-deps fuzz-minimise

fuzz-deps: venv
	@$(PY) -c 'import atheris' 2>/dev/null || $(VENV)/bin/pip install -q -e '.[fuzz]'

fuzz: fuzz-deps
	$(FUZZ_NICE) $(PY) -m armload.inputs.atheris_fuzz --time $(FUZZ_TIME) --corpus $(CACHE)/fuzz-corpus \
	  --crashes $(CACHE)/fuzz-crashes
	$(FUZZ_NICE) $(PY) -m armload.inputs.fuzz --cases $(FUZZ_CASES) --seed $(FUZZ_SEED) $(FUZZ_ARGS)

fuzz-campaign: venv
	$(FUZZ_NICE) $(PY) -m armload.inputs.fuzz --cases $(FUZZ_CASES) --seed $(FUZZ_SEED) $(FUZZ_ARGS)

fuzz-minimise: fuzz-deps
	$(PY) -m armload.inputs.atheris_fuzz --corpus $(CACHE)/fuzz-min-corpus -minimize_crash=1 -runs=2000 $(FUZZ_MIN)
