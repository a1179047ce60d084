"""kallsyms (issue 5): build like scripts/kallsyms, read back from bytes and from Debian's real
6.1 armmp zImage, four lookup strategies that must agree, bad input."""
from __future__ import annotations

import hashlib
import io
import os
import random
import re
import shutil
import struct
import subprocess

import pytest

from armload.kernel import kallsyms as K
from armload.cli import main as cli_main
from armload.errors import KernelFileError
from armload.kernel import zimage
from armload.kernel.kallsyms import cache as KC
from armload.kernel.kallsyms.lookup import KallsymsTable
from testinputs import require_input
from oracles.kallsyms_select import select as select_6_1
from armload.kernel import debian
from testinputs import ROOT

CACHE = os.path.join(ROOT, ".cache")
IMAGE = debian.VMLINUZ
SYMVERS = os.path.join(CACHE, "linux-headers-6.1.0-50-armmp/usr/src/linux-headers-6.1.0-50-armmp/Module.symvers")
MODDIR = debian.MODULES
SCRIPTS_KALLSYMS = os.path.join(CACHE, "linux-kbuild-6.1/usr/lib/linux-kbuild-6.1/scripts/kallsyms")


# ----------------------------------------------------------------------------------------------
# synthetic System.map-like input
# ----------------------------------------------------------------------------------------------
WORDS = ["init", "exit", "probe", "remove", "get", "put", "alloc", "free", "lock", "unlock", "read", "write",
         "dev", "pci", "usb", "net", "skb", "irq", "dma", "clk", "reg", "map", "page", "cache", "sched",
         "mutex", "spin", "rcu", "sys", "do", "handle", "update", "show", "store", "ops", "fn"]


def synth_symbols(n=3000, seed=7):
    """nm-order (addr, type, name) input: text range, init text, data, dups, aliases, ignored ones."""
    rng = random.Random(seed)
    out = [(0xC0008000, "T", "_text"), (0xC0001000, "A", "absolute_thing"), (0xC0004000, "D", "early_data")]
    stext = 0xC0100000
    out.append((stext, "T", "_stext"))
    out.append((stext, "T", "__idmap_text_start"))
    out.append((stext, "T", "__turn_on"))
    a = stext
    used = set()
    for i in range(n):
        a += rng.choice((4, 8, 16, 32, 64, 128, 0))
        k = rng.randint(1, 4)
        name = "_".join(rng.choice(WORDS) for _ in range(k))
        if rng.random() < 0.1:
            name = "__" + name
        if rng.random() < 0.05:
            name += "_" + str(rng.randint(0, 99))
        typ = rng.choice("TTTtttW")
        if name in used and rng.random() < 0.7:
            name += f"_{i}"
        used.add(name)
        out.append((a, typ, name))
    # one very long name (2-byte length prefix even after compression)
    a += 16
    out.append((a, "t", "".join(f"q{x}z{x % 7}" for x in range(60))))
    # a duplicated static name at two addresses, and an alias
    out.append((a + 8, "t", "dup_static"))
    out.append((stext + 0x40, "t", "dup_static"))
    out.append((a + 8, "T", "alias_of_dup"))
    out.append((a + 12, "t", "foo_veneer"))              # ignored (6.1 suffix list)
    out.append((a + 12, "t", "__kcfi_typeid_foo"))       # ignored (6.1 prefix list)
    out.append((a + 12, "U", "undefined_thing"))
    etext = a + 0x100
    out.append((etext, "T", "_etext"))
    out.append((etext, "T", "same_as_etext"))           # corner case: dropped
    out.append((etext + 0x10, "D", "some_data"))          # outside the text ranges
    out.append((etext + 0x20, "D", "__start_mysection"))  # 6.1: dropped (mainline: kept)
    si = etext + 0x10000
    out.append((si, "T", "_sinittext"))
    for j in range(40):
        out.append((si + 0x20 * (j + 1), "t", f"init_{rng.choice(WORDS)}_{j}"))
    out.append((si + 0x2000, "T", "_einittext"))
    rng.shuffle(out)                                       # nm order is not address order
    return out


def expected_selection(symbols):
    """The symbols scripts/kallsyms keeps for synth_symbols(), address order (independent sketch
    of scripts/kallsyms.c in tests/oracles, sharing no code with armload.kernel.kallsyms)."""
    return select_6_1(symbols)


