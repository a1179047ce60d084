# A few samples built against every other Debian armhf kernel's headers (issue 31), for the smoke
# test that runs each build in its own booted kernel (tests/kernel/test_samples_kernels.py).
#   make samples-kernels   build them into build/samples-kernels/RELEASE/NAME/NAME.ko
# (outside sample_modules/: tools that scan it, `armload matrix --modules sample_modules` in
# tests/ci/test_matrix.py, would find a second module of each name)
# Nothing here is committed: the rule is. 6.1.0-50-armmp's builds are the committed samples
# (mk/samples.mk). Each kernel's kbuild tree is merged apart from the others, in
# $(CACHE)/ktrees/RELEASE (mkktree.sh reads which common tree and kbuild the headers name).

KSAMPLES_KERNELS := 6.1.0-50-armmp-lpae 6.1.0-50-rt-armmp 6.12.107+deb12-armmp 6.12.107+deb12-armmp-lpae \
                    6.12.107+deb12-rt-armmp
# hello: the smallest; exporter/importer: an exported function and its CRC in the importer's
# __versions; ringdev: parameters, exported functions, a misc device with file operations; sanbugs:
# the sanitizers' bug classes (tests/kernel/test_sanitize_kernels.py).
KSAMPLES_NAMES   := hello exporter importer ringdev sanbugs
KSAMPLES_BUILD   := build/samples-kernels
# What each kernel's linux-headers-RELEASE:armhf needs beside it (its Debian Depends): the common
# tree and the kbuild host tools, at the headers' version.
KSAMPLES_DEBS_6.1.0-50-armmp-lpae   := linux-headers-6.1.0-50-common $(SAMPLES_KBUILD)
KSAMPLES_DEBS_6.1.0-50-rt-armmp     := linux-headers-6.1.0-50-common-rt $(SAMPLES_KBUILD)
KSAMPLES_KBUILD_6.12 := linux-kbuild-6.12.107+deb12=6.12.107-1~deb12u1
KSAMPLES_DEBS_6.12.107+deb12-armmp  := linux-headers-6.12.107+deb12-common $(KSAMPLES_KBUILD_6.12)
KSAMPLES_DEBS_6.12.107+deb12-armmp-lpae := linux-headers-6.12.107+deb12-common $(KSAMPLES_KBUILD_6.12)
KSAMPLES_DEBS_6.12.107+deb12-rt-armmp := linux-headers-6.12.107+deb12-common-rt $(KSAMPLES_KBUILD_6.12)
KSAMPLES_DEBS    := $(foreach k,$(KSAMPLES_KERNELS),linux-headers-$(k):armhf $(KSAMPLES_DEBS_$(k)))
# what make test-inputs adds to the kernels' images and headers (once each)
KSAMPLES_EXTRA_DEBS := $(sort $(foreach k,$(KSAMPLES_KERNELS),$(KSAMPLES_DEBS_$(k))))
KSAMPLES_KOS     := $(foreach k,$(KSAMPLES_KERNELS),$(foreach n,$(KSAMPLES_NAMES),$(KSAMPLES_BUILD)/$(k)/$(n)/$(n).ko))

.PHONY: samples-kernels samples-kernels-test
samples-kernels: $(KSAMPLES_KOS)

# `make test`'s: a developer who opted out (ARMLOAD_OFFLINE=1, never with CI=true) goes on
# without the builds, and the smoke then skips naming them; anyone else stops here.
samples-kernels-test:
	@$(MAKE) --no-print-directory samples-kernels || { \
	  if [ "$(ARMLOAD_OFFLINE)" = 1 ] && [ "$$CI" != true ]; then \
	    echo "!!! ARMLOAD_OFFLINE=1: the samples were not built against every kernel; their smoke will SKIP !!!" >&2; \
	  else exit 1; fi; }

# $(call ksample_tree,release): that kernel's merged tree (stamp), fetched first.
define ksample_tree
$(CACHE)/ktrees/$(1)/.stamp-$(1): $(SAMPLE_DIR)/mkktree.sh | toolchain
	scripts/fetch-debs.sh $(CACHE) linux-headers-$(1):armhf $(KSAMPLES_DEBS_$(1))
	rm -f $$@
	$(SAMPLE_DIR)/mkktree.sh $(CACHE) $(1) $(CACHE)/ktrees/$(1)
endef
$(foreach k,$(KSAMPLES_KERNELS),$(eval $(call ksample_tree,$(k))))

# $(call ksample_ko,release,name): as mk/samples.mk builds the ARM samples, in that kernel's tree;
# importer gets the exporter's Module.symvers of the same kernel.
define ksample_ko
$(KSAMPLES_BUILD)/$(1)/$(2)/$(2).ko: $(wildcard $(SAMPLE_DIR)/src/$(2)/*) $(CACHE)/ktrees/$(1)/.stamp-$(1) $(if $(filter importer,$(2)),$(KSAMPLES_BUILD)/$(1)/exporter/exporter.ko)
	rm -rf $(KSAMPLES_BUILD)/$(1)/$(2)
	mkdir -p $(KSAMPLES_BUILD)/$(1)/$(2)
	cp $(SAMPLE_DIR)/src/$(2)/* $(KSAMPLES_BUILD)/$(1)/$(2)/
	$$(MAKE) -C $(abspath $(CACHE))/ktrees/$(1)/usr/src/linux-headers-$(1) M=$(abspath $(KSAMPLES_BUILD)/$(1)/$(2)) \
	  ARCH=arm CROSS_COMPILE=$(CROSS) \
	  $(if $(filter importer,$(2)),KBUILD_EXTRA_SYMBOLS=$(abspath $(KSAMPLES_BUILD)/$(1)/exporter/Module.symvers)) \
	  modules
endef
$(foreach k,$(KSAMPLES_KERNELS),$(foreach n,$(KSAMPLES_NAMES),$(eval $(call ksample_ko,$(k),$(n)))))
