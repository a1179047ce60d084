# CI at distribution scale (issue 23): the kernel matrix and the Ray test, each behind its own target.
#   make matrix        fetch MATRIX_CELLS (linux-image/-headers-REL:armhf) into $(CACHE)/ciscale-matrix once
#                      and check MATRIX_ARGS (default: drivers/net/can) on each cell; writes $(MATRIX_JSON)
#   make matrix-oot    the out-of-tree mode: the samples, built for 6.1.0-50-armmp, loaded on each cell
#   make test-cluster  install the cluster extra (Ray) and run the tests that start a local Ray instance
MATRIX_CELLS ?= 6.1.0-50-armmp 6.1.0-53-armmp 6.1.0-50-rt-armmp 6.1.0-53-rt-armmp
MATRIX_CACHE ?= $(CACHE)/ciscale-matrix
MATRIX_ARGS  ?= --module drivers/net/can
MATRIX_JSON  ?= build/matrix.json
MATRIX_JOBS  ?= 2
MATRIX_RUN    = $(ARMLOAD) matrix $(foreach c,$(MATRIX_CELLS),--cell $(c)) --cache $(CACHE) --jobs $(MATRIX_JOBS)

.PHONY: matrix matrix-oot matrix-fetch test-cluster

matrix-fetch:
	@for c in $(MATRIX_CELLS); do \
	  [ -d $(CACHE)/linux-image-$$c ] && [ -d $(CACHE)/linux-headers-$$c ] || \
	  scripts/fetch-debs.sh $(MATRIX_CACHE) linux-image-$$c:armhf linux-headers-$$c:armhf || exit 3; done

matrix: venv matrix-fetch
	@mkdir -p $(dir $(MATRIX_JSON))
	$(MATRIX_RUN) $(MATRIX_ARGS) --json $(MATRIX_JSON)

matrix-oot: venv matrix-fetch
	@mkdir -p $(dir $(MATRIX_JSON))
	$(MATRIX_RUN) --modules sample_modules --module '*-arm.ko' --json $(MATRIX_JSON:.json=-oot.json)

test-cluster: venv
	$(VENV)/bin/pip install -q -e '.[cluster]'
	$(PY) -m pytest -q -m cluster tests/ci/test_cluster.py