@pytest.fixture(scope="module")
def synth():
    syms = synth_symbols()
    tables = K.build_tables(syms)
    return syms, tables


@pytest.fixture(scope="module")
def synth_table(synth):
    _, tables = synth
    blob, labels = tables.to_bytes()
    pad = bytes(random.Random(3).randrange(256) for _ in range(4096))
    return KallsymsTable.from_bytes(pad + blob + pad, source="synthetic")


# ----------------------------------------------------------------------------------------------
# build
# ----------------------------------------------------------------------------------------------
def test_selection_rules(synth):
    syms, tables = synth
    names = {n for _, _, n in tables.symbols}
    assert {"_stext", "_etext", "_sinittext", "_einittext", "dup_static", "alias_of_dup"} <= names
    for dropped in ("_text", "absolute_thing", "early_data", "foo_veneer", "__kcfi_typeid_foo",
                    "undefined_thing", "same_as_etext", "some_data", "__start_mysection"):
        assert dropped not in names, dropped
    # mainline rules keep __start_/__stop_ and drop only u/n (+most A) types
    main = K.build_tables(syms, rules="mainline")
    assert "__start_mysection" in {n for _, _, n in main.symbols}


def test_address_sort_tie_rules():
    syms = [(0x100, "T", "_stext"), (0x200, "W", "aaa_weak"), (0x200, "T", "__abc_end"),
            (0x200, "T", "___three"), (0x200, "T", "_one"), (0x200, "t", "zzz"), (0x300, "T", "_etext")]
    t = K.build_tables(syms)
    order = [n for a, _, n in t.symbols if a == 0x200]
    # non-weak first; linker-provided (__abc_end) after the rest; fewer '_' first; input order last
    assert order == ["zzz", "_one", "___three", "__abc_end", "aaa_weak"]
    assert t.relative_base == 0x100 and t.offsets[0] == 0


def test_tables_shape(synth):
    _, t = synth
    assert t.num_syms == len(t.symbols) == len(t.offsets) == len(t.seqs_of_names)
    assert len(t.markers) == (t.num_syms + 255) // 256 and t.markers[0] == 0
    assert len(t.token_table) == 256
    assert sorted(t.seqs_of_names) == list(range(t.num_syms))
    # slots are filled from 255 down: the highest free slot holds a pair
    pairs = [i for i, v in enumerate(t.best_table) if isinstance(v, tuple)]
    assert pairs and max(pairs) == 255 - sum(1 for i in range(max(pairs) + 1, 256) if isinstance(t.best_table[i], int))
    # the one huge name needs the two-byte ULEB128 length
    long = [n for _, _, n in t.symbols if len(n) > 200]
    assert long
    blob, labels = t.to_bytes()
    assert all(v % 4 == 0 for v in labels.values())
    tab = KallsymsTable.from_tables(t)
    i = next(i for i, s in enumerate(t.symbols) if s[2] == long[0])
    off = tab.symbol_offset(i)
    assert t.names[off] & 0x80


def test_roundtrip_bytes_both_layouts(synth):
    syms, t = synth
    want = expected_selection(syms)
    for layout in ("6.1", "mainline"):
        blob, labels = t.to_bytes(layout=layout)
        tab = KallsymsTable.from_bytes(b"\xaa" * 1000 + blob + b"\x55" * 333, source=layout)
        assert list(tab) == want
        assert tab.seqs == t.seqs_of_names and tab.seqs_source == "image"
        assert tab.token_table == t.token_table


def test_roundtrip_without_seqs_builds_them(synth):
    _, t = synth
    blob, labels = t.to_bytes(layout="6.1")
    s0 = labels["kallsyms_seqs_of_names"]
    # the pre-backport 6.1 layout: no seqs between markers and token table
    no_seqs = blob[:s0] + blob[labels["kallsyms_token_table"]:]
    tab = KallsymsTable.from_bytes(no_seqs, source="no-seqs")
    assert tab.seqs_source.startswith("built")
    assert tab.seqs == t.seqs_of_names


def test_absolute_addresses_roundtrip(synth):
    syms, _ = synth
    t = K.build_tables(syms, base_relative=False)
    blob, labels = t.to_bytes()
    assert "kallsyms_addresses" in labels
    tab = KallsymsTable.from_bytes(blob)
    assert list(tab) == expected_selection(syms)


