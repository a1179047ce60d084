# kallsyms (issue 5): real Debian 6.1 armmp kernel image, its decoded table, the benchmark.
KALLSYMS_IMAGE   := $(CACHE)/linux-image-6.1.0-50-armmp/boot/vmlinuz-6.1.0-50-armmp
KALLSYMS_SYMVERS := $(CACHE)/linux-headers-6.1.0-50-armmp/usr/src/linux-headers-6.1.0-50-armmp/Module.symvers

.PHONY: kallsyms-inputs kallsyms-map bench-kallsyms test-kallsyms

$(KALLSYMS_IMAGE):
	scripts/fetch-debs.sh $(CACHE) linux-image-6.1.0-50-armmp:armhf

$(KALLSYMS_SYMVERS):
	scripts/fetch-debs.sh $(CACHE) linux-headers-6.1.0-50-armmp:armhf

kallsyms-inputs: $(KALLSYMS_IMAGE) $(KALLSYMS_SYMVERS)

# System.map decoded from the image alone (Debian ships only a stub System.map)
$(CACHE)/System.map-6.1.0-50-armmp.kallsyms: $(KALLSYMS_IMAGE) | venv
	$(ARMLOAD) kallsyms $(KALLSYMS_IMAGE) --system-map $@

kallsyms-map: $(CACHE)/System.map-6.1.0-50-armmp.kallsyms

bench-kallsyms: kallsyms-inputs venv
	$(PY) benchmarks/bench_kallsyms.py $(KALLSYMS_IMAGE)

test-kallsyms: kallsyms-inputs venv
	$(PY) -m pytest -q tests/kernel/test_kallsyms.py
