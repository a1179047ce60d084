# Sample inputs for armload (owned by the samples stage).
#   make samples        rebuild sample_modules/*.ko, sample_modules/Module.symvers and sample_modules/obj/*.o
#   make samples-kos    only the out-of-tree .ko files (fetches the Debian headers/kbuild debs first)
#   make samples-objs   only the plain relocation-test objects in sample_modules/obj/
#   make samples-clean  remove sample_modules/build/ (the committed outputs are kept)
#   make samples-distclean  also remove the committed outputs
# The .ko files are built against Debian's linux-headers-$(SAMPLES_KREL) with the Debian kbuild
# host tools, unpacked (never installed) under $(CACHE) and merged into $(CACHE)/ktree.

SAMPLES_KREL    ?= 6.1.0-50-armmp
SAMPLES_KBUILD  ?= linux-kbuild-6.1=6.1.176-1
SAMPLES_DEBS    := linux-headers-$(SAMPLES_KREL):armhf linux-headers-$(patsubst %-armmp,%,$(SAMPLES_KREL))-common $(SAMPLES_KBUILD)
SAMPLE_DIR      := sample_modules
SAMPLE_BUILD    := $(SAMPLE_DIR)/build
SAMPLE_NAMES    := hello initcore exporter importer kalloc regdev nullderef spin enodev tailcall deferred devkit
SAMPLE_ARCHES   := arm thumb2
SAMPLE_KCFLAGS_arm    :=
SAMPLE_KCFLAGS_thumb2 := -mthumb
SAMPLE_KTREE_STAMP := $(CACHE)/ktree/.stamp-$(SAMPLES_KREL)
SAMPLE_KDIR     := $(abspath $(CACHE))/ktree/usr/src/linux-headers-$(SAMPLES_KREL)
SAMPLE_KOS      := $(foreach a,$(SAMPLE_ARCHES),$(foreach n,$(SAMPLE_NAMES),$(SAMPLE_DIR)/$(n)-$(a).ko)) \
                   $(SAMPLE_DIR)/hello-arm-debug.ko $(SAMPLE_DIR)/nullderef-arm-debug.ko \
                   $(SAMPLE_DIR)/devkit-arm-debug.ko
SAMPLE_FULL_SYMVERS := $(CACHE)/linux-headers-$(SAMPLES_KREL)/usr/src/linux-headers-$(SAMPLES_KREL)/Module.symvers

.PHONY: samples samples-kos samples-objs samples-clean samples-distclean samples-ktree

samples: samples-kos $(SAMPLE_DIR)/Module.symvers samples-objs

samples-kos: $(SAMPLE_KOS)

samples-ktree: $(SAMPLE_KTREE_STAMP)

# Fetch (cached) and merge the three Debian trees into one local root.
$(SAMPLE_KTREE_STAMP): $(SAMPLE_DIR)/mkktree.sh | toolchain
	scripts/fetch-debs.sh $(CACHE) $(SAMPLES_DEBS)
	rm -f $@
	$(SAMPLE_DIR)/mkktree.sh $(CACHE) $(SAMPLES_KREL)

# $(call sample_debug_map,name,arch): the DWARF of a sample names its source and the headers relative
# to the repository, so any clone finds them (from its root): the compilation directory (kbuild's,
# the headers tree) is ".", the source sample_modules/src/NAME/, the headers .cache/ktree/... (make
# samples-ktree). GCC takes the last matching map. Code is unchanged (only the debug strings).
sample_debug_map = -fdebug-prefix-map=$(realpath $(CACHE))/ktree=$(CACHE)/ktree \
  -fdebug-prefix-map=$(abspath $(CACHE))/ktree=$(CACHE)/ktree \
  -fdebug-prefix-map=$(abspath $(SAMPLE_BUILD)/$(2)/$(1))=$(SAMPLE_DIR)/src/$(1) \
  -fdebug-prefix-map=$(realpath $(CACHE))/ktree/usr/src/linux-headers-$(SAMPLES_KREL)=. \
  -fdebug-prefix-map=$(abspath $(CACHE))/ktree/usr/src/linux-headers-$(SAMPLES_KREL)=.

