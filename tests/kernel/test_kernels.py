"""Every Debian armhf kernel: identity from the image, a Module.symvers of another kernel refused,
struct module and the module layout derived from the kernel (armload/kernel/identity.py,
armload/loader/this_module.py, armload/loader/for_kernel.py). The 6.1 rt and lpae and the 6.12
packages are fetched with `make test-inputs KERNEL=RELEASE`."""
import os
import re

import pytest

from testinputs import CACHE, require_input
from armload.errors import ArmloadError, KernelFileError
from armload.kernel.config import DEBIAN_ARMMP

RELEASES = ("6.1.0-50-armmp", "6.1.0-50-armmp-lpae", "6.1.0-50-rt-armmp", "6.12.107+deb12-armmp",
            "6.12.107+deb12-armmp-lpae", "6.12.107+deb12-rt-armmp")


def image(rel):
    return require_input(os.path.join(CACHE, f"linux-image-{rel}", "boot", f"vmlinuz-{rel}"),
                         f"make test-inputs KERNEL={rel}")


def symvers(rel):
    return require_input(os.path.join(CACHE, f"linux-headers-{rel}", "usr", "src", f"linux-headers-{rel}",
                                      "Module.symvers"), f"make test-inputs KERNEL={rel}")


def tree(rel):
    return os.path.join(CACHE, f"linux-image-{rel}", "lib", "modules", rel, "kernel")


@pytest.mark.parametrize("rel,version,flavour,rt,lpae", [
    ("6.1.0-50-armmp", (6, 1), "armmp", False, False), ("6.1.0-50-armmp-lpae", (6, 1), "armmp-lpae", False, True),
    ("6.1.0-50-rt-armmp", (6, 1), "rt-armmp", True, False), ("6.12.107+deb12-armmp", (6, 12), "armmp", False, False),
    ("6.12.107+deb12-armmp-lpae", (6, 12), "armmp-lpae", False, True), ("6.12.107+deb12-rt-armmp", (6, 12), "rt-armmp", True, False)])
def test_the_image_says_which_kernel_it_is(rel, version, flavour, rt, lpae):
    from armload.kernel.identity import identify
    k = identify(image(rel))
    assert (k.release, k.version, k.flavour, k.preempt_rt, k.lpae) == (rel, version, flavour, rt, lpae)
    assert k.build.startswith("#") and "Debian" in k.build
    assert k.config_source.endswith(f"config-{rel}") and k.config["CONFIG_MODVERSIONS"] == "y"


@pytest.mark.parametrize("img,sv", [("6.1.0-50-armmp", "6.1.0-50-armmp-lpae"), ("6.12.107+deb12-armmp", "6.1.0-50-armmp"),
                                    ("6.1.0-50-armmp-lpae", "6.1.0-50-armmp")])
def test_a_module_symvers_of_another_kernel_is_refused(img, sv, tmp_path):
    from armload.kernel.provider import Kernel
    with pytest.raises(KernelFileError, match=re.escape(f"this Module.symvers is kernel {sv}'s (its include/generated/utsrelease.h); the image vmlinuz-{img} is {img}")):
        Kernel.from_files([symvers(sv), image(img)], DEBIAN_ARMMP)
    # without its headers beside it, the exports tell: lpae's lists 8 the armmp image lacks
    bare = tmp_path / "Module.symvers"
    bare.write_bytes(open(symvers("6.1.0-50-armmp-lpae"), "rb").read())
    with pytest.raises(KernelFileError, match=r"lists 8 vmlinux export\(s\) the image 6.1.0-50-armmp does not export"):
        Kernel.from_files([str(bare), image("6.1.0-50-armmp")], DEBIAN_ARMMP)
    Kernel.from_files([symvers(img), image(img)], DEBIAN_ARMMP)          # its own: accepted


@pytest.mark.parametrize("rel,want", [("6.1.0-50-armmp", (0x240, 0x0C, 0xCC, 0x230)),
                                      ("6.1.0-50-rt-armmp", (0x240, 0x0C, 0xC8, 0x228)),
                                      ("6.12.107+deb12-armmp", (0x300, 0x0C, 0xCC, 0x2C4)),
                                      ("6.12.107+deb12-armmp-lpae", (0x300, 0x0C, 0xCC, 0x2C4)),
                                      ("6.12.107+deb12-rt-armmp", (0x300, 0x0C, 0xC8, 0x2BC))])
