#!/usr/bin/env bash
# Syntax-check every playbook against the lab inventory.
set -euo pipefail
cd "$(dirname "$0")/.."
rc=0
for pb in playbooks/*.yml lab/*.yml; do
    ansible-playbook -i inventories/lab --syntax-check "$pb" >/dev/null || { echo "syntax check failed: $pb" >&2; rc=1; }
done
exit $rc
