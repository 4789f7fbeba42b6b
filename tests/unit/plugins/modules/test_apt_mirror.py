"""apt_mirror: dpkg's version order, what a set of pins resolves to in a repository's index with its dependencies from
the same repository, the refusals that name what is missing, and main() with apt stubbed (check mode writes nothing, a
rerun over a complete mirror changes nothing). The real apt, apt-ftparchive and gpg run in the gpu-stack scenario."""

import os

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils._apt_scratch import (
    compare_versions, deb_file_name, parse_relations, satisfies)
from ansible_collections.gpucluster.ops.plugins.modules import apt_mirror
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module


@pytest.mark.parametrize("a, b, order", [
    ("550.90.07-1", "550.54.15-1", 1), ("550.90.07-1", "550.90.07-1", 0), ("1:4.4.1-1", "4.9.0-1", 1),
    ("2.18.3-1+cuda12.2", "2.18.3-1+cuda12.1", 1), ("1.0~rc1-1", "1.0-1", -1), ("1.0-1", "1.0-1~deb12u1", 1),
    ("550.163.01-1~deb12u1", "550.90.07-1", 1), ("1.0a-1", "1.0-1", 1), ("1.0", "1.0-0", 0), ("10", "9", 1),
])
def test_versions_in_dpkg_order(a, b, order):
    assert compare_versions(a, b) == order
    first, second = b, a
    assert compare_versions(first, second) == -order


def test_relations_and_satisfaction():
    groups = parse_relations("libc6 (>= 2.34), nvidia-kernel-dkms (= 550.90.07-1) | nvidia-kernel-550.90.07,"
                             " libnvidia-ml1:amd64 (<< 551)")
    assert groups == [[("libc6", ">=", "2.34")],
                      [("nvidia-kernel-dkms", "=", "550.90.07-1"), ("nvidia-kernel-550.90.07", "", "")],
                      [("libnvidia-ml1", "<<", "551")]]
    assert satisfies("550.90.07-1", "=", "550.90.07-1") and not satisfies("550.54.15-1", "=", "550.90.07-1")
    assert satisfies("550.90.07-1", "<<", "551") and satisfies("2.0", "", "")
    assert deb_file_name("datacenter-gpu-manager-4-core", "1:4.4.1-1", "amd64") == \
        "datacenter-gpu-manager-4-core_1%3a4.4.1-1_amd64.deb"


def _stanza(name, version, depends="", provides=""):
    stanza = {"Package": name, "Version": version, "Architecture": "amd64"}
    if depends:
        stanza["Depends"] = depends
    if provides:
        stanza["Provides"] = provides
    return stanza


INDEX = [
    _stanza("nvidia-smi", "550.90.07-1", "libnvidia-ml1 (= 550.90.07-1), libc6 (>= 2.34)"),
    _stanza("nvidia-smi", "550.54.15-1", "libnvidia-ml1 (= 550.54.15-1)"),
    _stanza("nvidia-smi", "570.195.03-1", "libnvidia-ml1 (= 570.195.03-1)"),
    _stanza("libnvidia-ml1", "550.90.07-1"), _stanza("libnvidia-ml1", "550.54.15-1"),
    _stanza("libnvidia-ml1", "570.195.03-1"),
    _stanza("nvidia-fabricmanager-550", "550.54.15-1", "nvidia-kernel-550.54.15 | nvidia-open-550"),
    _stanza("nvidia-kernel-dkms", "550.54.15-1", provides="nvidia-kernel-550.54.15"),
    _stanza("libnccl2", "2.18.3-1+cuda12.2"), _stanza("libnccl2", "2.22.3-1+cuda12.4"),
]
DRIVER = {"names": ["nvidia-smi", "nvidia-fabricmanager-550"], "pattern": r"^([0-9]+:)?550\.", "together": True,
          "want": "branch 550", "asked_by": "nvidia_driver_branch of dgx01"}
NCCL = {"names": ["libnccl2"], "pattern": r"^([0-9]+:)?2\.18\.3-1\+cuda12\.2$", "want": "2.18.3-1+cuda12.2",
        "asked_by": "nccl_version of dgx01"}


