# The Debian armhf regression corpus (owned by the corpus stage).
#   make corpus     fetch linux-image/linux-headers-$(CORPUS_KREL):armhf into $(CACHE) (once; nothing installed)
#   make regress    check every module of the corpus twice, each against its pass of the per-module
#                   baseline tests/corpus_baseline.json (outcome, PLT counts, image size of every module):
#                   once in the module window (load, relocate, verify; init is not run here), once placed in vmalloc
#                   space, where every kernel call needs a PLT veneer (load, relocate, verify every branch
#                   and PLT entry). Fails on any per-module difference (printed as a table) or on a load or
#                   verify failure; then runs the corpus assertions of tests/ci/test_corpus.py. Both passes
#                   356 CPU-seconds (measured 2026-12-02: about 3 minutes with 2 jobs on 2 free cores). `make corpus` exits 3 with a loud message when the packages cannot be fetched.
#   make regress-update   the same two passes, writing their results into the baseline (review the diff)
#   make corpus-check   the window pass without a baseline, init inside the booted kernel (~18 min; REGRESS_ARGS
#                       adds options, e.g. --no-emulate)

CORPUS_KREL     ?= 6.1.0-50-armmp
CORPUS_DEBS     := linux-image-$(CORPUS_KREL):armhf linux-headers-$(CORPUS_KREL):armhf
CORPUS_IMAGE    := $(CACHE)/linux-image-$(CORPUS_KREL)
CORPUS_DIR      := $(CORPUS_IMAGE)/lib/modules/$(CORPUS_KREL)/kernel
CORPUS_VMLINUZ  := $(CORPUS_IMAGE)/boot/vmlinuz-$(CORPUS_KREL)
CORPUS_SYMVERS  := $(CACHE)/linux-headers-$(CORPUS_KREL)/usr/src/linux-headers-$(CORPUS_KREL)/Module.symvers
CORPUS_STAMPS   := $(CORPUS_IMAGE)/.unpacked $(CACHE)/linux-headers-$(CORPUS_KREL)/.unpacked
REGRESS_JOBS    ?= 2
REGRESS_OUT     ?= build
REGRESS_JSON    ?= $(REGRESS_OUT)/corpus-check.json
REGRESS_JSON_VMALLOC ?= $(REGRESS_OUT)/corpus-check-vmalloc.json
REGRESS_BASELINE ?= tests/corpus_baseline.json
# The loader is bit-exact on the whole corpus: a load or verify failure always fails. Init outcomes
# (faults included) are held to the baseline instead, module by module.
REGRESS_FAIL_ON ?= load,verify,internal
REGRESS_ARGS    ?=
# what include/linux/vermagic.h writes, from the kernel's config: CONFIG_PREEMPT_BUILD gives "preempt "
# (6.12's rt), else CONFIG_PREEMPT_RT "preempt_rt " (6.1's rt)
CORPUS_CONFIG   := $(CORPUS_IMAGE)/boot/config-$(CORPUS_KREL)
CORPUS_PREEMPT   = $(shell grep -q '^CONFIG_PREEMPT_BUILD=y' $(CORPUS_CONFIG) 2>/dev/null && echo preempt || \
                   { grep -q '^CONFIG_PREEMPT_RT=y' $(CORPUS_CONFIG) 2>/dev/null && echo preempt_rt; })
CORPUS_VERMAGIC ?= $(CORPUS_KREL) SMP $(if $(CORPUS_PREEMPT),$(CORPUS_PREEMPT) )mod_unload modversions ARMv7 p2v8 
CORPUS_CHECK    = $(ARMLOAD) check $(CORPUS_DIR) --kernel $(CORPUS_SYMVERS) --kernel $(CORPUS_VMLINUZ) \
                  --vermagic "$(CORPUS_VERMAGIC)" --jobs $(REGRESS_JOBS) --json $(REGRESS_JSON) $(REGRESS_ARGS)
# Both passes are load + verify (--no-emulate): init runs only inside the booted kernel, about 18 minutes
# for the whole tree on 2 cores; its verdicts are held by `make qemu-compare-booted` (mk/qemu.mk).
REGRESS_CHECK   = $(CORPUS_CHECK) --fail-on $(REGRESS_FAIL_ON) --baseline $(REGRESS_BASELINE) --top 0 --no-emulate
REGRESS_VMALLOC = $(REGRESS_CHECK:$(REGRESS_JSON)=$(REGRESS_JSON_VMALLOC)) --placement vmalloc

.PHONY: corpus regress regress-update corpus-check

corpus: $(CORPUS_STAMPS)

$(CORPUS_STAMPS):
	@scripts/fetch-debs.sh $(CACHE) $(CORPUS_DEBS) || { st=$$?; \
	  echo "corpus: could not fetch $(CORPUS_DEBS) (exit $$st)." >&2; \
	  echo "corpus: the Debian package index must be reachable (apt-get update) and armhf enabled" \
	       "(dpkg --add-architecture armhf, as root)." >&2; exit 3; }

corpus-check: venv corpus
	$(CORPUS_CHECK)

# Both passes always run; the checks' own exit statuses are kept (each prints its baseline diff).
regress: venv corpus
	@mkdir -p $(REGRESS_OUT); st=0; $(REGRESS_CHECK) || st=$$?; \
	$(REGRESS_VMALLOC) || st=$$?; \
	ARMLOAD_CORPUS_JSON=$(REGRESS_JSON) ARMLOAD_CORPUS_JSON_VMALLOC=$(REGRESS_JSON_VMALLOC) \
	  $(PY) -m pytest -q -rs tests/ci/test_corpus.py || st=1; \
	exit $$st

regress-update: venv corpus
	@mkdir -p $(REGRESS_OUT); st=0; $(REGRESS_CHECK) --update-baseline || st=$$?; \
	$(REGRESS_VMALLOC) --update-baseline || st=$$?; exit $$st
