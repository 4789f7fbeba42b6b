# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The "never raises" property of every output parser, as one test parametrised over the parsers: random input and
damaged copies of our own captures always give a result of the parser's documented shape, never an exception.

Each case is (input strategy, check). The check is the parser's own shape check, kept in the parser's test file
(``parse`` of test_dcgm/test_nccl/test_kernlog/test_fabricmanager, ``check_shape`` of test_ib, the contracts of test_nvlink and
test_nvsmi); the damaged inputs start from our own captures of the parser (tests/unit/fixtures/<area>/; for
nvidia-smi the h100/a100/v100 ones). Every case runs 150 examples of its own.
"""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ansible_collections.gpucluster.ops.plugins.module_utils import _nvlink
from ansible_collections.gpucluster.ops.plugins.module_utils._ib import parse_ibstat

import test_dcgm as dcgm
import test_fabricmanager as fabricmanager
import test_ib as ib
import test_kernlog as kernlog
import test_nccl as nccl
import test_nvlink as nvlink
import test_nvsmi as nvsmi
from parser_testlib import damaged_samples, garbage, samples, truncated

# Truncated kernel logs are parsed with since_epoch (2024-06-11 08:05 UTC), so that the since filter runs on them too.
KERNLOG_SINCE = kernlog.utc(2024, 6, 11, 8, 5)


def check_ibstat(data):
    ib.check_shape(parse_ibstat(data))


def check_kernlog_since(text):
    kernlog.parse(text, since_epoch=KERNLOG_SINCE)


def check_links(parser):
    return lambda text: nvlink.assert_links_contract(parser(text))


def check_topo(text):
    nvlink.assert_topo_contract(_nvlink.parse_topo_matrix(text))


def check_nvsmi(fmt):
    return lambda text: nvsmi.assert_contract(nvsmi.PARSERS[fmt](text), fmt)


def cases():
    """``pytest.param(strategy, check, id=...)`` for every parser and its two kinds of input."""
    # Random text or bytes (up to 2000), and a sample truncated with lines dropped or repeated.
    found = [
        ("dcgm", samples("dcgm"), dcgm.parse, dcgm.parse),
        ("nccl", samples("nccl"), nccl.parse, nccl.parse),
        ("kernlog", samples("kernlog"), kernlog.parse, check_kernlog_since),
        ("ibstat", samples("ib"), check_ibstat, check_ibstat),
        ("fabricmanager", samples("fabricmanager"), fabricmanager.parse, fabricmanager.parse),
    ]
    params = []
    for name, texts, on_garbage, on_truncated in found:
        params.append(pytest.param(garbage(), on_garbage, id=name + "-garbage"))
        params.append(pytest.param(truncated(texts), on_truncated, id=name + "-truncated"))
    # Random text, and a sample cut short with some bytes overwritten.
    damaged = [
        ("nvlink-status", samples("nvlink"), check_links(_nvlink.parse_nvlink_status)),
        ("nvlink-errors", samples("nvlink"), check_links(_nvlink.parse_nvlink_errors)),
        ("nvlink-topo", samples("nvlink"), check_topo),
    ] + [("nvsmi-" + fmt, samples("nvsmi", "h100", "a100", "v100"), check_nvsmi(fmt)) for fmt in ("xml", "text", "csv")]
    for name, texts, check in damaged:
        params.append(pytest.param(st.text(), check, id=name + "-text"))
        params.append(pytest.param(damaged_samples(texts), check, id=name + "-damaged"))
    return params


@pytest.mark.parametrize("inputs, check", cases())
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_parser_never_raises(inputs, check, data):
    check(data.draw(inputs, label="input"))
