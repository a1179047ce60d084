# The real-kernel oracle (issue 20, item 6; per kernel: issue 31, item 5): the same Debian kernel booted
# in QEMU, insmod on a list.
#   make qemu-oracle [KERNEL=RELEASE]   boot the Debian kernel in qemu-system-arm (-M virt, cortex-a15,
#                       -smp 1) with a busybox initramfs holding the kernel's whole module tree, insmod each
#                       listed module (dependencies first), and write $(QEMU_RESULTS) (committed: CI compares
#                       without booting QEMU). KERNEL is any kernel `make test-inputs KERNEL=RELEASE` fetched;
#                       without it 6.1.0-50-armmp, whose list and results are tests/oracles/qemu/modules.txt
#                       and results.json; every other kernel's are in tests/oracles/qemu/RELEASE/ (6.1.0-50-armmp-lpae,
#                       6.12.107+deb12-armmp). Installs qemu-system-arm and kmod (depmod) when missing, as
#                       `make toolchain` does for binutils. Slow: about 30 minutes for 6.1's 707 modules, about
#                       15 each for the 250 of lpae and 6.12 (2 cores); resumes an interrupted run from
#                       $(QEMU_WORK)/progress.jsonl (delete it to start over).
#   make qemu-compare-booted [KERNEL=RELEASE]   run `armload check` (its default path: init inside the
#                       booted kernel) on the listed modules (and their dependencies) with that kernel's image
#                       and print the agreement of its init verdicts with $(QEMU_RESULTS) (`armload agree
#                       verdicts`); exit 1 below QEMU_MIN_AGREEMENT_BOOTED percent (99 for 6.1 armmp, 97 for
#                       the others: issue 31).
# The oracle (tests/oracles/qemu/) is stdlib Python, a static C helper and busybox: it shares no code
# with armload. Not part of `make test`.

QEMU_DIR      := tests/oracles/qemu
QEMU_KREL     := $(or $(KERNEL),$(CORPUS_KREL))
QEMU_KDIR     := $(if $(filter $(CORPUS_KREL),$(QEMU_KREL)),$(QEMU_DIR),$(QEMU_DIR)/$(QEMU_KREL))
QEMU_LIST     ?= $(QEMU_KDIR)/modules.txt
QEMU_RESULTS  ?= $(QEMU_KDIR)/results.json
QEMU_IMAGE    := $(CACHE)/linux-image-$(QEMU_KREL)
QEMU_TREE     := $(QEMU_IMAGE)/lib/modules/$(QEMU_KREL)/kernel
QEMU_VMLINUZ  := $(QEMU_IMAGE)/boot/vmlinuz-$(QEMU_KREL)
QEMU_SYMVERS  := $(CACHE)/linux-headers-$(QEMU_KREL)/usr/src/linux-headers-$(QEMU_KREL)/Module.symvers
QEMU_VERMAGIC := $(QEMU_KREL) SMP mod_unload modversions ARMv7 p2v8 
QEMU_CACHE    := $(CACHE)/qemu-oracle
QEMU_BUILD    ?= build/qemu-oracle
QEMU_WORK     ?= $(QEMU_BUILD)/$(QEMU_KREL)
QEMU_BUSYBOX  := $(QEMU_CACHE)/busybox-static/bin/busybox
QEMU_DEPMOD   := $(QEMU_CACHE)/depmod/lib/modules/$(QEMU_KREL)
QEMU_MODH     := $(QEMU_BUILD)/modh
QEMU_BATCH    ?= 100
QEMU_ARGS     ?=
QEMU_COMPARE_JOBS  ?= 2
QEMU_COMPARE_ARGS  ?= --timeout 7200     # test_bpf is 5.1 G instructions: beyond check's 600 s safety net on a loaded machine

.PHONY: qemu-oracle qemu-tools qemu-inputs

qemu-tools:
	@command -v qemu-system-arm >/dev/null && command -v depmod >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq >/dev/null 2>&1; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends qemu-system-arm kmod >/dev/null; \
	  else echo "need qemu-system-arm and kmod (apt-get install as root)" >&2; exit 1; fi; }

# The kernel's image, modules and Module.symvers: fetched by `make test-inputs KERNEL=...`.
qemu-inputs:
	@test -f $(QEMU_VMLINUZ) -a -d $(QEMU_TREE) -a -f $(QEMU_SYMVERS) || { \
	  echo "qemu: kernel $(QEMU_KREL) is not in $(CACHE): run make test-inputs KERNEL=$(QEMU_KREL)" >&2; exit 1; }
	@test -f $(QEMU_LIST) || { echo "qemu: no module list $(QEMU_LIST) (make_list.py writes one)" >&2; exit 1; }

$(QEMU_BUSYBOX):
	@scripts/fetch-debs.sh $(QEMU_CACHE) busybox-static:armhf
	@test -x $@

# kmod's depmod computes modules.dep for the tree (the Debian package ships none: its postinst
# runs depmod); its own folder links to the unpacked tree, which is never written.
$(QEMU_DEPMOD)/modules.dep: | qemu-inputs qemu-tools
	@mkdir -p $(QEMU_DEPMOD)
	@ln -sfn $(abspath $(QEMU_TREE)) $(QEMU_DEPMOD)/kernel
	@cp $(QEMU_IMAGE)/lib/modules/$(QEMU_KREL)/modules.order $(QEMU_IMAGE)/lib/modules/$(QEMU_KREL)/modules.builtin* $(QEMU_DEPMOD)/
	depmod -b $(abspath $(QEMU_CACHE))/depmod $(QEMU_KREL)

