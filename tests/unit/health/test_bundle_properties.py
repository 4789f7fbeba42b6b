"""Property tests over whole bundles: for a bundle and each input in it, any truncation, failure code, removal or
replacement by junk never gives a better verdict than the checker can stand behind.

- On a healthy bundle (verdict ok), a damaged input gives ``unknown`` or ``error``, never ok, info or warning,
  except the content of the inputs the checker declares unverifiable (``_health.CONTENT_UNVERIFIABLE``: any text is
  a valid kernel log), whose failure code and removal still count.
- On a faulty bundle, damaging an input other than the one that shows the fault keeps the verdict at ``error``.

Bundles come from the GPU simulator (tests/gpusim), the same one the fault-injection tests use.
"""

import os
import re
import shutil

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.gpucluster.ops.plugins.module_utils import _health
from ansible_collections.gpucluster.ops.tests.gpusim import gpusim

ENV = {"GPUSIM_NOW": "2026-11-30T07:00:00Z", "GPUSIM_HOSTNAME": "gpu-node-07"}
PROFILE_DIR = os.path.join(os.path.dirname(gpusim.__file__), "profiles")
PROFILES = {
    "h100-sxm-8": ({"gpu_count": 8, "gpu_model": "NVIDIA H100 80GB HBM3", "driver_version": "550.127.05",
                    "nvlinks_per_gpu": 18, "nvswitch": True, "ib_port_count": 8, "ib_rate_gbps": 400}, 300),
    "l40s-pcie-4": ({"gpu_count": 4, "gpu_model": "NVIDIA L40S", "nvlinks_per_gpu": 0, "ib_port_count": 1,
                     "ib_rate_gbps": 200}, 20),
}
# The inputs a deep check reads (the nvidia-smi fallbacks are removed so that the XML is the one source).
FILES = ("nvidia-smi-q.xml", "nvlink-status.txt", "nvlink-errors.txt", "kernel.log", "fabricmanager.state",
         "dcgmi-diag.json", "nccl-all-reduce.txt", "captured_at")
SYSFS_PORT_FILES = ("state", "phys_state", "rate", "link_layer")
RANK = {"ok": 0, "info": 0, "warning": 1, "unknown": 2, "error": 3}
_CACHE = {}


def _bundle(tmp_root, profile, faults=()):
    key = (profile, faults)
    if key not in _CACHE:
        path = os.path.join(tmp_root, "%s-%d" % (profile, len(_CACHE)))
        argv = ["gpusim", "bundle", path, "--profile", os.path.join(PROFILE_DIR, profile + ".json")]
        for fault in faults:
            argv += ["--fault", fault]
        assert gpusim.main(argv, env=dict(ENV))[0] == 0
        for fallback in ("nvidia-smi-q.txt", "nvidia-smi-query.csv"):
            os.remove(os.path.join(path, fallback))
        _CACHE[key] = path
    return _CACHE[key]


def _config(profile):
    expected, nccl_min = PROFILES[profile]
    return _health.load_config(None, {"node": "gpu-node-07", "expected": dict(expected),
                                      "thresholds": {"nccl_busbw_min_gbps": nccl_min}})


def _inputs(bundle, profile):
    """Paths of every input the deep check of this profile reads."""
    paths = [os.path.join(bundle, name) for name in FILES if os.path.exists(os.path.join(bundle, name))]
    if not PROFILES[profile][0].get("nvswitch"):
        paths = [p for p in paths if not p.endswith("fabricmanager.state")]
    if not PROFILES[profile][0].get("nvlinks_per_gpu"):
        paths = [p for p in paths if "nvlink" not in os.path.basename(p)]
    sysfs = os.path.join(bundle, "sys-class-infiniband")
    for device in sorted(os.listdir(sysfs)):
        ports = os.path.join(sysfs, device, "ports")
        for port in sorted(os.listdir(ports)):
            with open(os.path.join(ports, port, "link_layer")) as handle:
                judged = handle.read().strip() == "InfiniBand"   # RoCE ports are not InfiniBand ports to check
            paths.extend(os.path.join(ports, port, name) for name in SYSFS_PORT_FILES
                         if judged or name == "link_layer")
    return paths


def _verdict(bundle, profile):
    result, _runner = _health.run(_config(profile), level="deep", from_dir=bundle, use_state=False)
    return result


def _read(path):
    with open(path, "rb") as handle:
        return handle.read()


def _unverifiable(path):
    return os.path.basename(path) in [f for n, f, _l in _health.INPUTS if n in _health.CONTENT_UNVERIFIABLE]


MUTATIONS = st.one_of(
    st.tuples(st.just("truncate"), st.floats(min_value=0.0, max_value=1.0)),
    st.tuples(st.just("rc"), st.sampled_from(["1\n", "2\n", "124\n", "137\n", "255\n", "-9\n", "x\n"])),
    st.tuples(st.just("junk"), st.binary(max_size=300)),
    st.tuples(st.just("junk"), st.text(max_size=300)),
    st.tuples(st.just("remove"), st.none()),
)