def _resolved(requests, index=None):
    real, provided = apt_mirror.index_of(INDEX if index is None else index, "amd64")
    picks, errors = apt_mirror.resolve(real, requests)
    chosen, left = set(), set()
    for request, pins in picks:
        more_left, more = apt_mirror.close(real, provided, pins, request.get("pattern", ""))
        left.update(more_left)
        errors += more
        chosen.update(pins.items())
    return chosen, sorted(left), errors


def test_a_driver_branch_with_its_fabric_manager_resolves_with_its_dependencies():
    chosen, left, errors = _resolved([dict(DRIVER, pattern=r"^([0-9]+:)?550\.54\.15-"), NCCL])
    assert not errors
    # the exact dependency at its version, the virtual kernel package through its provider
    assert chosen == {("nvidia-smi", "550.54.15-1"), ("nvidia-fabricmanager-550", "550.54.15-1"),
                      ("libnvidia-ml1", "550.54.15-1"), ("nvidia-kernel-dkms", "550.54.15-1"),
                      ("libnccl2", "2.18.3-1+cuda12.2")}
    assert left == []


def test_nodes_that_pin_different_versions_each_get_theirs():
    chosen, _left, errors = _resolved([dict(DRIVER, names=["nvidia-smi"], pattern=r"^([0-9]+:)?550\.54\.15-"),
                                       dict(DRIVER, names=["nvidia-smi"], pattern=r"^([0-9]+:)?570\.")])
    assert not errors
    assert {("nvidia-smi", "550.54.15-1"), ("libnvidia-ml1", "550.54.15-1"), ("nvidia-smi", "570.195.03-1"),
            ("libnvidia-ml1", "570.195.03-1")} == chosen


def test_an_open_ended_dependency_takes_the_pinned_version_not_the_newest():
    """cuda-drivers-550 (>= 550.90.07) needs nvidia-driver-550: the mirror must hold the driver's own version, which
    the node's pin takes, not a newer one of the branch."""
    index = [_stanza("cuda-drivers-550", "550.90.07-1", "nvidia-driver-550 (>= 550.90.07), libnvidia-cfg1 (>= 525)"),
             _stanza("nvidia-driver-550", "550.90.07-1"), _stanza("nvidia-driver-550", "550.163.01-1"),
             _stanza("libnvidia-cfg1", "550.90.07-1"), _stanza("libnvidia-cfg1", "580.65.06-1")]
    chosen, _left, errors = _resolved([{"names": ["cuda-drivers-550"], "pattern": r"^([0-9]+:)?550\.90\.07-"}], index)
    assert not errors
    assert chosen == {("cuda-drivers-550", "550.90.07-1"), ("nvidia-driver-550", "550.90.07-1"),
                      ("libnvidia-cfg1", "550.90.07-1")}


def test_only_the_nodes_architecture_and_all_count():
    index = [_stanza("nvidia-smi", "550.90.07-1"), dict(_stanza("nvidia-smi", "550.163.01-1"), Architecture="arm64"),
             dict(_stanza("cuda-keyring", "1.1-1"), Architecture="all")]
    real, _provided = apt_mirror.index_of(index, "amd64")
    assert [s["Version"] for s in real["nvidia-smi"]] == ["550.90.07-1"] and "cuda-keyring" in real


def test_the_newest_of_the_branch_without_its_fabric_manager_is_refused_naming_it():
    real, _provided = apt_mirror.index_of(INDEX)
    nccl = dict(NCCL, pattern=r"^([0-9]+:)?2\.18\.1-1\+cuda12\.2$", want="2.18.1-1+cuda12.2")
    picks, errors = apt_mirror.resolve(real, [DRIVER, nccl])
    assert len(errors) == 2 and picks == []
    assert errors[0].startswith("nvidia-smi, nvidia-fabricmanager-550 at one version (branch 550 (nvidia_driver_branch"
                                " of dgx01)): at 550.90.07-1, missing nvidia-fabricmanager-550 (offered: 550.54.15-1)")
    assert errors[1] == "libnccl2 2.18.1-1+cuda12.2 (nccl_version of dgx01) (offered: 2.22.3-1+cuda12.4, 2.18.3-1+cuda12.2)"


def test_a_dependency_the_repository_has_at_no_fitting_version_is_an_error():
    real, provided = apt_mirror.index_of([_stanza("a", "1-1", "b (>= 2)"), _stanza("b", "1-1")])
    from_distribution, errors = apt_mirror.close(real, provided, {"a": "1-1"})
    assert errors == ["a=1-1 depends on b (>= 2), which the repository offers at no fitting version"]
    assert from_distribution == []


