# The booted Debian kernel (armload/emu/booted): the kernel's own self-test modules loaded by its
# own load_module. Too slow for `make test` (lib/test_bpf.ko alone is 5.1 G instructions, about
# two minutes); the results file is committed and tests/emu/test_boot_selftests.py checks it.
BOOT_VMLINUZ := $(CACHE)/linux-image-6.1.0-50-armmp/boot/vmlinuz-6.1.0-50-armmp
BOOT_TREE    := $(CACHE)/linux-image-6.1.0-50-armmp/lib/modules/6.1.0-50-armmp/kernel
BOOT_SELFTESTS_JSON := tests/boot_selftests.json

.PHONY: boot-selftests
boot-selftests: venv test-inputs
	nice -n 10 $(PY) -m armload.emu.booted.selftest $(BOOT_VMLINUZ) $(BOOT_TREE) --json $(BOOT_SELFTESTS_JSON)
