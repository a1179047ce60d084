"""The Debian kernel booted in Unicorn: boot once, snapshot, fork/restore per use, call into it,
and load modules with the kernel's own load_module (see README "## Booted kernel")."""