def _parse_scripts_output(text: str) -> dict:
    """Values of the .S that scripts/kallsyms prints."""
    out, cur = {}, None
    for line in text.splitlines():
        m = re.match(r"^(kallsyms_\w+):", line)
        if m:
            cur = m.group(1)
            out[cur] = []
            continue
        line = line.split("/*")[0].strip()
        if cur is None or not line:
            continue
        if line.startswith(".byte"):
            out[cur].append(bytes(int(x, 16) for x in line[5:].split(",")))
        elif line.startswith((".long", ".short")):
            out[cur].append(int(line.split()[1], 0))
        elif line.startswith(".asciz"):
            out[cur].append(line.split(None, 1)[1][1:-1].encode("latin-1"))
        elif line.startswith("PTR"):
            out[cur].append(line)
    return out


@pytest.mark.inputs(SCRIPTS_KALLSYMS, how="Debian linux-kbuild-6.1 scripts/kallsyms: make test-inputs")
def test_matches_debian_scripts_kallsyms_binary(tmp_path, synth):
    """Differential test against the real 6.1.y scripts/kallsyms (x86-64 binary from linux-kbuild-6.1)."""
    syms, t = synth
    m = tmp_path / "in.map"
    m.write_text("".join(f"{a:08x} {ty} {n}\n" for a, ty, n in syms))
    try:
        r = subprocess.run([SCRIPTS_KALLSYMS, "--base-relative", str(m)], capture_output=True, text=True,
                           timeout=60, encoding="latin-1")
    except OSError as e:
        pytest.fail(f"cannot run scripts/kallsyms: {e}")
    assert r.returncode == 0, r.stderr
    ref = _parse_scripts_output(r.stdout)
    assert ref["kallsyms_num_syms"] == [t.num_syms]
    assert b"".join(ref["kallsyms_names"]) == t.names
    assert ref["kallsyms_markers"] == t.markers
    assert ref["kallsyms_token_table"] == t.token_table
    assert ref["kallsyms_token_index"] == t.token_index()
    assert ref["kallsyms_offsets"] == t.offsets
    assert [int.from_bytes(b, "big") for b in ref["kallsyms_seqs_of_names"]] == t.seqs_of_names
    assert ref["kallsyms_relative_base"] == [f"PTR\t_text + {t.relative_base - 0xC0008000:#x}"]


# ----------------------------------------------------------------------------------------------
# lookups on a synthetic table
# ----------------------------------------------------------------------------------------------
MISSES = ["", "nope", "init_x", "zzzz", "_", "dup_stati", "dup_staticc", "T", "\x7f", "alloc_fre"]


def _expected(symbols):
    exp = {}
    for a, _, n in symbols:
        exp[n] = min(a, exp.get(n, a))
    return exp


def test_all_strategies_agree_synthetic(synth_table):
    tab = synth_table
    syms = list(tab)
    exp = _expected(syms)
    q = [n for _, _, n in syms] + MISSES
    want = [exp.get(n) for n in q]
    assert [tab.lookup_bsearch(n) for n in q] == want
    assert [tab.lookup_bsearch_tokens(n) for n in q] == want
    assert tab.lookup_linear_many(q) == want
    assert tab.lookup_compressed_many(q) == want
    assert tab.lookup_batch(q) == want
    sample = random.Random(1).sample(q, 60) + MISSES
    assert [tab.lookup_linear(n) for n in sample] == [exp.get(n) for n in sample]
    assert [tab.lookup_compressed(n) for n in sample] == [exp.get(n) for n in sample]
    # duplicates: lowest address wins
    assert tab.lookup_bsearch("dup_static") == 0xC0100040 == tab.lookup_linear("dup_static")


def test_batch_bracket(synth_table):
    tab = synth_table
    assert not tab.in_batch
    tab.batch_begin()
    try:
        assert tab.in_batch
        assert tab.lookup_bsearch_tokens("dup_static") == 0xC0100040
        assert tab.lookup_batch(["dup_static", "nope"]) == [0xC0100040, None]
    finally:
        tab.batch_end()
    assert not tab.in_batch and tab._batch is None


