"""Write the module list of the QEMU oracle (modules.txt): a priority list, then a random sample of
the rest of the tree drawn with a fixed seed. Run once; the list is committed and is the truth
(re-running on the same tree gives the same file).

    python3 tests/oracles/qemu/make_list.py TREE_KERNEL_DIR [--sample N] [--seed S] [--no-priority] > modules.txt

6.1.0-50-armmp's list: the defaults. The other kernels' (tests/oracles/qemu/RELEASE/modules.txt):
--no-priority --sample 250 --seed 31, a sample of the whole tree (any kmod suffix: 6.12 ships .ko.xz)
but the long self-tests (LONG: minutes each under QEMU's TCG and in armload; 6.1 armmp's list has them).
"""
import argparse
import glob
import os
import random

# Named in issue 20 or asked for by name: the kernel's own self-tests, crypto, IPv4/IPv6, the
# modules whose disagreements the issue lists, and the xor pair (a dependency without an init).
PRIORITY_GLOBS = [
    "lib/test_bpf.ko", "lib/test_user_copy.ko", "lib/test_static_keys.ko", "lib/test_static_key_base.ko",
    "lib/test_firmware.ko", "crypto/tcrypt.ko", "crypto/*.ko", "arch/arm/crypto/*.ko",
    "net/ipv4/*.ko", "net/ipv6/*.ko", "net/ipv6/ila/ila.ko", "net/l2tp/*.ko", "net/xfrm/*.ko",
    "drivers/accessibility/speakup/*.ko", "crypto/xor.ko", "arch/arm/lib/xor-neon.ko",
]
SUFFIXES = (".ko", ".ko.xz", ".ko.zst", ".ko.gz")    # kmod's module file names
LONG = {"lib/test_bpf", "lib/test_user_copy", "crypto/tcrypt"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("tree")
    ap.add_argument("--sample", type=int, default=540)
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--no-priority", action="store_true", help="no priority list: the sample is drawn from the whole tree")
    a = ap.parse_args()
    every = sorted(os.path.relpath(p, a.tree) for suf in SUFFIXES
                   for p in glob.glob(os.path.join(a.tree, "**/*" + suf), recursive=True))
    prio = []
    for g in [] if a.no_priority else PRIORITY_GLOBS:
        for p in sorted(q for suf in SUFFIXES for q in glob.glob(os.path.join(a.tree, g[:-len(".ko")] + suf))):
            rel = os.path.relpath(p, a.tree)
            if rel not in prio:
                prio.append(rel)
    rest = [p for p in every if p not in set(prio)]
    if a.no_priority:
        rest = [p for p in rest if p.split(".ko")[0] not in LONG]
    sample = sorted(random.Random(a.seed).sample(rest, a.sample))
    if a.no_priority:
        print(f"# QEMU oracle module list: {len(sample)} drawn from {len(rest)} of the {len(every)} modules (not the long "
              f"self-tests {', '.join(sorted(LONG))}) with random.Random({a.seed}).sample (make_list.py --no-priority)")
    else:
        print(f"# QEMU oracle module list: {len(prio)} priority modules, then {len(sample)} drawn from the "
              f"other {len(rest)} of {len(every)} with random.Random({a.seed}).sample (make_list.py)")
    for p in prio:
        print(p)
    print("# random sample")
    for p in sample:
        print(p)


if __name__ == "__main__":
    main()
