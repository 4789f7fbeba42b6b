"""hostlist_expand / hostlist_fold: Slurm's hostlist rules, against python-hostlist and scontrol."""

import hostlist as python_hostlist
import pytest
from ansible.errors import AnsibleFilterError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpucluster.ops.plugins.filter.hostlist_expand import FilterModule as ExpandModule
from ansible_collections.gpucluster.ops.plugins.filter.hostlist_expand import hostlist_expand
from ansible_collections.gpucluster.ops.plugins.filter.hostlist_fold import FilterModule as FoldModule
from ansible_collections.gpucluster.ops.plugins.filter.hostlist_fold import hostlist_fold
from ansible_collections.gpucluster.ops.plugins.module_utils import _hostlist
from ansible_collections.gpucluster.ops.tests.unit.plugins.slurm_helpers import needs_scontrol, scontrols


def test_registered():
    assert ExpandModule().filters()["hostlist_expand"] is hostlist_expand
    assert FoldModule().filters()["hostlist_fold"] is hostlist_fold


@pytest.mark.parametrize("expr, names", [
    ("gpu[001-003]", ["gpu001", "gpu002", "gpu003"]),
    ("gpu[8-10]", ["gpu8", "gpu9", "gpu10"]),
    ("gpu[08-10]", ["gpu08", "gpu09", "gpu10"]),
    ("gpu[001-10]", ["gpu%03d" % i for i in range(1, 11)]),
    ("gpu[1,3-4],login01", ["gpu1", "gpu3", "gpu4", "login01"]),
    ("rack[1-2]-gpu[01-02]", ["rack1-gpu01", "rack1-gpu02", "rack2-gpu01", "rack2-gpu02"]),
    ("[1-2]", ["1", "2"]),
    ("n1,n1", ["n1", "n1"]),
    ("", []),
])
def test_expand(expr, names):
    assert hostlist_expand(expr) == names


def test_expand_list_input():
    assert hostlist_expand(["gpu[1-2]", "cpu1"]) == ["gpu1", "gpu2", "cpu1"]


@pytest.mark.parametrize("expr, text", [
    ("unit[0-1]rack", "text 'rack' after the last bracket range in 'unit[0-1]rack' (Slurm 22.05 rejects it)"),
    ("gpu[01-", "unclosed '[' in 'gpu[01-'"),
    ("gpu[05-01]", "range '05-01' in 'gpu[05-01]' runs backwards"),
    ("gpu[1-03]", "ambiguous zero padding in range '1-03'"),
    ("gpu[01-]", "bad range '01-'"),
    ("gpu[]", "empty range in 'gpu[]'"),
    ("gpu[1,,2]", "empty range"),
    ("gpu[a-b]", "bad range 'a-b'"),
    ("gpu[[1]]", "nested '['"),
    ("gpu]1", "']' without '['"),
    ("a,,b", "empty name"),
    ("gpu 1", "whitespace"),
    ("n[0-65536]", "more than 65536 names"),
    ("a[0-65535]b[0-65535]", "more than 1000000 names"),
])
def test_expand_errors_name_the_offending_text(expr, text):
    with pytest.raises(AnsibleFilterError) as err:
        hostlist_expand(expr)
    assert text in str(err.value)


@pytest.mark.parametrize("names, sort, folded", [
    (["gpu001", "gpu002", "gpu010"], True, "gpu[001-002,010]"),
    (["gpu3", "gpu1", "gpu2", "gpu1"], True, "gpu[1-3]"),
    (["gpu3", "gpu1", "gpu2"], False, "gpu[3,1-2]"),
    (["x9", "x10", "x11"], True, "x[9-11]"),
    (["x09", "x10", "x100"], True, "x[09-10,100]"),
    (["a1", "a01", "a", "b2"], True, "a,a[1,01],b2"),
    (["rack10-n1", "rack9-n1", "rack9-n2"], True, "rack9-n[1-2],rack10-n1"),
    (["rack1-gpu01", "rack1-gpu02", "rack2-gpu01"], True, "rack1-gpu[01-02],rack2-gpu01"),
    ([], True, ""),
])
def test_fold(names, sort, folded):
    assert hostlist_fold(names, sort=sort) == folded


def test_fold_accepts_an_expression():
    assert hostlist_fold("gpu[3-4],gpu[1-2]") == "gpu[1-4]"


@pytest.mark.parametrize("names, text", [
    (["gpu[1]"], "not a valid node name"),
    (["a,b"], "not a valid node name"),
    ([""], "not a valid node name"),
    (["gp u1"], "not a valid node name"),
    (["gpü1"], "not ASCII"),
    (["n1234567890"], "longer than 9 digits"),
])
def test_fold_errors(names, text):
    with pytest.raises(AnsibleFilterError, match=text):
        hostlist_fold(names)


def test_fold_rejects_bad_sort_flag():
    with pytest.raises(AnsibleFilterError, match="sort"):
        hostlist_fold(["a1"], sort="yes")


# --- properties ------------------------------------------------------------------------------------------------------

PREFIXES = st.sampled_from(["gpu", "a", "rack1-gpu", "rack10-n", "rack9-n", "x0", "n-", "node.b", ""])
NAMES = st.one_of(
    st.builds(lambda p, w, n: p + "%0*d" % (w, n), PREFIXES, st.integers(1, 4), st.integers(0, 1200)),
    st.builds(lambda p, n: p + str(n), PREFIXES, st.integers(0, 1200)),
    st.sampled_from(["login", "ctl", "gpu", "a"]),
)
NAME_SETS = st.lists(NAMES, min_size=1, max_size=25)