def test_addr_to_name(synth_table):
    tab = synth_table
    syms = list(tab)
    addrs = [a for a, _, _ in syms]
    stext = tab.lookup_bsearch("_stext")
    # aliases: the first symbol at an address names it
    assert tab.addr_to_name(stext) == f"_stext+0x0/{(min(a for a in addrs if a > stext) - stext):#x}"
    dup = [a for a, _, n in syms if n == "alias_of_dup"][0]
    first_at = next(n for a, _, n in syms if a == dup)
    assert tab.addr_to_name(dup + 2).startswith(first_at + "+0x2/")
    # outside kernel text / init text
    assert tab.addr_to_name(stext - 4) is None
    assert tab.addr_to_name(tab.lookup_bsearch("_etext")) is None
    # the end of the last symbol: _einittext is excluded, the one before ends there
    ei = tab.lookup_bsearch("_einittext")
    assert tab.addr_to_name(ei) is None
    last = syms[-2]
    assert tab.addr_to_name(last[0]) == f"{last[2]}+0x0/{ei - last[0]:#x}"


def test_compress_query_equals_stored_bytes(synth, synth_table):
    _, t = synth
    tab = synth_table
    tab._compressor()
    off = 0
    for i in range(tab.num_syms):
        data, off = tab._record(off)
        a, ty, n = tab.symbol(i)
        assert tab.compress((ty + n).encode()) == data


def test_iter_and_system_map(synth_table, tmp_path):
    syms = list(synth_table)
    buf = io.StringIO()
    assert K.write_system_map(syms, buf) == len(syms)
    p = tmp_path / "System.map"
    K.write_system_map(syms, str(p))
    assert K.read_system_map(str(p)) == syms


# ----------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------
def test_random_bytes(tmp_path):
    p = tmp_path / "rand.bin"
    p.write_bytes(random.Random(5).randbytes(200_000))
    with pytest.raises(KernelFileError, match="no kallsyms token table"):
        K.symbols_from_image(str(p))


def test_x86_elf(tmp_path):
    # An x86-64 ELF header (e_machine 62) with a body: built here, not taken from the host's /bin.
    hdr = bytearray(64)
    hdr[0:4] = b"\x7fELF"
    hdr[4:7] = bytes([2, 1, 1])                         # ELFCLASS64, little-endian, EV_CURRENT
    hdr[16:18] = (2).to_bytes(2, "little")              # ET_EXEC
    hdr[18:20] = (62).to_bytes(2, "little")             # EM_X86_64
    hdr[20:24] = (1).to_bytes(4, "little")
    hdr[52:54] = (64).to_bytes(2, "little")             # e_ehsize
    p = tmp_path / "x86.elf"
    p.write_bytes(bytes(hdr) + random.Random(7).randbytes(100_000))
    with pytest.raises(KernelFileError, match="not an ARM kernel"):
        K.symbols_from_image(str(p))


def test_zimage_without_payload(tmp_path):
    p = tmp_path / "fake-zimage"
    blob = bytearray(random.Random(2).randbytes(50_000))
    blob[0x24:0x28] = zimage.ZIMAGE_MAGIC
    p.write_bytes(bytes(blob))
    with pytest.raises(KernelFileError, match="compressed payload"):
        K.symbols_from_image(str(p))


