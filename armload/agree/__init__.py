"""armload against the real kernel: one module per oracle, each behind an `armload agree` subcommand.

    verdicts   armload's init verdicts (`check --json`, `run --json`) against the QEMU oracle's
               (the Debian kernel booted in qemu-system-arm, insmod per module)   `armload agree verdicts`
    kprobes    armload's kprobes verdicts, blacklist and jump label sites against the booted
               kernel's own register_kprobe and tables                            `armload agree kprobes`
    loader     mutated samples through the booted kernel's own load_module and through armload's
               loader: do they decide alike                                       `armload agree loader`

The floor above probes/ and inputs/, whose pieces (the kprobes decoder, the fuzz cases, the one-input
differential of inputs/booted_diff.py) the comparisons use.
"""
