#!/usr/bin/env bash
# Build the collection, check that tests, molecule and CI stay out of the tarball, install it into an empty
# collections path and run a playbook that uses gpucluster.ops.* by FQCN from the installed copy.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

ansible-galaxy collection build --force --output-path "$work" "$here" >/dev/null
tarball=$(ls "$work"/gpucluster-ops-*.tar.gz)
listing=$(tar -tzf "$tarball")
leaked=$(grep -E '^(tests|molecule|\.ci|scripts|images|bench|lab|\.cache|\.venv|\.pytest_cache|\.hypothesis)/|__pycache__' <<<"$listing" || true)
if [ -n "$leaked" ]; then
    echo "check-build: the tarball holds files that build_ignore should keep out:" >&2
    echo "$leaked" | head -n 20 >&2
    exit 1
fi
echo "check-build: built $(basename "$tarball") ($(du -k "$tarball" | cut -f1) KiB, $(wc -l <<<"$listing") entries)"
for required in galaxy.yml MANIFEST.json meta/runtime.yml roles/node_baseline/tasks/main.yml plugins/filter/hosts_entries.py; do
    [ "$required" = galaxy.yml ] && continue
    grep -qx "$required" <<<"$listing" || { echo "check-build: $required is missing from the tarball" >&2; exit 1; }
done

# Nothing of the checkout may leak in: an empty config and only the new collections path.
printf '[defaults]\n' >"$work/ansible.cfg"
export ANSIBLE_CONFIG="$work/ansible.cfg" ANSIBLE_COLLECTIONS_PATH="$work/collections"
ansible-galaxy collection install -p "$work/collections" "$tarball" >/dev/null
cat >"$work/play.yml" <<'PLAY'
- name: Use the installed collection by FQCN
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Call a filter of the collection
      ansible.builtin.assert:
        that: >-
          (['gpu01'] | gpucluster.ops.hosts_entries({'gpu01': {'ansible_host': '10.0.0.1'}}, domain='c.example'))[0].names
          == ['gpu01.c.example', 'gpu01']
    - name: Read the role's argument spec from the installed copy
      ansible.builtin.command: ansible-doc -t role gpucluster.ops.node_baseline
      changed_when: false
PLAY
(cd "$work" && ansible-playbook -i localhost, -c local -e "ansible_python_interpreter=$(command -v python3)" "$work/play.yml" >"$work/out.log" 2>&1) || { cat "$work/out.log" >&2; exit 1; }
echo "check-build: installed into an empty collections path; a playbook using gpucluster.ops FQCNs ran"
