"""Secrets under failure (issue 23): a failing run's output, log and local files never show the cluster's secrets.

The run is playbooks/slurm.yml (the slurm role as site.yml runs it) with -v, --diff and ANSIBLE_LOG_PATH, made to
fail for real on every compute node late in the role (gpucluster_node_is_container=false: "Check that slurmd runs
with its limits" then fails, since a container caps them), after every task that handles a secret ran: the munge
key read on the controller and copied to the nodes (one compute node's key file altered first, so that the copy
rewrites it and --diff would show it), slurmdbd.conf (altered first on the database host, rewritten), the MariaDB
user's password. The secrets are the real ones: the munge key's bytes read from the controller (base64 and hex,
whole and in pieces) and every password, token or key of the inventory. None may appear in stdout and stderr, in
the log, or in any file the run wrote on this machine (ANSIBLE_HOME and ANSIBLE_LOCAL_TEMP in the test's own
directory; the checkout's files written since the run began). A second, normal run puts the nodes back: the keys
and slurmdbd.conf as they were (the secrets never change).

Debian 12 only: what keeps the secrets out (no_log, the role's tasks) is the same on both releases; it moved off Debian
13's longer chain.
"""

import os
import re
import subprocess
import time

import pytest

from bad_input import changed_tasks, recap
from conftest import ROOT
from faults import report

pytestmark = pytest.mark.release("debian12")

SECRET_NAME = re.compile(r"(password|passwd|token|secret|_key)$", re.I)
WINDOW = 24


def _inventory_secrets(scenario):
    found = {}
    sources = [("group_vars/%s" % g, v) for g, v in scenario.group_vars.items()]
    sources += [("host_vars/%s" % h, v) for h, v in scenario.host_vars.items()]
    for where, variables in sources:
        for name, value in (variables or {}).items():
            if SECRET_NAME.search(name) and isinstance(value, str) and len(value) >= 8:
                found["%s %s" % (where, name)] = value
    return found


def _forms(label, text):
    """The secret whole and its pieces: a leak of part of it counts too."""
    pieces = {label: text}
    if len(text) > 2 * WINDOW:
        for at in (0, len(text) // 2, len(text) - WINDOW):
            pieces["%s[%d:%d]" % (label, at, at + WINDOW)] = text[at:at + WINDOW]
    return pieces


def _leaks(secrets, text):
    lowered = text.lower()
    return sorted(label for label, value in secrets.items() if value.lower() in lowered)


def _snapshot(scenario):
    nodes = sorted(set(scenario.groups["slurm_controller"] + scenario.groups["slurm_database"] + scenario.compute))
    snap = {h: scenario.host(h).check_output("sha256sum /etc/munge/munge.key | cut -d' ' -f1") for h in nodes}
    snap["slurmdbd.conf"] = scenario.host(scenario.database).check_output("sha256sum /etc/slurm/slurmdbd.conf")
    return snap


@pytest.fixture
def put_back(scenario, tmp_path):
    """The keys and slurmdbd.conf as they were, whatever the test did (a normal run rewrites both)."""
    before = _snapshot(scenario)
    yield before
    rc, out = scenario.playbook(tmp_path, "slurm.yml")
    assert rc == 0, out[-4000:]
    assert _snapshot(scenario) == before


def test_a_failing_run_shows_no_secret(scenario, ctl, put_back, tmp_path, monkeypatch):
    key = ctl.check_output("base64 -w0 /etc/munge/munge.key")
    key_hex = ctl.check_output("od -An -v -tx1 /etc/munge/munge.key | tr -d ' \\n'")
    assert len(key) >= 44 and len(key_hex) >= 64
    secrets = {}
    secrets.update(_forms("munge key (base64)", key))
    secrets.update(_forms("munge key (hex)", key_hex))
    inventory = _inventory_secrets(scenario)
    assert any("slurm_db_password" in label for label in inventory), inventory
    # the values searched for are the ones in use (slurmdbd.conf holds the database password)
    db_conf = scenario.host(scenario.database).check_output("cat /etc/slurm/slurmdbd.conf")
    assert 'StoragePass="%s"' % scenario.group_vars["all"]["slurm_db_password"] in db_conf
    for label, value in inventory.items():
        secrets.update(_forms(label, value))

    # make the secret-writing tasks write: one node's key file and the database host's slurmdbd.conf altered
    victim = scenario.compute[0]
    scenario.host(victim).check_output("printf 'not the key' > /etc/munge/munge.key")
    scenario.host(scenario.database).check_output("echo '# altered by test_17' >> /etc/slurm/slurmdbd.conf")

    log = tmp_path / "ansible.log"
    began = time.time() - 1
    with monkeypatch.context() as env:
        env.setenv("ANSIBLE_LOG_PATH", str(log))
        env.setenv("ANSIBLE_HOME", str(tmp_path / "ansible-home"))
        env.setenv("ANSIBLE_LOCAL_TEMP", str(tmp_path / "ansible-local-tmp"))
        rc, out = scenario.playbook(tmp_path, "slurm.yml", extra_vars={"gpucluster_node_is_container": False},
                                    args=["-v", "--diff"])
    counters = recap(out)
    changed = changed_tasks(out)
    assert rc != 0, out[-4000:]
    assert "slurmd does not run with slurm_slurmd_limits" in out
    assert all(counters[h]["failed"] > 0 for h in scenario.compute), counters
    # the secrets were handled before the failure
    assert victim in changed.get("Copy the controller's munge key to this node", []), changed
    assert scenario.database in changed.get("Write slurmdbd.conf (mode 0600, owned by SlurmUser)", []), changed
    assert "TASK [gpucluster.ops.slurm : Create the accounting database user]" in out

    where = {"stdout and stderr": _leaks(secrets, out), "the log": _leaks(secrets, log.read_text())}
    assert log.stat().st_size > 1000
    written = [os.path.join(d, f) for d, _dirs, files in os.walk(tmp_path) for f in files]
    find = subprocess.run(["find", ROOT, "-path", os.path.join(ROOT, ".git"), "-prune", "-o", "-type", "f",
                           "-newermt", "@%d" % began, "-print"], capture_output=True, text=True, check=True)
    written += [p for p in find.stdout.splitlines() if p]
    for path in written:
        if os.path.basename(path) == "ansible.log":
            continue
        with open(path, "rb") as handle:
            found = _leaks(secrets, handle.read().decode("utf-8", "replace"))
        if found:
            where[path] = found
    assert not any(where.values()), where

    report("secrets under failure",
           "slurm.yml -v --diff failing on %s (slurmd's limits check, gpucluster_node_is_container=false) after the "
           "munge key copy (key file of %s altered first), slurmdbd.conf (altered first) and the MariaDB user"
           % (", ".join(scenario.compute), victim),
           ["%d forms of %d secrets (munge key base64/hex, %s) in none of: stdout+stderr, the log (%d bytes), %d files "
            "the run wrote here" % (len(secrets), 2 + len(inventory), ", ".join(sorted(inventory)), log.stat().st_size,
                                    len(written)),
            "the keys and slurmdbd.conf put back by a normal run, the secrets unchanged (sha256 per node)"])
