"""What the filters share (plugin_utils/_filter_util.py); each filter's own tests hold its messages."""

import re

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.plugin_utils._filter_util import (
    check_host_names, filter_errors, valid_hostname)


class WrappedError(Exception):
    pass


@filter_errors(WrappedError, "some_filter")
def _prefixed(value):
    """Raise what it is given."""
    raise value


@filter_errors((WrappedError, KeyError))
def _plain(value):
    raise value


def test_the_wrapped_errors_become_filter_errors_with_the_filter_name():
    with pytest.raises(AnsibleFilterError, match=r"^some_filter: host a: bad$"):
        _prefixed(WrappedError("host a: bad"))
    with pytest.raises(AnsibleFilterError, match=r"^host a: bad$"):
        _plain(WrappedError("host a: bad"))
    with pytest.raises(AnsibleFilterError, match=r"^'x'$"):
        _plain(KeyError("x"))


def test_other_errors_pass_and_the_filter_keeps_its_name():
    with pytest.raises(ValueError):
        _prefixed(ValueError("not wrapped"))
    with pytest.raises(AnsibleFilterError, match=r"^already$"):
        _prefixed(AnsibleFilterError("already"))
    assert _prefixed.__name__ == "_prefixed" and _prefixed.__doc__ == "Raise what it is given."


@pytest.mark.parametrize("hosts", [["a", "b"], ("a",), [], {"a": 1}, iter(["a"])])
def test_a_list_of_host_names_passes(hosts):
    check_host_names(hosts, "f")


@pytest.mark.parametrize("hosts,refuse", [("a,b", (str,)), (None, (str,)), (3, (str,)), ({"a": 1}, (str, dict)),
                                          (b"a", (str, bytes))])
def test_anything_else_names_the_filter_and_the_value(hosts, refuse):
    with pytest.raises(AnsibleFilterError, match=r"^f expects a list of host names, got %s$" % re.escape(repr(hosts))):
        check_host_names(hosts, "f", refuse=refuse)


def test_host_names_follow_rfc_1123_unless_told_otherwise():
    assert valid_hostname("gpu01.cluster.local.") and valid_hostname("a" * 63)
    for bad in ("", "-gpu", "gpu-", "gpu_01", "a" * 64, ".".join(["a" * 63] * 4) + ".aa", "gpu 01"):
        assert not valid_hostname(bad), bad
    assert valid_hostname("gpu_01", re.compile(r"^[a-z0-9_]+$"))
