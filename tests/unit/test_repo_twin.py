"""The repository twin of NVIDIA's CUDA repository (tests/support/repo_twin.py, tests/support/nvidia_twin/manifest.yml):
the manifest cites a source for every fact and counts its assumptions, and the twin it builds is a signed flat
repository that apt reads and verifies, with exactly the manifest's package versions and relations."""

import getpass
import gzip
import os
import re
import subprocess

import pytest

import repo_twin

MANIFEST = repo_twin.load()


def _tool(name):
    from shutil import which  # pylint: disable=import-outside-toplevel
    if which(name) is None:
        pytest.fail("%s is needed to build the repository twin (Debian: apt-get install dpkg gnupg apt)" % name)


def test_every_fact_cites_a_source_that_exists():
    sources = MANIFEST["sources"]
    for source in sources.values():
        assert source["title"] and source["url"].startswith("https://")
    cited = [MANIFEST["repository"]] + list(MANIFEST["repositories"].values()) + MANIFEST["drivers"] + MANIFEST["packages"]
    for entry in cited:
        assert entry.get("sources"), entry
        assert set(entry["sources"]) <= set(sources), entry


def test_the_header_counts_the_assumptions():
    with open(repo_twin.MANIFEST) as handle:
        text = handle.read()
    counted = int(re.search(r"^# Assumptions in this file: (\d+)$", text, re.M).group(1))
    assert counted == len(re.findall(r"^\s+assumption:", text, re.M))


def test_the_seeds_versions_are_in_the_manifest():
    versions = {(p["name"], p["version"]) for p in repo_twin.expand(MANIFEST)}
    assert ("libnccl2", "2.18.3-1+cuda12.2") in versions
    branch = [d["version"] for d in MANIFEST["drivers"] if d["version"].startswith("550.")]
    assert len(branch) >= 2, "two versions of one branch, for an upgrade within it"
    for driver in branch:
        assert ("nvidia-fabricmanager-550", driver + "-1") in versions
        assert ("libnvidia-nscq-550", driver + "-1") in versions


@pytest.fixture(scope="module")
def twin(tmp_path_factory):
    for tool in ("dpkg-deb", "gpg", "gpgv", "apt-get"):
        _tool(tool)
    out = tmp_path_factory.mktemp("twin")
    return repo_twin.build(str(out), omit=("libnccl2=2.18.3-1+cuda12.2",))


def test_the_twin_holds_every_package_version_but_the_omitted(twin):
    packages = open(os.path.join(twin["path"], "Packages")).read()
    assert packages == gzip.open(os.path.join(twin["path"], "Packages.gz")).read().decode()
    stanzas = {(re.search(r"^Package: (.+)$", s, re.M).group(1), re.search(r"^Version: (.+)$", s, re.M).group(1))
               for s in packages.strip().split("\n\n")}
    wanted = {(p["name"], p["version"]) for p in repo_twin.expand(MANIFEST) if p["repository"] == "cuda"}
    assert stanzas == wanted - {("libnccl2", "2.18.3-1+cuda12.2")}
    fabricmanager = [s for s in packages.split("\n\n") if s.startswith("Package: nvidia-fabricmanager-550\n")][0]
    assert "Conflicts: nvidia-fabricmanager" in fabricmanager and "Provides: nvidia-fabricmanager" in fabricmanager


def test_the_release_is_signed_by_the_key_beside_it(twin, tmp_path):
    keyring = tmp_path / "key.gpg"
    subprocess.run(["gpg", "--batch", "--yes", "--dearmor", "-o", str(keyring), twin["key_file"]], check=True)
    for argv in (["gpgv", "--keyring", str(keyring), os.path.join(twin["path"], "InRelease")],
                 ["gpgv", "--keyring", str(keyring), os.path.join(twin["path"], "Release.gpg"),
                  os.path.join(twin["path"], "Release")]):
        assert subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False).returncode == 0
    release = open(os.path.join(twin["path"], "Release")).read()
    assert "Origin: NVIDIA\n" in release and "Label: NVIDIA CUDA\n" in release


def test_apt_reads_and_verifies_the_twin_as_a_flat_repository(twin, tmp_path):
    root = tmp_path / "apt"
    for directory in ("etc/sources.list.d", "etc/preferences.d", "state/lists/partial", "cache/archives/partial"):
        (root / directory).mkdir(parents=True)
    (root / "etc" / "sources.list").write_text("")
    (root / "status").write_text("")
    (root / "etc" / "sources.list.d" / "twin.sources").write_text(
        "Types: deb\nURIs: file://%s/\nSuites: /\nSigned-By: %s\n" % (twin["path"], twin["key_file"]))
    options = ["-o", "Dir::Etc=%s/etc" % root, "-o", "Dir::State=%s/state" % root, "-o", "Dir::Cache=%s/cache" % root,
               "-o", "Dir::State::status=%s/status" % root, "-o", "Debug::NoLocking=1",
               "-o", "APT::Sandbox::User=%s" % getpass.getuser()]
    update = subprocess.run(["apt-get"] + options + ["update"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            check=False)
    assert update.returncode == 0 and b"NO_PUBKEY" not in update.stdout and b"W:" not in update.stdout and b"N:" not in update.stdout, update.stdout
    madison = subprocess.run(["apt-cache"] + options + ["madison", "nvidia-smi", "libnccl2", "libnccl-dev"],
                             stdout=subprocess.PIPE, check=True).stdout.decode()
    assert "nvidia-smi | 550.90.07-1 | file:%s" % twin["path"] in madison
    assert "libnccl-dev | 2.18.3-1+cuda12.2" in madison and "libnccl2 |" not in madison
