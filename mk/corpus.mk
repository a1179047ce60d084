# The Debian armhf regression corpus (owned by the corpus stage).
#   make corpus     fetch linux-image/linux-headers-$(CORPUS_KREL):armhf into $(CACHE) (once; nothing installed)
#   make regress    check every module of the corpus twice and assert the results against
#                   tests/corpus_baseline.json: once in the module window (load, relocate, verify, run
#                   init), once placed in vmalloc space, where every kernel call needs a PLT veneer
#                   (load, relocate, verify every branch and PLT entry). ~2 minutes with 2 jobs.
#                   `make corpus` exits 3 with a loud message when the packages cannot be fetched.
#   make corpus-check   the same check without the assertions (REGRESS_ARGS adds options, e.g. --no-emulate)

CORPUS_KREL     ?= 6.1.0-50-armmp
CORPUS_DEBS     := linux-image-$(CORPUS_KREL):armhf linux-headers-$(CORPUS_KREL):armhf
CORPUS_IMAGE    := $(CACHE)/linux-image-$(CORPUS_KREL)
CORPUS_DIR      := $(CORPUS_IMAGE)/lib/modules/$(CORPUS_KREL)/kernel
CORPUS_VMLINUZ  := $(CORPUS_IMAGE)/boot/vmlinuz-$(CORPUS_KREL)
CORPUS_SYMVERS  := $(CACHE)/linux-headers-$(CORPUS_KREL)/usr/src/linux-headers-$(CORPUS_KREL)/Module.symvers
CORPUS_STAMPS   := $(CORPUS_IMAGE)/.unpacked $(CACHE)/linux-headers-$(CORPUS_KREL)/.unpacked
REGRESS_JOBS    ?= 2
REGRESS_JSON    ?= $(CACHE)/corpus-check.json
REGRESS_JSON_VMALLOC ?= $(CACHE)/corpus-check-vmalloc.json
REGRESS_ARGS    ?=
CORPUS_VERMAGIC ?= $(CORPUS_KREL) SMP mod_unload modversions ARMv7 p2v8 
CORPUS_CHECK    = $(ARMLOAD) check $(CORPUS_DIR) --kernel $(CORPUS_SYMVERS) --kernel $(CORPUS_VMLINUZ) \
                  --vermagic "$(CORPUS_VERMAGIC)" --jobs $(REGRESS_JOBS) --json $(REGRESS_JSON) $(REGRESS_ARGS)

.PHONY: corpus regress corpus-check

corpus: $(CORPUS_STAMPS)

$(CORPUS_STAMPS):
	@scripts/fetch-debs.sh $(CACHE) $(CORPUS_DEBS) || { st=$$?; \
	  echo "corpus: could not fetch $(CORPUS_DEBS) (exit $$st)." >&2; \
	  echo "corpus: the Debian package index must be reachable (apt-get update) and armhf enabled" \
	       "(dpkg --add-architecture armhf, as root)." >&2; exit 3; }

corpus-check: venv corpus
	$(CORPUS_CHECK)

# The check's own exit status is kept; the assertions then explain any failure in detail.
regress: venv corpus
	@st=0; $(CORPUS_CHECK) || st=$$?; \
	$(CORPUS_CHECK:$(REGRESS_JSON)=$(REGRESS_JSON_VMALLOC)) --placement vmalloc --no-emulate || st=$$?; \
	ARMLOAD_CORPUS_JSON=$(REGRESS_JSON) ARMLOAD_CORPUS_JSON_VMALLOC=$(REGRESS_JSON_VMALLOC) \
	  $(PY) -m pytest -q -rs tests/test_corpus.py || st=1; \
	exit $$st