class Apt:
    """apt-get update, indextargets, apt-helper cat-file, apt-get download, apt-ftparchive and gpg, stubbed: the
    download writes the files asked for into its working directory."""

    def __init__(self, index):
        self.index, self.calls = index, []

    def __call__(self, argv, cwd=None, **_kwargs):
        self.calls.append(argv)
        if "indextargets" in argv:
            return 0, "/scratch/lists/_Packages\n", ""
        if argv[0] == "dpkg":
            return 0, "amd64\n", ""
        if argv[0].endswith("apt-helper"):
            return 0, "\n\n".join("\n".join("%s: %s" % kv for kv in s.items()) for s in self.index) + "\n", ""
        if "download" in argv:
            for spec in argv[argv.index("download") + 1:]:
                name, version = spec.split("=", 1)
                open(os.path.join(cwd, deb_file_name(name, version, "amd64")), "w").close()
            return 0, "", ""
        if argv[0] == "apt-ftparchive" and "packages" in argv:
            return 0, "".join("Package: x\nFilename: ./%s\n\n" % f for f in sorted(os.listdir(cwd)) if f.endswith(".deb")), ""
        if argv[0] == "gpg":
            open(os.path.join(cwd, argv[argv.index("--output") + 1]), "w").close()
        return 0, "", ""


def _args(dest):
    return {"upstream": "file:///srv/up/debian12/x86_64/", "dest": str(dest), "gnupghome": "/g", "sign_with": "F",
            "requests": [dict(DRIVER, pattern=r"^([0-9]+:)?550\.54\.15-"), NCCL]}


def test_check_mode_names_the_packages_and_writes_nothing(tmp_path):
    dest = tmp_path / "mirror"
    apt = Apt(INDEX)
    result = run_module(apt_mirror, _args(dest), check=True, run_command=apt)
    assert result["changed"] and result["index_written"]
    assert "nvidia-fabricmanager-550_550.54.15-1_amd64.deb" in result["downloaded"]
    assert not dest.exists()
    assert not any("download" in call or call[0] in ("apt-ftparchive", "gpg") for call in apt.calls)


def test_a_build_then_a_rerun_that_changes_nothing(tmp_path):
    dest = tmp_path / "mirror"
    result = run_module(apt_mirror, _args(dest), run_command=Apt(INDEX))
    assert result["changed"] and len(result["downloaded"]) == 5
    assert {"InRelease", "Release.gpg", "Release", "Packages", "Packages.gz"} <= set(os.listdir(dest))
    assert (dest / ".gpucluster-signed-by").read_text() == "F\n"
    apt = Apt(INDEX)
    again = run_module(apt_mirror, _args(dest), run_command=apt)
    assert not again["changed"] and again["downloaded"] == [] and not again["index_written"]
    assert not any(call[0] in ("apt-ftparchive", "gpg") for call in apt.calls)


def test_a_repository_without_a_pinned_package_fails_and_writes_nothing(tmp_path):
    dest = tmp_path / "mirror"
    result = run_module(apt_mirror, dict(_args(dest), requests=[DRIVER]), run_command=Apt(INDEX))
    assert result["failed"] and "the repository file:///srv/up/debian12/x86_64/ cannot give the pinned set" in result["msg"]
    assert "missing nvidia-fabricmanager-550" in result["msg"] and result["msg"].endswith("Nothing was changed.")
    assert not dest.exists()


def test_another_signing_key_rewrites_the_index(tmp_path):
    dest = tmp_path / "mirror"
    run_module(apt_mirror, _args(dest), run_command=Apt(INDEX))
    again = run_module(apt_mirror, dict(_args(dest), sign_with="G"), run_command=Apt(INDEX))
    assert again["changed"] and again["index_written"] and again["downloaded"] == []


def test_a_missing_upstream_key_fails_outside_check_mode(tmp_path):
    result = run_module(apt_mirror, dict(_args(tmp_path / "m"), signed_by=str(tmp_path / "nvidia.asc")),
                        run_command=Apt(INDEX))
    assert result["failed"] and "is not on this host" in result["msg"]
