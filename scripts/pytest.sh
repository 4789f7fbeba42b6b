#!/usr/bin/env bash
# pytest with the checkout importable as ansible_collections.gpucluster.ops.
# pytest exits 5 when it collected no test: for a suite that has tests that means discovery broke, so it fails
# here with a message instead of passing silently or failing without one.
set -uo pipefail
# The tests' ansible-playbook runs share one AnsiballZ module cache (tests/support/callback_plugins/
# gpucluster_ansiballz_cache.py) unless the caller chose callbacks itself; a test that sets its own keeps its own.
# Not the collection's preload callback: its 0.2 s a run costs the unit tests' many short runs more than it saves
# (the whole suite: 380 CPU-s with it, 352 without, 2026-12-04; docs/performance.md).
export ANSIBLE_CALLBACK_PLUGINS=${ANSIBLE_CALLBACK_PLUGINS:-$PWD/tests/support/callback_plugins}
export ANSIBLE_CALLBACKS_ENABLED=${ANSIBLE_CALLBACKS_ENABLED:-gpucluster_ansiballz_cache}
pytest "$@"
rc=$?
if [ $rc -eq 5 ]; then
    echo "pytest collected no tests from: $* -- test discovery is broken (a file or marker filter matches nothing)" >&2
    exit 1
fi
exit $rc
