"""Bad input fails in the role's preflight, names the variable and the value, and leaves the node as it was: end to
end, one case per instance, side by side.

Runs the real ansible-playbook with only the role under test on one instance of the scenario (its inventory and
group_vars, the case's variables as extra vars), and compares the managed files and packages before and after. Both
cases also ask for changes that must not happen. On the monitoring host: a placeholder Grafana password (the shared
secrets check of roles/_common); on the GPU node: dcgm-unavailable, whose verdict is what the node's apt offers, so it
has no test without a node. The other cases (temperature-500, temperature-not-a-number, window-not-a-duration,
gpu-count-in-inventory, grafana-default-password, exporter-without-url, exporter-bad-counter, exporter-counter-twice),
and the placeholder one, run without a node in tests/unit/roles/test_bad_input_preflight.py (test_monitoring).
"""

import hashlib
import itertools
import json
import os

import pytest
import yaml

from bad_input import MUST_NOT_CHANGE, assert_refused_before_change, finish, snapshot, start_playbook

SCENARIO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.join(SCENARIO, "..", "..")
HEAD, GPU = "deb13-monitoring", "deb12-monitoring"
WATCHED = {
    HEAD: ["/etc/prometheus/prometheus.yml", "/etc/prometheus/rules/gpucluster-alerts.yml",
           "/etc/prometheus/tests/gpucluster-alerts.yml", "/etc/prometheus/tests/gpucluster-alerts.test.yml",
           "/etc/default/prometheus", "/etc/default/prometheus-node-exporter",
           "/etc/grafana/provisioning/datasources/gpucluster.yml"],
    GPU: ["/etc/dcgm-exporter/counters.csv", "/etc/systemd/system/dcgm-exporter.service", "/usr/local/bin/dcgm-exporter",
          "/etc/apt/preferences.d/gpucluster-dcgm", "/etc/default/prometheus-node-exporter"],
}
# Changes that a run must not make when its input is bad.
CHANGES = {HEAD: MUST_NOT_CHANGE["monitoring_head"], GPU: MUST_NOT_CHANGE["monitoring_gpu"]}
CASES = [
    # (id, role, host, variables, text the error must hold)
    # Secrets: the error names the variable, never the value.
    ("grafana-password-placeholder", "monitoring", HEAD,
     {"monitoring_grafana_admin_password": "CHANGE-ME-openssl-rand-hex-24"},
     "host %s: monitoring_grafana_admin_password is still the example vault's placeholder" % HEAD),
    ("dcgm-unavailable", "dcgm", GPU, {"dcgm_when_unavailable": "fail"},
     "Set dcgm_when_unavailable: skip"),
]


ALSO = "dpkg-query -W 'datacenter-gpu-manager*' 2>&1 || true"


def _start(tmp_path, name, role, instance, variables):
    """Start ansible-playbook for one case; returns (process, snapshot before)."""
    with open(os.path.join(ROOT, "tests", "dcgm_exporter_sim", "dcgm-exporter-sim"), "rb") as f:
        checksum = "sha256:" + hashlib.sha256(f.read()).hexdigest()
    extra = dict(CHANGES[instance], dcgm_exporter_binary_checksum=checksum)
    extra.update(variables)
    work = tmp_path / name
    work.mkdir()
    (work / "vars.json").write_text(json.dumps(extra))
    (work / "play.yml").write_text(yaml.safe_dump([{
        "name": "Bad input for %s" % role, "hosts": instance, "gather_facts": False,
        "roles": [{"role": "gpucluster.ops." + role}]}]))
    before = snapshot(instance, WATCHED[instance], ALSO)
    proc = start_playbook(os.path.dirname(os.environ["MOLECULE_INVENTORY_FILE"]), work / "play.yml",
                          work / "vars.json")
    return proc, before


def _check(proc, before, name, role, instance, expect):
    rc, out = finish(proc)
    after = snapshot(instance, WATCHED[instance], ALSO)
    assert_refused_before_change(name, rc, out, [role], [expect], {instance: before}, {instance: after})


# One case per instance at a time, the two instances side by side: each case still sees its own node alone.
ROUNDS = [tuple(c for c in pair if c) for pair in
          itertools.zip_longest([c for c in CASES if c[2] == HEAD], [c for c in CASES if c[2] == GPU])]


@pytest.mark.parametrize("cases", ROUNDS, ids=["+".join(c[0] for c in cases) for cases in ROUNDS])
def test_bad_input_fails_in_preflight(tmp_path, cases):
    started = [(case, _start(tmp_path, *case[:4])) for case in cases]
    for (name, role, instance, _variables, expect), (proc, before) in started:
        _check(proc, before, name, role, instance, expect)
