# The fuzz campaign (issue 14): deterministic mutations of the samples through load, verify and run.
#   make fuzz                    FUZZ_CASES (default 20000) cases, prints cases, outcomes per class,
#                                internal errors, the worst cost per case; exit 1 on any internal error,
#                                unexplained verify failure or budget overrun
#   FUZZ_SEED=N FUZZ_ARGS=...    another deterministic sequence / extra options (--no-measure, --json F)
# tests/test_fuzz.py runs 360 of these cases in the ordinary test suite.
FUZZ_CASES ?= 20000
FUZZ_SEED  ?= 1
FUZZ_ARGS  ?= --big --run --json $(CACHE)/fuzz-$(FUZZ_SEED).json

.PHONY: fuzz

fuzz: venv
	$(PY) -m armload.inputs.fuzz --cases $(FUZZ_CASES) --seed $(FUZZ_SEED) $(FUZZ_ARGS)
