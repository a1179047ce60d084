# The developer tools inside the booted kernel (oops decoding, --coverage, --trace, --gdb).
# Debian's -dbg package holds the vmlinux with DWARF (620 MB download, 2.7 GB unpacked: on request
# only, never in make test): `armload run M.ko --kernel $(VMLINUX_DBG) ...` decodes kernel frames too.
VMLINUX_DBG := $(CACHE)/linux-image-6.1.0-50-armmp-dbg/usr/lib/debug/boot/vmlinux-6.1.0-50-armmp

.PHONY: vmlinux-dbg

vmlinux-dbg: $(VMLINUX_DBG)

$(VMLINUX_DBG):
	scripts/fetch-debs.sh $(CACHE) linux-image-6.1.0-50-armmp-dbg:armhf
	@test -f $@ || { echo "vmlinux-dbg: the package has no $@" >&2; exit 1; }
