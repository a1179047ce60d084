"""The hardware a booted Debian armmp kernel sees, and nothing else: a flattened device tree,
a GICv2, a PL011 UART, the ARMv7 generic timer (driven by the instruction count) and the CPU's
exception entry (which stock Unicorn leaves to its hooks). The kernel's own drivers run on them."""