$(QEMU_MODH): $(QEMU_DIR)/modh.c | toolchain
	@mkdir -p $(@D)
	$(CROSS)gcc -O2 -static -o $@ $<

qemu-oracle: qemu-tools qemu-inputs $(QEMU_BUSYBOX) $(QEMU_DEPMOD)/modules.dep $(QEMU_MODH)
	@mkdir -p $(dir $(QEMU_RESULTS))
	$(PYTHON) $(QEMU_DIR)/run.py --release $(QEMU_KREL) --kernel $(QEMU_VMLINUZ) --tree $(QEMU_TREE) \
	  --busybox $(QEMU_BUSYBOX) --modh $(QEMU_MODH) --depmod-dir $(QEMU_DEPMOD) --list $(QEMU_LIST) \
	  --out $(QEMU_RESULTS) --work $(QEMU_WORK) --batch $(QEMU_BATCH) $(QEMU_ARGS)

# armload on the oracle's modules (each after its dependencies, as `check --module` does), then the
# comparison: check's default path with a vmlinuz (init inside the Debian kernel booted in Unicorn: its own
# load_module and init, request_module served from the tree). armload's summary goes to $(QEMU_BOOTED_LOG),
# the agreement table to stdout; exit 1 below QEMU_MIN_AGREEMENT_BOOTED percent. The
# self-tests' budget (test_bpf is 5.1 G instructions) is the per-load budget here.
QEMU_BOOTED_JSON ?= $(QEMU_WORK)/armload-check-booted.json
QEMU_BOOTED_LOG  ?= $(QEMU_WORK)/armload-check-booted.txt
QEMU_MIN_AGREEMENT_BOOTED ?= $(if $(filter $(CORPUS_KREL),$(QEMU_KREL)),99,97)
QEMU_BOOTED_BUDGET ?= 6000000000
QEMU_BOOTED_LIST ?= $(QEMU_LIST)
.PHONY: qemu-compare-booted
qemu-compare-booted: venv qemu-inputs
	@mkdir -p $(QEMU_WORK)
	@echo "armload check on the $$(grep -vc '^#' $(QEMU_BOOTED_LIST)) modules of $(QEMU_BOOTED_LIST) (log: $(QEMU_BOOTED_LOG))"
	@nice -n 10 $(ARMLOAD) check $(QEMU_TREE) --budget $(QEMU_BOOTED_BUDGET) \
	  --kernel $(QEMU_SYMVERS) --kernel $(QEMU_VMLINUZ) --vermagic "$(QEMU_VERMAGIC)" \
	  --jobs $(QEMU_COMPARE_JOBS) --json $(QEMU_BOOTED_JSON) --fail-on load,verify,internal -q \
	  $$(grep -v '^#' $(QEMU_BOOTED_LIST) | sed 's/^/--module /') $(QEMU_COMPARE_ARGS) > $(QEMU_BOOTED_LOG)
	$(ARMLOAD) agree verdicts $(QEMU_BOOTED_JSON) --oracle $(QEMU_RESULTS) --min $(QEMU_MIN_AGREEMENT_BOOTED)

# Device I/O under QEMU (issue 29, item 3): a module's file operations in the same Debian kernel,
# the oracle of armload's real system calls inside the booted kernel (tests/emu/test_devio_qemu.py
# compares; the results file is committed). devh (devh.c) runs the plan's file operations and
# cat/echo; busybox cat and `echo > PATH` run each cat/echo outside an open file again. About a
# minute (one boot).
#   make qemu-devio     boot, run $(QEMU_DEVIO_PLAN) on $(QEMU_DEVIO_MODULE), write $(QEMU_DEVIO_RESULTS)
QEMU_DEVH          := $(QEMU_BUILD)/devh
QEMU_DEVIO_MODULE  ?= sample_modules/devio/vfsdev-arm-debug.ko
QEMU_DEVIO_PLAN    ?= $(QEMU_DIR)/devio_plan.txt
QEMU_DEVIO_RESULTS ?= $(QEMU_DIR)/devio_results.json
.PHONY: qemu-devio

$(QEMU_DEVH): $(QEMU_DIR)/devh.c | toolchain
	@mkdir -p $(@D)
	$(CROSS)gcc -O2 -static -Wall -o $@ $<

qemu-devio: qemu-tools $(QEMU_BUSYBOX) $(QEMU_MODH) $(QEMU_DEVH) | $(CORPUS_STAMPS)
	$(PYTHON) $(QEMU_DIR)/devio.py --kernel $(CORPUS_VMLINUZ) --busybox $(QEMU_BUSYBOX) --modh $(QEMU_MODH) \
	  --devh $(QEMU_DEVH) --module $(QEMU_DEVIO_MODULE) --plan $(QEMU_DEVIO_PLAN) --out $(QEMU_DEVIO_RESULTS) \
	  --work $(QEMU_BUILD)/devio