def _mutate(work, path, mutation):
    """Apply one mutation to the copy of ``path`` under ``work``; False when it would not change the input."""
    kind, value = mutation
    original = _read(path)
    if kind == "truncate":
        cut = int(len(original) * value)
        if original[:cut].strip() == original.strip():
            return False   # only whitespace lost: the same input
        if os.path.basename(path) == "captured_at" and _health._parse_iso(
                original[:cut].decode()) == _health._parse_iso(original.decode()):
            return False   # 2026-11-30T07:00 is the same moment as 2026-11-30T07:00:00Z
        if os.path.basename(path) == "nccl-all-reduce.txt" and re.search(
                rb"# Avg bus bandwidth\s*:\s*\d", original[:cut]):
            return False   # the judged part (every size's row) ends at the summary; what follows is not read
        with open(path, "wb") as handle:
            handle.write(original[:cut])
    elif kind == "rc":
        if os.path.basename(path) == "captured_at" or "sys-class-infiniband" in path:
            return False   # not command outputs: no exit code to record
        with open(path + ".rc", "w") as handle:
            handle.write(value)
    elif kind == "junk":
        data = value.encode("utf-8") if isinstance(value, str) else value
        if data.strip() == original.strip():
            return False
        with open(path, "wb") as handle:
            handle.write(data)
    else:
        if os.path.basename(path) == "captured_at":
            return False   # optional: windows then count back from the newest kernel log stamp (docs/health-checks.md)
        os.remove(path)
    return True


def _check(tmp_path_factory, profile, faults, index, mutation, floor):
    root = str(tmp_path_factory.getbasetemp())
    clean = _bundle(root, profile, faults)
    paths = _inputs(clean, profile)
    rel = os.path.relpath(paths[index % len(paths)], clean)
    work = os.path.join(root, "work")
    shutil.rmtree(work, ignore_errors=True)
    # Hard links to the clean bundle's files (an H100 bundle has about 560, most of them sysfs counters: copying them
    # all was nine tenths of each example's time), and copies of their own for the input to damage and its recorded
    # exit code, which are all a mutation writes (_mutate). The checker only reads (use_state=False).
    shutil.copytree(clean, work, copy_function=os.link)
    target = os.path.join(work, rel)
    own = [rel + suffix for suffix in ("", ".rc") if os.path.exists(os.path.join(clean, rel + suffix))]
    for name in own:
        os.unlink(os.path.join(work, name))
        shutil.copy2(os.path.join(clean, name), os.path.join(work, name))
    if not _mutate(work, target, mutation):
        return
    for name in own:   # what the mutation wrote is no file of the clean bundle
        if os.path.exists(os.path.join(work, name)):
            assert not os.path.samefile(os.path.join(work, name), os.path.join(clean, name)), name
    if mutation[0] in ("truncate", "junk") and _unverifiable(target):
        return
    result = _verdict(work, profile)
    assert RANK[result["status"]] >= RANK[floor], (rel, mutation, result["status"], result["findings"])


def test_the_clean_bundles_have_the_verdicts_the_properties_start_from(tmp_path_factory):
    root = str(tmp_path_factory.getbasetemp())
    for profile in PROFILES:
        assert _verdict(_bundle(root, profile), profile)["status"] == "ok"
    assert _verdict(_bundle(root, "h100-sxm-8", ("gpu_hot:gpu=2",)), "h100-sxm-8")["status"] == "error"


@pytest.mark.parametrize("profile", sorted(PROFILES))
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(min_value=0, max_value=10_000), mutation=MUTATIONS)
def test_a_damaged_input_of_a_healthy_bundle_is_never_ok(tmp_path_factory, profile, index, mutation):
    _check(tmp_path_factory, profile, (), index, mutation, "unknown")


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(index=st.integers(min_value=0, max_value=10_000), mutation=MUTATIONS)
def test_damaging_another_input_of_a_faulty_bundle_keeps_the_error(tmp_path_factory, index, mutation):
    """gpu_hot shows in nvidia-smi's output only; every other input is fair game."""
    root = str(tmp_path_factory.getbasetemp())
    paths = [p for p in _inputs(_bundle(root, "h100-sxm-8", ("gpu_hot:gpu=2",)), "h100-sxm-8")
             if not p.endswith("nvidia-smi-q.xml")]
    clean = _bundle(root, "h100-sxm-8", ("gpu_hot:gpu=2",))
    index = [_inputs(clean, "h100-sxm-8").index(p) for p in paths][index % len(paths)]
    _check(tmp_path_factory, "h100-sxm-8", ("gpu_hot:gpu=2",), index, mutation, "error")
