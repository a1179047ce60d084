# Developer tools (owned by the developer-tools stage).
#   make devtools        gdb-multiarch (the --gdb test) and lcov's genhtml (the --coverage test)
#   make module M=DIR    build your own out-of-tree module in DIR against the bundled Debian
#                        6.1.0-50-armmp headers (ARM; KCFLAGS=-mthumb for Thumb-2), as the samples are
.PHONY: devtools module

devtools:
	@command -v gdb-multiarch >/dev/null && command -v genhtml >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq >/dev/null 2>&1; \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq gdb-multiarch lcov >/dev/null; \
	  else echo "need gdb-multiarch and lcov (apt-get install as root)" >&2; exit 1; fi; }

module: $(SAMPLE_KTREE_STAMP)
	@[ -n "$(M)" ] || { echo "usage: make module M=path/to/module/dir (with a Kbuild or Makefile: obj-m := name.o)" >&2; exit 2; }
	$(MAKE) -C $(SAMPLE_KDIR) M=$(abspath $(M)) ARCH=arm CROSS_COMPILE=$(CROSS) KCFLAGS="$(KCFLAGS)" modules
	@ls -1 $(abspath $(M))/*.ko
