#!/usr/bin/env python3
"""Write a trimmed Module.symvers for the sample modules.

Usage: trim_symvers.py FULL_SYMVERS EXTRA_SYMVERS:MODNAME... -- KO... > OUT

Keeps, in the original order, the lines of FULL_SYMVERS (the distro kernel's Module.symvers)
whose symbol appears in the ``__versions`` section of any of the given .ko files, then appends
the lines of each EXTRA_SYMVERS (an out-of-tree module's own Module.symvers, e.g. the exporter
sample's) with the module column rewritten to MODNAME. Standard library only.
"""
import struct
import sys


def versions_names(path):
    """Symbol names of the 64-byte {u32 crc; char name[60]} entries of __versions."""
    data = open(path, "rb").read()
    if data[:4] != b"\x7fELF" or data[4] != 1 or data[5] != 1:
        raise SystemExit(f"{path}: not an ELF32 LE file")
    shoff, = struct.unpack_from("<I", data, 0x20)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x2E)
    shdrs = [struct.unpack_from("<10I", data, shoff + i * shentsize) for i in range(shnum)]
    stroff = shdrs[shstrndx][4]
    names = []
    for sh in shdrs:
        end = data.index(b"\0", stroff + sh[0])
        if data[stroff + sh[0]:end] == b"__versions":
            for off in range(sh[4], sh[4] + sh[5], 64):
                names.append(data[off + 4:off + 64].split(b"\0", 1)[0].decode())
    return names


def main(argv):
    if "--" not in argv:
        raise SystemExit(__doc__)
    sep = argv.index("--")
    full, extras, kos = argv[0], argv[1:sep], argv[sep + 1:]
    wanted = set()
    for ko in kos:
        wanted.update(versions_names(ko))
    out = []
    extra_lines, extra_syms = [], set()
    for spec in extras:
        path, modname = spec.rsplit(":", 1)
        for line in open(path):
            f = line.rstrip("\n").split("\t")
            if len(f) >= 4:
                f[2] = modname
                extra_lines.append("\t".join(f) + "\n")
                extra_syms.add(f[1])
    for line in open(full):
        f = line.split("\t")
        if len(f) >= 4 and f[1] in wanted and f[1] not in extra_syms:
            out.append(line)
    found = {l.split("\t")[1] for l in out} | extra_syms
    missing = sorted(wanted - found)
    if missing:
        print(f"trim_symvers: not exported by the kernel or extras: {' '.join(missing)}", file=sys.stderr)
        return 1
    sys.stdout.writelines(out + extra_lines)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
