#!/usr/bin/env bash
# pytest with the checkout importable as ansible_collections.gpucluster.ops.
# pytest exits 5 when it collected no test: for a suite that has tests that means discovery broke, so it fails
# here with a message instead of passing silently or failing without one.
set -uo pipefail
# The tests' ansible-playbook runs read the checkout's ansible.cfg (the Makefile exports ANSIBLE_CONFIG), so they
# enable the plugins a user's run enables and no others (tests/unit/test_same_plugins.py).
export ANSIBLE_CONFIG=${ANSIBLE_CONFIG:-$PWD/ansible.cfg}
pytest "$@"
rc=$?
if [ $rc -eq 5 ]; then
    echo "pytest collected no tests from: $* -- test discovery is broken (a file or marker filter matches nothing)" >&2
    exit 1
fi
exit $rc
