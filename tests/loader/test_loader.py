"""Pipeline-level behaviour: layout, several modules, images, vermagic."""
import subprocess

import pytest

from armload.kernel.config import KernelConfig
from armload.errors import ArmloadError, SymbolError
from armload.loader.image import write_image
from armload.kernel.provider import Kernel
from armload.loader.session import Session

from testinputs import SYMVERS, sample

VERMAGIC = "6.1.0-50-armmp SMP mod_unload modversions ARMv7 p2v8 "


def session(**kw):
    cfg = KernelConfig(**{k: v for k, v in kw.items() if k != "placement"})
    return Session(Kernel.from_files([SYMVERS], cfg), cfg, kw.get("placement", "window"))


def test_layout_61_core_then_init_with_page_aligned_parts():
    mod = session().load(sample("initcore-arm.ko"))
    assert [r.name for r in mod.regions] == ["core", "init"]
    core, init = mod.regions
    assert core.base == 0xBF000000 and init.base == core.end + 0x1000      # vmalloc guard page
    by = {s.name: s for s in mod.sections}
    assert by[".text"].addr == core.base                                    # text first
    assert by[".plt"].addr % 64 == 0 and by[".plt"].size == 128            # L1-aligned PLT
    ro = [x for x in mod.sections if x.mem == "rodata"]
    assert ro and min(x.addr for x in ro) % 0x1000 == 0                     # STRICT_MODULE_RWX split
    assert by[".init.text"].addr == init.base
    assert by[".gnu.linkonce.this_module"].mem == "data"
    assert mod.init_addr == next(s.addr for s in mod.symbols if s.name == "init_module")


def test_layout_64_one_allocation_per_class():
    mod = session(layout="6.4").load(sample("initcore-arm.ko"))
    names = [r.name for r in mod.regions]
    assert names[:2] == ["text", "data"] and "init_text" in names
    for s in mod.sections:
        r = mod.region_of(s.addr)
        assert r is not None and (r.name == s.mem or s.size == 0)


def test_exit_text_goes_to_init_without_module_unload():
    mod = session(module_unload=False).load(sample("hello-arm.ko"))
    assert {s.name: s.mem for s in mod.sections}[".exit.text"] == "init_text"
    mod = session().load(sample("hello-arm.ko"))
    assert {s.name: s.mem for s in mod.sections}[".exit.text"] == "text"


def test_failed_load_releases_memory_and_next_module_reuses_it():
    s = session()
    with pytest.raises(SymbolError):
        s.load(sample("importer-arm.ko"))                 # exporter not loaded yet
    mod = s.load(sample("hello-arm.ko"))
    assert mod.regions[0].base == 0xBF000000


def test_same_module_twice_is_eexist():
    s = session()
    s.load(sample("hello-arm.ko"))
    with pytest.raises(ArmloadError, match="already loaded") as e:
        s.load(sample("hello-arm.ko"))
    assert e.value.errno == -17


def test_vermagic_checked_like_check_modinfo():
    cfg = KernelConfig()
    k = Kernel.from_files([SYMVERS], cfg)
    k.vermagic = VERMAGIC
    Session(k, cfg).load(sample("hello-arm.ko"))
    k.vermagic = "6.2.0-1-armmp SMP mod_unload modversions ARMv7 p2v8 "   # release ignored with __versions
    Session(k, cfg).load(sample("hello-arm.ko"))
    k.vermagic = VERMAGIC.replace("ARMv7 ", "ARMv7 thumb2 ")
    with pytest.raises(ArmloadError, match="version magic '.*' should be '.*thumb2"):
        Session(k, cfg).load(sample("hello-arm.ko"))


def test_thumb2_kernel_places_modules_8mib_below():
    mod = session(thumb2=True).load(sample("hello-thumb2.ko"))
    assert mod.regions[0].base == 0xBF800000 and mod.thumb
    assert mod.init_addr & 1                               # Thumb entry point


def test_image_disassembles_with_names(tmp_path, binutils):
    mod = session(placement="vmalloc").load(sample("hello-arm.ko"))
    out = tmp_path / "hello.elf"
    write_image(mod, str(out))
    r = subprocess.run([binutils + "objdump", "-d", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "<init_module>:" in r.stdout and "<__plt__printk>" in r.stdout
    assert "ldr\tpc, [pc, #56]" in r.stdout
    r = subprocess.run([binutils + "readelf", "-sW", str(out)], capture_output=True, text=True)
    assert " ABS _printk" in r.stdout
    for s in mod.sections:
        if s.size:
            assert f"{s.addr:08x}" in subprocess.run([binutils + "readelf", "-SW", str(out)],
                                                    capture_output=True, text=True).stdout


def test_seed_scale_synthetic_loads_with_plts():
    from armload.inputs.synth import make_module
    data = make_module()
    cfg = KernelConfig()
    mod = Session(Kernel.builtin(cfg, simulate_all=True), cfg, "vmalloc").load("synth.ko", data)
    # the exact numbers, from an independent parse with pyelftools
    import io
    from elftools.elf.elffile import ELFFile
    from elftools.elf.relocation import RelocationSection
    elf = ELFFile(io.BytesIO(data))
    calls = und = 0
    for sec in elf.iter_sections():
        if not isinstance(sec, RelocationSection):
            continue
        symtab = elf.get_section(sec["sh_link"])
        exec_target = elf.get_section(sec["sh_info"])["sh_flags"] & 4
        for r in sec.iter_relocations():
            if r["r_info_type"] in (28, 29):
                calls += 1
                und += bool(exec_target and symtab.get_symbol(r["r_info_sym"])["st_shndx"] == "SHN_UNDEF")
    assert mod.reloc_counts["R_ARM_CALL"] + mod.reloc_counts["R_ARM_JUMP24"] == calls > 200_000
    via = (mod.branches["plt"] != 0).sum()
    assert via == und                                           # kernel calls, and only they, go through veneers
    used = len([e for e in mod.plt_entries if not e.fixed])
    assert used <= mod.plt_counts["v6"].total


def test_unload_frees_memory_and_exports_and_refuses_while_used():
    s = session()
    exp = s.load(sample("exporter-arm.ko"))
    imp = s.load(sample("importer-arm.ko"))
    with pytest.raises(ArmloadError, match="in use by: importer") as e:
        s.unload(exp)
    assert e.value.errno == -16
    s.unload(imp)
    s.unload(exp)
    assert not s.modules and not s.export_tables
    again = s.load(sample("exporter-arm.ko"))
    assert again.regions[0].base == exp.regions[0].base


def test_percpu_areas_are_per_module():
    from armload.loader.layout import ModuleAllocator
    a = ModuleAllocator(KernelConfig())
    x = a.alloc_percpu(0x40, 8)
    y = a.alloc_percpu(0x10, 64)
    assert y >= x + 0x40 and y % 64 == 0
    a.free_percpu(x)
    assert a.alloc_percpu(0x20, 4) == x


def test_symbolize_prefers_innermost_and_first_alias():
    mod = session().load(sample("hello-arm.ko"))
    init = mod.init_addr
    assert mod.symbolize(init + 4).startswith("hello_init+0x4/")
    assert mod.symbolize(0x1000) is None