def test_struct_module_is_the_trees_own(rel, want):
    """init/exit from the relocations of .gnu.linkonce.this_module, size from the section, name
    where modpost put it; the 6.12 tree's modules are .ko.xz."""
    from armload.loader.for_kernel import follow_kernel
    from armload.loader.this_module import of_tree
    sm = of_tree(tree(rel))
    assert (sm.size, sm.name, sm.init, sm.exit) == want
    cfg = follow_kernel(DEBIAN_ARMMP, image(rel))
    assert cfg.struct_module == sm and cfg.layout == ("6.4" if rel.startswith("6.12") else "6.1")
    with pytest.raises(ArmloadError, match="whose load_module uses the"):
        follow_kernel(DEBIAN_ARMMP, image(rel), layout_given="6.1" if rel.startswith("6.12") else "6.4")


def test_an_rt_module_runs_its_init_from_its_own_offsets():
    """rt-armmp's init is at 0xc8: loaded with the rt tree's layout the loader finds init and exit."""
    from armload.kernel.provider import Kernel
    from armload.loader.for_kernel import follow_kernel
    from armload.loader.session import Session
    rel = "6.1.0-50-rt-armmp"
    cfg = follow_kernel(DEBIAN_ARMMP, image(rel))
    mod = Session(Kernel.from_files([symvers(rel)], cfg), cfg).load(os.path.join(tree(rel), "fs", "nls", "nls_cp437.ko"))
    names = {s.addr: s.name for s in mod.symbols}
    assert names[mod.init_addr] == "init_module" and names[mod.exit_addr] == "cleanup_module"


V612 = "6.12.107+deb12-armmp"


def test_a_6_12_module_in_its_shipped_form_runs_in_6_12_with_the_kernels_image():
    """6.12: modules are .ko.xz and the kernel decompresses xz itself (/sys/module/compression),
    module memory comes from execmem_alloc, one page-aligned allocation per mod_mem type (6.10+),
    the module signature is checked (266 M instructions for nls_cp437), and __kmalloc/vmalloc are
    *_noprof."""
    from armload.emu.booted.modload import kernel_compression
    from armload.emu.booted.modrun import BootedRun
    from armload.kernel.provider import Kernel
    from armload.loader.for_kernel import follow_kernel
    cfg = follow_kernel(DEBIAN_ARMMP, image(V612))
    assert (cfg.layout, cfg.version, cfg.struct_module.size) == ("6.4", (6, 12), 0x300)
    run = BootedRun(image(V612), Kernel.from_files([symvers(V612), image(V612)], cfg), cfg, tree=tree(V612))
    assert kernel_compression(run.bk) == "xz"
    r = run.load(os.path.join(tree(V612), "fs", "nls", "nls_cp437.ko.xz"), budget=1_000_000_000)
    assert r.ok and r.decompressed_by == "kernel", r.to_dict()
    assert r.loader.identical and r.loader.compared == 6 * 0x1000     # six mod_mem types, a page each
    mod = run.session.modules[-1]
    assert sorted(g.name for g in mod.regions) == ["data", "init_data", "init_rodata", "init_text", "rodata", "text"]
    assert mod.init_addr and mod.exit_addr
    assert run.unload("nls_cp437")[0] == 0


def test_without_an_image_the_headers_release_decides_the_layout(tmp_path):
    from armload.loader.for_kernel import follow_headers
    cfg = follow_headers(DEBIAN_ARMMP, symvers(V612))
    assert (cfg.layout, cfg.version) == ("6.4", (6, 12))
    assert follow_headers(DEBIAN_ARMMP, symvers("6.1.0-50-armmp")).layout == "6.1"
    with pytest.raises(ArmloadError, match="kernel 6.12.107\\+deb12-armmp's, whose load_module uses the 6.4 layout"):
        follow_headers(DEBIAN_ARMMP, symvers(V612), layout_given="6.1")
    bare = tmp_path / "Module.symvers"                     # no headers beside it: nothing is known
    bare.write_text("")
    assert follow_headers(DEBIAN_ARMMP, str(bare)) == DEBIAN_ARMMP


