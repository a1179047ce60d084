# armload — everything bootstraps its own virtualenv in .venv
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
ARMLOAD := $(VENV)/bin/armload
CACHE  ?= .cache
CROSS  ?= arm-linux-gnueabihf-

.DEFAULT_GOAL := demo
# Bytecode is cached (__pycache__, git-ignored) even where the environment says not to: without it every
# `armload` process compiles its modules again, and each pytest worker re-rewrites the package's asserts
# (the pytest11 entry point marks all of armload for rewriting), about 5 s a worker.
unexport PYTHONDONTWRITEBYTECODE
.PHONY: demo test test-inputs venv toolchain bench clean

# Stage-specific rules (samples, corpus, kallsyms) live in mk/*.mk. samples.mk comes first: other
# files (devtools.mk's `module`) name its variables as prerequisites, expanded as they are read.
-include mk/samples.mk $(filter-out mk/samples.mk,$(sort $(wildcard mk/*.mk)))

$(VENV)/.stamp: pyproject.toml setup.py armload/loader/_kernsort.c
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.stamp

# GNU binutils/gcc for ARM: the independent oracle in tests and the sample builder; a host cc
# builds the emulator's instruction counter (armload/emu/_counter.c).
toolchain:
	@command -v $(CROSS)objdump >/dev/null && command -v $(CROSS)gcc >/dev/null && command -v cc >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq >/dev/null 2>&1; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq binutils-arm-linux-gnueabihf gcc-arm-linux-gnueabihf gcc >/dev/null; \
	  else echo "need binutils-arm-linux-gnueabihf, gcc-arm-linux-gnueabihf and gcc (apt-get install as root)" >&2; exit 1; fi; }

# The main job on a bundled sample: load far from the kernel (so every kernel call goes through
# an LDR veneer) and report; then boot the real Debian kernel in Unicorn (fetched by package name
# into $(CACHE) once; the boot is cached in $(CACHE)/boot and says when it happens), load the
# sample with the kernel's own load_module, run its init and exit there, and check armload's image
# against the kernel's byte for byte. Module code runs only inside the booted kernel: without the
# image the demo stops after the load, saying why.
DEMO_VMLINUZ := $(CACHE)/linux-image-6.1.0-50-armmp/boot/vmlinuz-6.1.0-50-armmp
demo: venv
	$(ARMLOAD) load sample_modules/hello-arm.ko --kernel sample_modules/Module.symvers --placement vmalloc
	@echo
	@if [ -f $(DEMO_VMLINUZ) ] || scripts/fetch-debs.sh $(CACHE) linux-image-6.1.0-50-armmp:armhf; then \
	  echo "$(ARMLOAD) run sample_modules/hello-arm.ko --kernel $(DEMO_VMLINUZ) --kernel sample_modules/Module.symvers --exit"; \
	  $(ARMLOAD) run sample_modules/hello-arm.ko --kernel $(DEMO_VMLINUZ) --kernel sample_modules/Module.symvers --exit; \
	else \
	  echo "demo: the Debian kernel image could not be fetched (linux-image-6.1.0-50-armmp:armhf): module code runs" \
	       "only inside the booted kernel, so the run part of the demo cannot happen" >&2; exit 1; \
	fi

# Real Debian inputs for the tests (kernel image, headers, kbuild): fetched once into $(CACHE).
# They are oracles: failing to fetch them fails the build. Only a developer who says so
# (ARMLOAD_OFFLINE=1, ignored when CI=true) goes on, and the tests that need them then skip.
export ARMLOAD_OFFLINE
# KERNEL=RELEASE fetches that Debian armhf kernel instead (image, modules, headers with its
# Module.symvers): make test-inputs KERNEL=6.12.107+deb12-armmp (or 6.1.0-50-rt-armmp, -armmp-lpae)
# Without KERNEL, the test suite's inputs: 6.1 armmp (with kbuild, for the samples) and the other kernels
# the tests boot and load into (tests/kernel/test_kernels.py, tests/emu/test_lpae.py, tests/ci/test_matrix.py),
# with the common headers and kbuild each one's samples are built with (mk/samples-kernels.mk).
KERNEL ?=
TEST_KERNELS := $(KSAMPLES_KERNELS)
test-inputs:
	@scripts/fetch-debs.sh $(CACHE) $(if $(KERNEL),linux-image-$(KERNEL):armhf linux-headers-$(KERNEL):armhf,\
	  linux-image-6.1.0-50-armmp:armhf linux-headers-6.1.0-50-armmp:armhf linux-kbuild-6.1=6.1.176-1 \
	  $(foreach k,$(TEST_KERNELS),linux-image-$(k):armhf linux-headers-$(k):armhf) $(KSAMPLES_EXTRA_DEBS)) || { \
	  if [ "$(ARMLOAD_OFFLINE)" = 1 ] && [ "$$CI" != true ]; then \
	    echo "!!! ARMLOAD_OFFLINE=1: Debian armhf packages not fetched; the tests that need them will SKIP !!!" >&2; \
	  else echo "test-inputs: could not fetch the Debian armhf packages (set ARMLOAD_OFFLINE=1 to run without them)" >&2; \
	    exit 1; fi; }

# pytest exit 5 (no test collected) is a failure too, said in words. One pytest-xdist worker per core
# (JOBS=1 runs them in one process); the boot snapshot is shared through $(CACHE)/boot.
JOBS ?= auto
test: venv toolchain devtools browser test-inputs samples-ktree samples-kernels-test
	@$(PY) -m pytest -q -n $(JOBS) || { st=$$?; [ $$st = 5 ] && echo "test: pytest collected no tests" >&2; exit $$st; }

bench: venv
	$(ARMLOAD) bench all

clean:
	rm -rf $(VENV) build *.egg-info
