"""modprobe's alias lookup (armload/kernel/modtree.py: Aliases, alias_index): a pattern without
wildcards by its text, one with them by its literal head and then fnmatch, against the plain rule
(fnmatch of every pattern of every module) on made-up tables and on the Debian tree's modules.alias."""
import fnmatch
import os

import pytest
from hypothesis import given, strategies as st

from armload.kernel import debian, modtree
from armload.kernel.modtree import Aliases, alias_index, tree_index

from testinputs import require_input


def _every(table, want):
    """The rule itself: every module one of whose patterns fnmatches `want`."""
    return sorted({p for pat, p in table if fnmatch.fnmatchcase(want, pat)})


def _index(monkeypatch, table):
    """alias_index over a made-up tree: path -> its alias= patterns."""
    by_path = {}
    for pat, p in table:
        by_path.setdefault(p, []).append(pat)
    monkeypatch.setattr(modtree, "read_modinfo", lambda path: ({"alias": by_path[path]}, None))
    return alias_index({os.path.basename(p): p for p in by_path})


TABLE = [("crypto-crc32c", "/t/crc32c_generic.ko"), ("crypto-crc32c-*", "/t/crc32c_arm.ko"),
         ("fs-xfs", "/t/xfs.ko"), ("char-major-10-*", "/t/misc.ko"), ("*", "/t/any.ko"),
         ("net-pf-[0-9]", "/t/pf.ko"), ("of:N*T*Cfsl,imx6q-flexcan", "/t/flexcan.ko"),
         ("of:N*T*Cfsl,imx6q-flexcan", "/t/flexcan2.ko"), ("crypto-crc32c", "/t/crc32c_arm.ko"),
         ("pci:v00008086d*", "/t/e1000.ko"), ("[", "/t/bracket.ko")]


@pytest.mark.parametrize("want", ["crypto-crc32c", "crypto-crc32c-generic", "crypto-crc32", "fs-xfs", "fs-xfs2",
                                  "char-major-10-229", "char-major-1", "net-pf-7", "net-pf-77",
                                  "of:NcanT(null)Cfsl,imx6q-flexcan", "pci:v00008086d00001234", "[", "", "x"])
def test_lookup_is_fnmatch_of_every_pattern(monkeypatch, want):
    assert _index(monkeypatch, TABLE).lookup(want) == _every(TABLE, want)


def test_exact_and_wild_patterns_are_kept_apart(monkeypatch):
    a = _index(monkeypatch, TABLE)
    assert a.exact["crypto-crc32c"] == ["/t/crc32c_arm.ko", "/t/crc32c_generic.ko"]     # name order, both kept
    assert a.wild["crypto-crc32c-"] == [("crypto-crc32c-*", "/t/crc32c_arm.ko")]
    # an unclosed "[" is literal to fnmatch, but as a wildcard's head it is only a candidate: still exact
    assert a.wild[""] == [("*", "/t/any.ko"), ("[", "/t/bracket.ko")] and a.wild["net-pf-"] == [("net-pf-[0-9]", "/t/pf.ko")]
    assert a.wild["of:N"] == [("of:N*T*Cfsl,imx6q-flexcan", "/t/flexcan.ko"),
                              ("of:N*T*Cfsl,imx6q-flexcan", "/t/flexcan2.ko")]
    assert a.lookup("crypto-crc32c") == ["/t/any.ko", "/t/crc32c_arm.ko", "/t/crc32c_generic.ko"]
    assert Aliases().lookup("anything") == []


PIECES = st.sampled_from(["a", "b", "-", ":", "*", "?", "[ab]", "[!a]", "["])


@given(st.lists(st.tuples(st.lists(PIECES, max_size=5).map("".join), st.sampled_from("pqrs")), max_size=12),
       st.lists(st.sampled_from("ab-:[!]"), max_size=6).map("".join))
def test_lookup_equals_the_rule_for_any_table(table, want):
    table = [(pat, f"/t/{p}.ko") for pat, p in table]
    by_path = {}
    for pat, p in table:
        by_path.setdefault(p, []).append(pat)
    orig = modtree.read_modinfo
    modtree.read_modinfo = lambda path: ({"alias": by_path[path]}, None)
    try:
        a = alias_index({os.path.basename(p): p for p in by_path})
    finally:
        modtree.read_modinfo = orig
    assert a.lookup(want) == _every(table, want)


def test_the_debian_trees_requests_resolve_as_before():
    """The requests Debian's modules make (crypto-, fs-, net-pf-, char-major-, nls_...) resolve on
    the real tree's 22,521 aliases exactly as fnmatch over all of them does."""
    index = tree_index(require_input(debian.MODULES, "make test-inputs"))
    a = alias_index(index)
    table = [(pat, p) for pats, p in ((v, p) for p in sorted(set(index.values()))
                                     for v in [modtree.read_modinfo(p)[0].get("alias", [])]) for pat in pats]
    assert len(table) > 20000
    for want in ("crypto-crc32c", "crypto-sha256", "crypto-aes", "fs-xfs", "net-pf-29", "net-pf-16-proto-9",
                 "char-major-10-229", "nls_cp932", "crypto-ecb(aes)", "cpu:type:arm:feature:*", "of:NxT(null)",
                 "devname:fuse", "platform:sun4i_can", "crypto-nonexistent"):
        assert a.lookup(want) == _every(table, want), want
    assert a.lookup("crypto-crc32c") and a.lookup("fs-xfs") == [index["xfs"]]