def test_truncated_synthetic_tables(synth):
    _, t = synth
    blob, labels = t.to_bytes()
    names = labels["kallsyms_names"]
    for cut in (names + 10, names + (labels["kallsyms_markers"] - names) // 2, labels["kallsyms_token_table"] + 100):
        with pytest.raises(KernelFileError):
            KallsymsTable.from_bytes(blob[:cut], source="cut")
    # a corrupted record length inside names
    bad = bytearray(blob)
    bad[names + len(t.names) // 2: names + len(t.names) // 2 + 40] = b"\x00" * 40
    with pytest.raises(KernelFileError):
        KallsymsTable.from_bytes(bytes(bad), source="corrupt")


def test_cli_errors(tmp_path, capsys):
    p = tmp_path / "rand.bin"
    p.write_bytes(b"\0" * 5000)
    assert cli_main(["kallsyms", str(p)]) == 1
    assert "no kallsyms token table" in capsys.readouterr().err
    assert cli_main(["kallsyms", str(tmp_path / "missing")]) == 1
    assert "cannot read" in capsys.readouterr().err


# ----------------------------------------------------------------------------------------------
# the decode cache: keyed on the image and on the decoder's code
# ----------------------------------------------------------------------------------------------
@pytest.fixture
def synth_image(synth, tmp_path, monkeypatch):
    """The synthetic tables inside a small raw Image, and an empty private cache directory."""
    _, tables = synth
    blob, _ = tables.to_bytes()
    img = tmp_path / "Image"
    img.write_bytes(b"\xe1" * 8192 + blob + b"\x00" * 4096)
    cache = tmp_path / "cache"
    monkeypatch.setenv("ARMLOAD_KALLSYMS_CACHE", str(cache))
    return str(img), cache


def test_cache_hit_returns_what_was_decoded(synth_image):
    img, cache = synth_image
    t1 = K.table_from_image(img)
    assert not t1.cached and t1.kind == "raw Image"
    t2 = K.table_from_image(img)
    assert t2.cached and list(t2) == list(t1) and t2.seqs == t1.seqs and t2.token_table == t1.token_table
    assert len(os.listdir(cache)) == 1
    t3 = K.table_from_image(img, use_cache=False)          # fresh: neither read nor written
    assert not t3.cached and t3.cache_path is None and list(t3) == list(t1)
    assert len(os.listdir(cache)) == 1


def test_cache_is_keyed_on_the_decoder_code(synth_image, monkeypatch):
    """A decode cached by other code is not used: a change to the decoder gives a new key."""
    img, cache = synth_image
    assert not K.table_from_image(img).cached
    assert K.table_from_image(img).cached
    monkeypatch.setattr(KC, "code_version", lambda: "0123456789abcdef")
    t = K.table_from_image(img)
    assert not t.cached and "0123456789abcdef" in os.path.basename(t.cache_path)
    assert len(os.listdir(cache)) == 2


def test_code_version_covers_the_decoder_and_lookup(tmp_path, monkeypatch):
    """code_version() hashes the payload (zimage.py), build.py, parse.py and lookup.py: editing any one changes it."""
    here = os.path.dirname(KC.__file__)
    orig = KC.code_version()
    files = ("build.py", "parse.py", "lookup.py", "../zimage.py")
    (tmp_path / "kallsyms").mkdir()
    for name in files:
        shutil.copy(os.path.join(here, name), tmp_path / "kallsyms" / name)
    monkeypatch.setattr(KC, "__file__", str(tmp_path / "kallsyms" / "cache.py"))
    v0 = KC.code_version()
    assert v0 == orig                    # the same bytes elsewhere: the same version (content, not path)
    seen = {v0}
    for name in files:
        with open(tmp_path / "kallsyms" / name, "a") as f:
            f.write("# edited\n")
        v = KC.code_version()
        assert v not in seen
        seen.add(v)


# ----------------------------------------------------------------------------------------------
# the real Debian 6.1 armmp image
# ----------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def real_image():
    return require_input(IMAGE, "real kernel image: make test-inputs")


@pytest.fixture(scope="module")
def real_fresh(real_image):
    """Decoded from the image now, without the cache: at least once in every test run."""
    t = K.table_from_image(real_image, use_cache=False)
    assert not t.cached and t.cache_path is None
    return t, list(t)


@pytest.fixture(scope="module")
def real(real_image):
    """The table through the decode cache (with the stored pair table, so lookups (b) are quick);
    test_real_cache_equals_fresh_decode checks it against the fresh decode."""
    t = K.table_from_image(real_image)
    return t, list(t)


def test_real_cache_equals_fresh_decode(real, real_fresh):
    (t, syms), (f, fsyms) = real, real_fresh
    assert syms == fsyms
    assert (t.names, t.markers, t.token_table, t.addresses, t.relative_base, t.seqs, t.labels) == \
        (f.names, f.markers, f.token_table, f.addresses, f.relative_base, f.seqs, f.labels)


def test_real_fresh_decode_matches_debian_scripts_kallsyms(real_image, real_fresh, tmp_path):
    """Independent oracle: Debian's own 6.1 scripts/kallsyms (linux-kbuild-6.1), run the way the
    armmp build runs it (--base-relative, no --all-symbols), over the freshly decoded symbols,
    must print exactly the tables that sit in the image at the decoded labels. A wrong name, type,
    address or order in the decode, or a wrong label, would give other bytes."""
    t, syms = real_fresh
    assert os.access(SCRIPTS_KALLSYMS, os.X_OK), \
        f"oracle missing: {SCRIPTS_KALLSYMS} (make test-inputs fetches linux-kbuild-6.1)"
    text = 0xC0008000                              # _text: PAGE_OFFSET + TEXT_OFFSET on ARM
    m = tmp_path / "decoded.map"
    m.write_text(f"{text:08x} T _text\n" + "".join(f"{a:08x} {ty} {n}\n" for a, ty, n in syms), encoding="latin-1")
    r = subprocess.run([SCRIPTS_KALLSYMS, "--base-relative", str(m)], capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr
    ref = _parse_scripts_output(r.stdout.decode("latin-1"))
    payload = zimage.image_payloads(real_image)[0][0]
    lab = t.labels
    n = len(syms)

    def u32s(label, count):
        return list(struct.unpack_from(f"<{count}I", payload, lab[label]))

    assert ref["kallsyms_num_syms"] == [n] == u32s("kallsyms_num_syms", 1)
    names = b"".join(ref["kallsyms_names"])
    assert payload[lab["kallsyms_names"]:lab["kallsyms_names"] + len(names)] == names
    assert ref["kallsyms_markers"] == u32s("kallsyms_markers", len(ref["kallsyms_markers"]))
    tokens = b"".join(x + b"\0" for x in ref["kallsyms_token_table"])
    assert payload[lab["kallsyms_token_table"]:lab["kallsyms_token_table"] + len(tokens)] == tokens
    assert ref["kallsyms_token_index"] == list(struct.unpack_from("<256H", payload, lab["kallsyms_token_index"]))
    assert ref["kallsyms_offsets"] == u32s("kallsyms_offsets", n)
    rb = re.fullmatch(r"PTR\t_text \+ (0x[0-9a-f]+)", ref["kallsyms_relative_base"][0])
    assert rb and text + int(rb.group(1), 16) == t.relative_base
    assert [int.from_bytes(b, "big") for b in ref["kallsyms_seqs_of_names"]] == t.seqs


def test_real_decode(real):
    t, syms = real
    assert t.num_syms == len(syms) > 40_000
    assert t.seqs_source == "image"              # Debian's 6.1.y carries the backported seqs_of_names
    names = {n for _, _, n in syms}
    assert {"_stext", "_etext", "_sinittext", "_einittext", "_printk", "kmalloc_trace", "start_kernel"} <= names
    addrs = [a for a, _, _ in syms]
    assert addrs == sorted(addrs) and addrs[0] == t.relative_base
    assert all(0xC0000000 <= a < 0xD0000000 for a in addrs)
    assert {ty for _, ty, _ in syms} <= set("TtWwDdRrBbAaVv")


def test_real_rebuild_reproduces_tables(real):
    """Feeding the decoded symbols back through build_tables gives the image's tables byte for byte:
    the token table, names, markers, offsets, relative base and seqs_of_names."""
    t, syms = real
    b = K.build_tables(syms, all_symbols=True)
    assert b.token_table == t.token_table
    assert b.names == t.names
    assert b.markers == t.markers
    assert b.addresses() == t.addresses and b.relative_base == t.relative_base
    assert b.seqs_of_names == t.seqs
    # the normal (text-range) selection keeps all of them too
    kept, _ = K.select_symbols(syms)
    assert len(kept) == t.num_syms


def test_real_all_strategies_agree_on_every_symbol(real):
    t, syms = real
    exp = _expected(syms)
    q = [n for _, _, n in syms] + MISSES + [n + "_nope" for _, _, n in syms[:200]]
    want = [exp.get(n) for n in q]
    assert [t.lookup_bsearch(n) for n in q] == want
    assert [t.lookup_bsearch_tokens(n) for n in q] == want
    assert t.lookup_batch(q) == want
    assert t.lookup_linear_many(q) == want           # (a): one scan, every name
    assert t.lookup_compressed_many(q) == want       # (b): every compressed query equals its record
    assert t.pair_ambiguities == []
    sample = random.Random(4).sample(q, 6) + MISSES[:3]
    assert [t.lookup_linear(n) for n in sample] == [exp.get(n) for n in sample]
    assert [t.lookup_compressed(n) for n in sample] == [exp.get(n) for n in sample]


def _branch_targets(ko):
    """Undefined symbols a .ko reaches with ARM branch relocations (so they are functions)."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.relocation import RelocationSection
    out = set()
    with open(ko, "rb") as f:
        elf = ELFFile(f)
        for sec in elf.iter_sections():
            if not isinstance(sec, RelocationSection) or not sec.name.startswith(".rel.text"):
                continue
            symtab = elf.get_section(sec["sh_link"])
            for r in sec.iter_relocations():
                if r["r_info_type"] in (1, 28, 29):      # R_ARM_PC24, R_ARM_CALL, R_ARM_JUMP24
                    s = symtab.get_symbol(r["r_info_sym"])
                    if s["st_shndx"] == "SHN_UNDEF" and s.name:
                        out.add(s.name)
    return out


def test_real_symvers_functions_found(real):
    """Every vmlinux export that modules call (a function by construction) is in kallsyms as text;
    Module.symvers alone has no types, so the function exports are those used as branch targets."""
    t, syms = real
    require_input(SYMVERS, "Module.symvers: make test-inputs")
    vmlinux = {ln.split("\t")[1] for ln in open(SYMVERS) if ln.split("\t")[2] == "vmlinux"}
    by_name = {}
    for a, ty, n in syms:
        by_name.setdefault(n, ty)
    found = vmlinux & set(by_name)
    assert len(found) / len(vmlinux) > 0.9
    kos = sorted(os.path.join(d, f) for d, _, fs in os.walk(MODDIR) for f in fs if f.endswith(".ko")) \
        if os.path.isdir(MODDIR) else []
    assert len(kos) > 3000, f"Debian modules not unpacked in {MODDIR} (make test-inputs)"
    called = set()
    for ko in kos[:: max(1, len(kos) // 40)][:40]:
        called |= _branch_targets(ko)
    funcs = called & vmlinux
    assert len(funcs) > 300
    missing = sorted(f for f in funcs if f not in by_name)
    assert not missing, missing[:20]
    assert all(by_name[f] in "TtWw" for f in funcs)


def test_real_addr_to_name(real):
    t, syms = real
    a = t.lookup_bsearch("_printk")
    s = t.addr_to_name(a + 8)
    assert re.fullmatch(r"_printk\+0x8/0x[0-9a-f]+", s)
    assert t.addr_to_name(t.lookup_bsearch("_stext") - 4) is None


def test_real_truncated_vmlinuz(real_image, tmp_path):
    p = tmp_path / "vmlinuz-trunc"
    data = open(real_image, "rb").read()
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(KernelFileError, match="truncated|could not be decompressed"):
        K.symbols_from_image(str(p))


def test_real_truncated_table_in_raw_image(real, tmp_path):
    t, _ = real
    payload = zimage.image_payloads(IMAGE)[0][0]
    nm = t.labels["kallsyms_names"]
    p = tmp_path / "Image-trunc"
    p.write_bytes(payload[: nm + 100_000])
    with pytest.raises(KernelFileError):
        K.table_from_image(str(p), use_cache=False)


def test_real_cli(real_image, capsys, tmp_path):
    assert cli_main(["kallsyms", real_image, "--lookup", "_printk", "--strategy", "d"]) == 0
    out = capsys.readouterr().out
    assert out.endswith(" _printk\n")
    addr = out.split()[0]
    assert cli_main(["kallsyms", real_image, "--addr", addr]) == 0
    assert "_printk+0x0/" in capsys.readouterr().out
    assert cli_main(["kallsyms", real_image, "--grep", "^kmalloc_trace$"]) == 0
    assert re.fullmatch(r"[0-9a-f]{8} T kmalloc_trace\n", capsys.readouterr().out)
    m = tmp_path / "System.map"
    assert cli_main(["kallsyms", real_image, "--system-map", str(m)]) == 0
    assert len(K.read_system_map(str(m))) > 40_000


def test_real_kernel_py_uses_image(real_image):
    from armload.kernel.config import KernelConfig
    from armload.kernel.provider import Kernel
    k = Kernel.from_files([real_image], KernelConfig())
    t = K.table_from_image(real_image)
    a = k.lookup_address("_printk")
    assert a == t.lookup_bsearch("_printk")
    assert t.lookup_bsearch("_stext") <= a < t.lookup_bsearch("_etext")