# $(call sample_ko_rule,name,arch): build in $(SAMPLE_BUILD)/arch/name, commit a --strip-debug copy
# (what distro kernels ship).  importer links against the exporter's Module.symvers of the same arch.
define sample_ko_rule
$(SAMPLE_BUILD)/$(2)/$(1)/$(1).ko: $(wildcard $(SAMPLE_DIR)/src/$(1)/*) $(SAMPLE_KTREE_STAMP) $(if $(filter importer hostile_wmod,$(1)),$(SAMPLE_BUILD)/$(2)/exporter/exporter.ko)
	rm -rf $(SAMPLE_BUILD)/$(2)/$(1)
	mkdir -p $(SAMPLE_BUILD)/$(2)/$(1)
	cp $(SAMPLE_DIR)/src/$(1)/* $(SAMPLE_BUILD)/$(2)/$(1)/
	$$(MAKE) -C $(SAMPLE_KDIR) M=$(abspath $(SAMPLE_BUILD)/$(2)/$(1)) ARCH=arm CROSS_COMPILE=$(CROSS) \
	  KCFLAGS="$(SAMPLE_KCFLAGS_$(2)) $(call sample_debug_map,$(1),$(2))" \
	  $(if $(filter importer hostile_wmod,$(1)),KBUILD_EXTRA_SYMBOLS=$(abspath $(SAMPLE_BUILD)/$(2)/exporter/Module.symvers)) \
	  modules
$(SAMPLE_DIR)/$(1)-$(2).ko: $(SAMPLE_BUILD)/$(2)/$(1)/$(1).ko
	$(CROSS)strip --strip-debug -o $$@ $$<
endef
$(foreach a,$(SAMPLE_ARCHES),$(foreach n,$(SAMPLE_NAMES),$(eval $(call sample_ko_rule,$(n),$(a)))))

# One unstripped copy (with .debug_* and their non-ALLOC .rel.debug_* sections) for loader tests.
$(SAMPLE_DIR)/hello-arm-debug.ko: $(SAMPLE_BUILD)/arm/hello/hello.ko
	cp $< $@
# Unstripped copies for the developer tools (DWARF file:line in oopses, coverage, gdb).
$(SAMPLE_DIR)/nullderef-arm-debug.ko: $(SAMPLE_BUILD)/arm/nullderef/nullderef.ko
	cp $< $@
$(SAMPLE_DIR)/devkit-arm-debug.ko: $(SAMPLE_BUILD)/arm/devkit/devkit.ko
	cp $< $@

# Trimmed kernel Module.symvers: only the symbols some sample imports, plus the exporter's own lines.
$(SAMPLE_DIR)/Module.symvers: $(SAMPLE_DIR)/trim_symvers.py $(SAMPLE_KOS) $(SAMPLE_KTREE_STAMP)
	@a=$$(cut -f1,2 $(SAMPLE_BUILD)/arm/exporter/Module.symvers | sort); \
	 t=$$(cut -f1,2 $(SAMPLE_BUILD)/thumb2/exporter/Module.symvers | sort); \
	 [ "$$a" = "$$t" ] || { echo "exporter CRCs differ between arm and thumb2" >&2; exit 1; }
	python3 $(SAMPLE_DIR)/trim_symvers.py $(SAMPLE_FULL_SYMVERS) \
	  $(SAMPLE_BUILD)/arm/exporter/Module.symvers:exporter -- $(SAMPLE_KOS) > $@.tmp
	mv $@.tmp $@

samples-clean:
	rm -rf $(SAMPLE_BUILD)

samples-distclean: samples-clean
	rm -f $(SAMPLE_KOS) $(SAMPLE_DIR)/Module.symvers $(SAMPLE_OBJS)

# ---------------------------------------------------------------------------------------------
# Plain relocatable objects for relocation unit/oracle tests: sample_modules/obj/<what>-<isa>-gcc<N>.o
SAMPLE_OBJ_DIR  := $(SAMPLE_DIR)/obj
SAMPLE_GCC_TAG  ?= gcc$(or $(shell $(CROSS)gcc -dumpversion 2>/dev/null | cut -d. -f1),12)
SAMPLE_ASFLAGS  := -c -march=armv7-a -mfloat-abi=soft
SAMPLE_CFLAGS   := -c -O2 -fno-pic -mno-unaligned-access -march=armv7-a -mfloat-abi=soft \
                   -funwind-tables -fno-common -ffreestanding
SAMPLE_OBJS     := $(addprefix $(SAMPLE_OBJ_DIR)/,$(addsuffix -$(SAMPLE_GCC_TAG).o, \
                     relocs-arm relocs-thumb2 group-arm interwork-arm v4bx-armv4t cfunc-arm cfunc-thumb2))

samples-objs: $(SAMPLE_OBJS)

$(SAMPLE_OBJ_DIR)/relocs-arm-$(SAMPLE_GCC_TAG).o: $(SAMPLE_OBJ_DIR)/relocs-arm.S | toolchain
	$(CROSS)gcc $(SAMPLE_ASFLAGS) -marm $< -o $@
$(SAMPLE_OBJ_DIR)/relocs-thumb2-$(SAMPLE_GCC_TAG).o: $(SAMPLE_OBJ_DIR)/relocs-thumb2.S | toolchain
	$(CROSS)gcc $(SAMPLE_ASFLAGS) -mthumb $< -o $@
$(SAMPLE_OBJ_DIR)/group-arm-$(SAMPLE_GCC_TAG).o: $(SAMPLE_OBJ_DIR)/group-arm.S | toolchain
	$(CROSS)gcc $(SAMPLE_ASFLAGS) -marm $< -o $@
$(SAMPLE_OBJ_DIR)/interwork-arm-$(SAMPLE_GCC_TAG).o: $(SAMPLE_OBJ_DIR)/interwork-arm.S | toolchain
	$(CROSS)gcc $(SAMPLE_ASFLAGS) $< -o $@
$(SAMPLE_OBJ_DIR)/v4bx-armv4t-$(SAMPLE_GCC_TAG).o: $(SAMPLE_OBJ_DIR)/v4bx-arm.S | toolchain
	$(CROSS)gcc -c -march=armv4t -mfloat-abi=soft -marm -Wa,--fix-v4bx $< -o $@
$(SAMPLE_OBJ_DIR)/cfunc-arm-$(SAMPLE_GCC_TAG).o: $(SAMPLE_OBJ_DIR)/cfunc.c | toolchain
	$(CROSS)gcc $(SAMPLE_CFLAGS) -marm $< -o $@
$(SAMPLE_OBJ_DIR)/cfunc-thumb2-$(SAMPLE_GCC_TAG).o: $(SAMPLE_OBJ_DIR)/cfunc.c | toolchain
	$(CROSS)gcc $(SAMPLE_CFLAGS) -mthumb $< -o $@

# The developer walkthrough's module (docs/walkthrough.md, issue 22): a misc device over a kmalloc'd
# ring buffer, built unstripped for ARM only; kept out of SAMPLE_KOS (and so out of the trimmed
# Module.symvers and the corpus): run it with the Debian image and its full Module.symvers.
RINGDEV_KO := $(SAMPLE_DIR)/walkthrough/ringdev-arm-debug.ko
$(eval $(call sample_ko_rule,ringdev,arm))
$(RINGDEV_KO): $(SAMPLE_BUILD)/arm/ringdev/ringdev.ko
	mkdir -p $(dir $@)
	cp $< $@
samples-ringdev: $(RINGDEV_KO)
samples: samples-ringdev
.PHONY: samples-ringdev

# The device-I/O module (issue 29: the VFS, the QEMU oracle's device-I/O target): a misc device with
# read/write/llseek/ioctl/poll/mmap, a runtime parameter, a device attribute, debugfs and /proc
# files; unstripped, ARM only, kept out of SAMPLE_KOS like ringdev.
VFSDEV_KO := $(SAMPLE_DIR)/devio/vfsdev-arm-debug.ko
$(eval $(call sample_ko_rule,vfsdev,arm))
$(VFSDEV_KO): $(SAMPLE_BUILD)/arm/vfsdev/vfsdev.ko
	mkdir -p $(dir $@)
	cp $< $@
samples-vfsdev: $(VFSDEV_KO)
samples: samples-vfsdev
.PHONY: samples-vfsdev

# The sanitizers' bug samples (issue 32): one module, `bug=N` picks the class; unstripped (its
# DWARF gives file:line and the stack frames), ARM only, kept out of SAMPLE_KOS like ringdev.
SANBUGS_KO := $(SAMPLE_DIR)/sanitize/sanbugs-arm-debug.ko
$(eval $(call sample_ko_rule,sanbugs,arm))
$(SANBUGS_KO): $(SAMPLE_BUILD)/arm/sanbugs/sanbugs.ko
	mkdir -p $(dir $@)
	cp $< $@
samples-sanbugs: $(SANBUGS_KO)
samples: samples-sanbugs
.PHONY: samples-sanbugs

# The fault sweep's sample: init's five allocations, each failure handled differently (issue 32
# item 5); unstripped, ARM only, next to sanbugs.
SANERR_KO := $(SAMPLE_DIR)/sanitize/sanerr-arm-debug.ko
$(eval $(call sample_ko_rule,sanerr,arm))
$(SANERR_KO): $(SAMPLE_BUILD)/arm/sanerr/sanerr.ko
	mkdir -p $(dir $@)
	cp $< $@
samples-sanerr: $(SANERR_KO)
samples: samples-sanerr
.PHONY: samples-sanerr

# Hostile modules (issue 33): each attacks the kernel it runs in one way (spins, panic, BUG, writes
# into read-only text, recursion, self-requeueing work, a timer every jiffy, restart and halt,
# allocation until OOM, an exit that never returns, an init asleep forever). ARM only, stripped,
# kept out of SAMPLE_KOS (and so out of the corpus baseline): sample_modules/hostile/, with a
# Module.symvers trimmed to what they import (hostile_wmod imports the exporter's two symbols).
HOSTILE_NAMES := spin_irqoff spin_irqon panic bug wtext wmod recurse requeue timer restart halt oom exit_hang wait
HOSTILE_DIR   := $(SAMPLE_DIR)/hostile
HOSTILE_KOS   := $(foreach n,$(HOSTILE_NAMES),$(HOSTILE_DIR)/hostile_$(n)-arm.ko)
$(foreach n,$(HOSTILE_NAMES),$(eval $(call sample_ko_rule,hostile_$(n),arm)))
define hostile_ko_rule
$(HOSTILE_DIR)/hostile_$(1)-arm.ko: $(SAMPLE_BUILD)/arm/hostile_$(1)/hostile_$(1).ko
	mkdir -p $(HOSTILE_DIR)
	$(CROSS)strip --strip-debug -o $$@ $$<
endef
$(foreach n,$(HOSTILE_NAMES),$(eval $(call hostile_ko_rule,$(n))))
$(HOSTILE_DIR)/Module.symvers: $(SAMPLE_DIR)/trim_symvers.py $(HOSTILE_KOS) $(SAMPLE_DIR)/exporter-arm.ko
	python3 $(SAMPLE_DIR)/trim_symvers.py $(SAMPLE_FULL_SYMVERS) \
	  $(SAMPLE_BUILD)/arm/exporter/Module.symvers:exporter -- $(HOSTILE_KOS) $(SAMPLE_DIR)/exporter-arm.ko > $@.tmp
	mv $@.tmp $@
samples-hostile: $(HOSTILE_KOS) $(HOSTILE_DIR)/Module.symvers
samples: samples-hostile
.PHONY: samples-hostile
