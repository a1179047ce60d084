"""The kernel differential's verdict per case (armload/inputs/booted_diff.py's classify, the rows of the
fuzzer's oracle and of `armload agree loader`): every row, both sides."""
import types

import pytest

from armload.inputs.booted_diff import classify


def _res(status, ret=None, *, refusal="", agrees=True, identical=True, compared=0, differences=0):
    loader = types.SimpleNamespace(refusal=refusal, agrees=agrees, identical=identical, compared=compared,
                                   differences=differences)
    return types.SimpleNamespace(status=status, ret=ret, loader=loader)


@pytest.mark.parametrize("res,row", [
    (_res("returned", 0, compared=8192), "both-accept"),
    (_res("returned", -19, compared=8192), "both-accept"),                      # init's error: loaded all the same
    (_res("oops", compared=8192), "both-accept"),                              # the module's own init crashed
    (_res("refused", -8, refusal="unknown relocation: 10"), "both-refuse"),
    (_res("refused", -22, refusal="x", agrees=False), "both-refuse"),
    (_res("returned", 0, refusal="6.1 reads it unchecked"), "overread"),
    (_res("returned", 0, refusal="a refusal 6.1 does not make"), "kernel-only"),
    (_res("refused", -2), "armload-only"),
    (_res("refused", -22, agrees=True, refusal=""), "both-accept"),             # refused after loading
    (_res("oops", refusal="6.1 dereferences it"), "kernel-crashed"),
    (_res("oops"), "kernel-crashed/armload-accepted"),
    (_res("budget"), "kernel-crashed/armload-accepted"),
])
def test_rows(res, row):
    if row == "armload-only":
        res.loader.agrees = False
    assert classify(res)[0] == row