def test_load_of_a_6_12_module_with_its_symvers_lays_it_out_as_6_12(capsys):
    from armload.cli import main
    m = os.path.join(tree(V612), "fs", "nls", "nls_cp437.ko.xz")
    assert main(["load", m, "--kernel", symvers(V612), "--json"]) == 0
    import json
    doc = json.loads(capsys.readouterr().out)
    mod = doc["modules"][0] if "modules" in doc else doc
    names = {r["name"] for r in mod["regions"]}
    assert {"text", "data", "rodata"} <= names and "core" not in names


def test_matrix_boots_each_cells_own_kernel():
    """6.1 and 6.12 side by side: each cell's init runs in its own booted kernel; 6.12's
    nls_cp437.ko.xz is the same module as 6.1's nls_cp437.ko."""
    import json
    import subprocess
    import sys
    from testinputs import ROOT
    p = subprocess.run([sys.executable, "-m", "armload", "matrix", "--cell", "6.1.0-50-armmp", "--cell", V612,
                        "--cache", CACHE, "--module", "nls_cp437", "--json", "-", "--no-timing", "-q"],
                       cwd=ROOT, capture_output=True, text=True, timeout=1200)
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    assert [c["init"] for c in doc["cells"]] == ["run in this kernel booted"] * 2
    assert [c["struct_module"]["exit"] for c in doc["cells"]] == [0x230, 0x2C4]
    row = doc["modules"]["fs/nls/nls_cp437.ko"]
    assert row == {"6.1.0-50-armmp": {"outcome": "ok", "loaded": True}, V612: {"outcome": "ok", "loaded": True}}
    assert doc["changes"] == []


def test_rt_modules_load_as_the_rt_kernel_loads_them():
    """rt-armmp: no CONFIG_JUMP_LABEL (no jump_label_module_notify) and trace notifiers that
    rewrite print_fmt strings (TRACE_DEFINE_ENUM) in module data: the formed image is taken as
    prepare_coming_module starts, so a module with trace events is identical word for word."""
    from armload.kernel.modtree import load_order, tree_index
    from armload.emu.booted.modrun import BootedRun
    from armload.kernel.provider import Kernel
    from armload.loader.for_kernel import follow_kernel
    rel = "6.1.0-50-rt-armmp"
    cfg = follow_kernel(DEBIAN_ARMMP, image(rel))
    assert cfg.struct_module.init == 0xC8
    run = BootedRun(image(rel), Kernel.from_files([symvers(rel), image(rel)], cfg), cfg, tree=tree(rel))
    idx = tree_index(tree(rel))
    for p in load_order(idx["vmw_vsock_virtio_transport_common"], idx) + [os.path.join(tree(rel), "fs", "nls",
                                                                                      "nls_cp437.ko")]:
        r = run.load(p)
        assert r.ok and r.loader.identical, (p, r.loader.to_dict())
    assert run.unload("nls_cp437")[0] == 0


@pytest.mark.parametrize("rel", RELEASES)
def test_the_corpus_checks_version_magic_is_the_trees_own(rel):
    """mk/corpus.mk derives CORPUS_VERMAGIC from the kernel's config as include/linux/vermagic.h
    does (6.1 rt: preempt_rt; 6.12 rt, CONFIG_PREEMPT_BUILD: preempt); the oracle is a module the
    Debian build made for that kernel."""
    import lzma
    import subprocess
    from testinputs import ROOT
    image(rel)
    ko = os.path.join(tree(rel), "fs", "nls", "nls_cp437.ko")
    data = open(ko, "rb").read() if os.path.exists(ko) else lzma.open(ko + ".xz").read()
    want = re.search(rb"vermagic=([^\0]*)\0", data).group(1).decode()
    p = subprocess.run(["make", "-s", "--no-print-directory", "--eval", "pv: ; @echo '$(CORPUS_VERMAGIC)'", "pv",
                        f"CORPUS_KREL={rel}", f"CACHE={CACHE}"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.rstrip("\n") == want, (p.stdout, p.stderr, want)
