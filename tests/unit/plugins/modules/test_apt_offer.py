"""apt_offer main(): the scratch apt state it asks, what it returns, and the failures it names (apt stubbed); the
real apt reads the repository twin in tests/unit/test_repo_twin.py and the gpu-stack scenario."""

import os

from ansible_collections.gpucluster.ops.plugins.modules import apt_offer
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module

MADISON = (" nvidia-smi | 550.90.07-1 | file:/srv/m/debian12/x86_64  Packages\n"
           " nvidia-smi | 550.54.15-1 | file:/srv/m/debian12/x86_64  Packages\n"
           "nvidia-fabricmanager-550 | 550.54.15-1 | file:/srv/m/debian12/x86_64  Packages\n")


class Apt:
    """apt-get update and apt-cache madison, answering as given; keeps the sources file each call saw."""

    def __init__(self, update=(0, "Get:1 file:/srv/m InRelease\n", ""), madison=(0, MADISON, "")):
        self.update, self.madison, self.calls, self.sources = update, madison, [], []

    def __call__(self, argv, **_kwargs):
        self.calls.append(argv)
        parts = [a.split("=", 1)[1] for a in argv if a.startswith("Dir::Etc::SourceParts=")]
        with open(os.path.join(parts[0], "scratch.sources")) as handle:
            self.sources.append(handle.read())
        return self.update if "update" in argv else self.madison


def test_offers_newest_first_and_nothing_for_a_missing_package():
    apt = Apt()
    result = run_module(apt_offer, {"uri": "file:///srv/m/debian12/x86_64/",
                                    "packages": ["nvidia-smi", "nvidia-fabricmanager-550", "libnvidia-nscq-550"]},
                        run_command=apt)
    assert result["changed"] is False
    assert result["offers"] == {"nvidia-smi": ["550.90.07-1", "550.54.15-1"], "nvidia-fabricmanager-550": ["550.54.15-1"],
                                "libnvidia-nscq-550": []}
    assert result["stdout_lines"][0].startswith(" nvidia-smi | 550.90.07-1")
    # the node's own sources and preferences are not read: a scratch state of its own
    assert all("Dir::Etc::SourceList=/dev/null" in call for call in apt.calls)
    assert "Suites: /\n" in apt.sources[0] and "Trusted: yes" in apt.sources[0]


def test_a_key_that_exists_is_required(tmp_path):
    key = tmp_path / "key.asc"
    key.write_text("key")
    apt = Apt()
    run_module(apt_offer, {"uri": "http://mirror/cuda/", "packages": ["nvidia-smi"], "signed_by": str(key)},
               run_command=apt)
    assert "Signed-By: %s" % key in apt.sources[0] and "Trusted" not in apt.sources[0]


def test_an_unreadable_index_fails_naming_the_url():
    apt = Apt(update=(100, "Err:1 http://mirror/cuda InRelease\n", "E: Failed to fetch http://mirror/cuda/InRelease"))
    result = run_module(apt_offer, {"uri": "http://mirror/cuda/", "packages": ["nvidia-smi"]}, run_command=apt)
    assert result["failed"] and "cannot read the package index of http://mirror/cuda/" in result["msg"]
    assert "Failed to fetch" in result["msg"]


def test_an_unchecked_signature_warning_is_not_a_failure_but_a_failed_check_is(tmp_path):
    warning = (0, "", "W: GPG error: file:/srv/m InRelease: NO_PUBKEY 2D021C37351B4107")
    result = run_module(apt_offer, {"uri": "file:///srv/m/", "packages": ["nvidia-smi"]}, run_command=Apt(update=warning))
    assert "failed" not in result or not result["failed"]
    key = tmp_path / "old.asc"
    key.write_text("old key")
    result = run_module(apt_offer, {"uri": "file:///srv/m/", "packages": ["nvidia-smi"], "signed_by": str(key)},
                        run_command=Apt(update=warning))
    assert result["failed"] and "NO_PUBKEY" in result["msg"]
