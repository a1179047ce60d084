# armload — everything bootstraps its own virtualenv in .venv
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
ARMLOAD := $(VENV)/bin/armload
CACHE  ?= .cache
CROSS  ?= arm-linux-gnueabihf-

.DEFAULT_GOAL := demo
.PHONY: demo test venv toolchain bench clean

# Stage-specific rules (samples, corpus, kallsyms) live in mk/*.mk
-include mk/*.mk

$(VENV)/.stamp: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.stamp

# GNU binutils/gcc for ARM: the independent oracle in tests and the sample builder.
toolchain:
	@command -v $(CROSS)objdump >/dev/null && command -v $(CROSS)gcc >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq >/dev/null 2>&1; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq binutils-arm-linux-gnueabihf gcc-arm-linux-gnueabihf >/dev/null; \
	  else echo "need binutils-arm-linux-gnueabihf and gcc-arm-linux-gnueabihf (apt-get install as root)" >&2; exit 1; fi; }

demo: venv
	$(ARMLOAD) load sample_modules/hello-arm.ko --kernel sample_modules/Module.symvers

test: venv toolchain
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) build *.egg-info
