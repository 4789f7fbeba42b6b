#!/usr/bin/env bash
# The collection's HTML docs from the plugins' DOCUMENTATION/EXAMPLES/RETURN and the roles' meta/argument_specs.yml,
# with antsibull-docs (sphinx-init, then its build.sh: sphinx-build -W, warnings are errors) into .cache/docs.
# Open .cache/docs/build/html/index.html. Needs the collection on ANSIBLE_COLLECTIONS_PATH (make docs sets it).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
dest=$here/.cache/docs
start=$SECONDS

# Markup, references (O(), P(), ...) and schemas of every plugin and role; rstcheck is left to the Sphinx build.
antsibull-docs lint-collection-docs --plugin-docs --skip-rstcheck "$here/.cache/collections/ansible_collections/gpucluster/ops"

rm -rf "$dest"
mkdir -p "$dest"
antsibull-docs sphinx-init --use-current --squash-hierarchy --fail-on-error --dest-dir "$dest" \
    --project gpucluster.ops --copyright "gpucluster.ops contributors" \
    --title "gpucluster.ops collection" --html-short-title gpucluster.ops gpucluster.ops >/dev/null

# This build reaches no documentation host (nor do CI and the test machines): the generated pages' references into
# the Ansible docs (the labels below) resolve through a local inventory that points at the real pages, and no
# other inventory is read. A page that references another label fails the build (sphinx -W): add it here.
cat >>"$dest/conf.py" <<'CONF'

# Added by gpucluster.ops scripts/docs.sh: an offline build, see there.
intersphinx_mapping = {
    'ansible_devel': ('https://docs.ansible.com/projects/ansible/devel/', '../ansible_devel.inv'),
}
CONF
python3 - "$dest/ansible_devel.inv" <<'PY'
import sys
import zlib

labels = [
    ("ansible_configuration_settings", "reference_appendices/config.html#ansible-configuration-settings",
     "Ansible Configuration Settings"),
    ("common_return_values", "reference_appendices/common_return_values.html#return-values", "Return Values"),
    # the note on a module with an action plugin of the same name (gpucluster.ops.slurm_render)
    ("action_plugins", "plugins/action.html#action-plugins", "Action plugins"),
    # the page of a callback plugin (gpucluster.ops.preload)
    ("callback_plugins", "plugins/callback.html#callback-plugins", "Callback plugins"),
]
body = "".join("%s std:label -1 %s %s\n" % entry for entry in labels)
with open(sys.argv[1], "wb") as handle:
    handle.write(b"# Sphinx inventory version 2\n# Project: Ansible\n# Version: devel\n"
                 b"# The remainder of this file is compressed using zlib.\n")
    handle.write(zlib.compress(body.encode()))
PY

bash "$dest/build.sh" >"$dest/build.log" 2>&1 || { cat "$dest/build.log" >&2; exit 1; }

# Every module, filter, callback and role has its page.
missing=()
for f in "$here"/plugins/modules/*.py "$here"/plugins/filter/*.py "$here"/plugins/callback/*.py \
         "$here"/roles/*/meta/argument_specs.yml; do
    case $f in
        */plugins/modules/*) page=$(basename "$f" .py)_module.html ;;
        */plugins/filter/*) page=$(basename "$f" .py)_filter.html ;;
        */plugins/callback/*) page=$(basename "$f" .py)_callback.html ;;
        *) page=$(basename "$(dirname "$(dirname "$f")")")_role.html ;;
    esac
    [ -s "$dest/build/html/$page" ] || missing+=("$page")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "docs: no page for ${missing[*]}" >&2
    exit 1
fi
echo "docs: $dest/build/html/index.html ($(find "$dest/build/html" -name '*.html' | wc -l) pages, $((SECONDS - start)) s)"