@given(NAME_SETS)
def test_fold_expand_round_trip(names):
    unique = list(dict.fromkeys(names))
    assert _hostlist.expand(hostlist_fold(names)) == _hostlist.sorted_names(names)
    assert sorted(_hostlist.sorted_names(names)) == sorted(unique)
    assert _hostlist.expand(hostlist_fold(names, sort=False)) == unique


@given(NAME_SETS)
def test_sorted_fold_ignores_input_order(names):
    assert hostlist_fold(names) == hostlist_fold(list(reversed(names)))


@given(st.text(max_size=40))
def test_expand_raises_only_hostlist_errors(text):
    try:
        result = _hostlist.expand(text)
    except _hostlist.HostlistError:
        return
    assert isinstance(result, list)


EXPRESSIONS = st.lists(
    st.builds(lambda p, lo, n, w: "%s[%0*d-%0*d]" % (p, w, lo, w, lo + n), st.sampled_from(["gpu", "r1-n", "a"]),
              st.integers(0, 50), st.integers(0, 20), st.integers(1, 3)),
    min_size=1, max_size=4).map(",".join)


@given(EXPRESSIONS)
def test_expand_agrees_with_python_hostlist(expr):
    assert _hostlist.expand(expr) == python_hostlist.expand_hostlist(expr, allow_duplicates=True)


def test_python_hostlist_accepts_what_slurm_rejects():
    """Why Slurm's rules are checked on top: python-hostlist takes text after the last range."""
    assert python_hostlist.expand_hostlist("unit[0-1]rack") == ["unit0rack", "unit1rack"]
    with pytest.raises(_hostlist.HostlistError):
        _hostlist.expand("unit[0-1]rack")


# --- against scontrol ------------------------------------------------------------------------------------------------

SCONTROLS = scontrols()
SLOW = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@needs_scontrol
@SLOW
@given(NAME_SETS)
def test_fold_equals_scontrol_hostlist(names):
    unique = list(dict.fromkeys(names))
    for scontrol in SCONTROLS:
        rc, out, err = scontrol.run("show", "hostlistsorted", ",".join(unique))
        assert (rc, err) == (0, "")
        assert hostlist_fold(names) == out.strip(), scontrol.command
        rc, out, err = scontrol.run("show", "hostlist", ",".join(unique))
        assert hostlist_fold(unique, sort=False) == out.strip(), scontrol.command


@needs_scontrol
@SLOW
@given(EXPRESSIONS)
def test_expand_equals_scontrol_hostnames(expr):
    for scontrol in SCONTROLS:
        rc, out, err = scontrol.run("show", "hostnames", expr)
        assert (rc, err) == (0, "")
        assert hostlist_expand(expr) == out.split(), scontrol.command


@needs_scontrol
@pytest.mark.parametrize("expr", ["gpu[05-01]", "gpu[]", "gpu[a-b]", "n[0-65536]"])
def test_scontrol_also_rejects(expr):
    """Slurm prints "Invalid hostlist" (and may still exit 0): read stderr, not the exit code."""
    for scontrol in SCONTROLS:
        _rc, _out, err = scontrol.run("show", "hostnames", expr)
        assert "Invalid hostlist" in err, scontrol.command


@needs_scontrol
def test_scontrol_versions_differ_where_we_are_strict():
    """22.05 rejects unit[0-1]rack and reads gpu[01- as a node "gpu]"; 24.11 takes the suffix and rejects gpu[01-.
    gpu[1-03] silently loses its padding in both. All three are errors here (allow_suffix for 24.11 configs)."""
    for scontrol in SCONTROLS:
        suffix = scontrol.run("show", "hostnames", "unit[0-1]rack")
        unclosed = scontrol.run("show", "hostnames", "gpu[01-")
        if scontrol.version == "22.05":
            assert "Invalid hostlist" in suffix[2]
            assert unclosed[1].split() == ["gpu]"]
        else:
            assert suffix[1].split() == _hostlist.expand("unit[0-1]rack", allow_suffix=True) == ["unit0rack", "unit1rack"]
            assert "Invalid hostlist" in unclosed[2]
        assert scontrol.run("show", "hostnames", "gpu[1-03]")[1].split() == ["gpu1", "gpu2", "gpu3"]


def test_expand_is_python_hostlist_under_slurm_rules(monkeypatch):
    """The filter expands with python-hostlist; without the library it says what to install."""
    from ansible_collections.gpucluster.ops.plugins.plugin_utils import _filter_util as module

    calls = []
    real = python_hostlist.expand_hostlist

    def spy(expr, allow_duplicates=False, sort=False):
        calls.append((expr, allow_duplicates, sort))
        return real(expr, allow_duplicates=allow_duplicates, sort=sort)

    monkeypatch.setattr(module.python_hostlist, "expand_hostlist", spy)
    assert hostlist_expand("gpu[01-02],gpu01") == ["gpu01", "gpu02", "gpu01"]
    assert calls == [("gpu[01-02],gpu01", True, False)]
    with pytest.raises(AnsibleFilterError, match="after the last bracket"):
        hostlist_expand("unit[0-1]rack")
    assert len(calls) == 1
    monkeypatch.setattr(module, "python_hostlist", None)
    with pytest.raises(AnsibleFilterError, match="pip install python-hostlist"):
        hostlist_expand("gpu01")
