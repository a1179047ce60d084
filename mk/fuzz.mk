# Fuzzing (issues 14 and 21). Both engines run niced; neither is part of `make test`.
#   make fuzz          coverage-guided (Atheris/libFuzzer) for FUZZ_TIME seconds (default 600) over
#                      armload.inputs.target (load, load --object, verify, report/explain, load and init in the
#                      booted kernel), corpus kept in $(CACHE)/fuzz-corpus (not committed),
#                      crashes in $(CACHE)/fuzz-crashes. Installs the optional extra `fuzz` (atheris)
#                      into the venv when it is missing.
#   make fuzz-campaign the deterministic mutation campaign alone: FUZZ_CASES (default 20000) cases,
#                      outcomes per class, internal errors, worst cost per case; exit 1 on any internal
#                      error, unexplained verify failure or budget overrun
#   FUZZ_SEED=N FUZZ_ARGS=...   another deterministic sequence / extra options (--no-measure, --json F)
# A crash found is minimised into tests/fuzz_crashes/ (make fuzz-minimise FUZZ_MIN=FILE), renamed for what it broke
# and committed;
# `make test` replays those and tests/fuzz_seeds/ without Atheris (tests/inputs/test_fuzz_replay.py).
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

fuzz-campaign: venv
	$(FUZZ_NICE) $(PY) -m armload.inputs.fuzz --cases $(FUZZ_CASES) --seed $(FUZZ_SEED) $(FUZZ_ARGS)

fuzz-minimise: venv
	$(PY) -m armload.inputs.target $(FUZZ_MIN) --minimise tests/fuzz_crashes/$(notdir $(FUZZ_MIN))

# Issue 21 item 3: the same mutated samples through the booted kernel's own load_module and through
# armload (`armload agree loader`, armload/agree/loader.py); rows both-accept / both-refuse / overread /
# kernel-crashed / kernel-only / armload-only.
KDIFF_CASES ?= 340
KDIFF_SEED  ?= 1
.PHONY: fuzz-kernel
fuzz-kernel: venv test-inputs
	$(FUZZ_NICE) $(ARMLOAD) agree loader --cases $(KDIFF_CASES) --seed $(KDIFF_SEED) \
	  --json $(CACHE)/fuzz-kernel-$(KDIFF_SEED).json
