#!/usr/bin/env bash
# ansible-test sanity on a copy of the checkout at .cache/sanity/ansible_collections/gpucluster/ops
# (ansible-test needs that path layout). Extra arguments go to ansible-test (e.g. --test pep8).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
# The ansible-core that runs it: the host's .venv (2.19), or a controller of scripts/controller.sh (make sanity runs
# both); each has a tree of its own, so that both can run at once.
core=$(python3 -c 'from ansible.release import __version__ as v; print(".".join(v.split(".")[:2]))')
tree=$here/.cache/sanity-$core/ansible_collections/gpucluster/ops
python=${SANITY_PYTHON:-$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')}
echo "sanity: ansible-core $core, Python $python"

# ansible-test bootstraps pip in its venvs with a script it downloads from a host this machine cannot reach;
# it accepts a local stand-in of the same name: ensurepip, then pip install from PyPI.
pip_version=$(python3 - <<'PY'
import re, ansible_test, pathlib
src = pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
print(re.search(r"pip='([0-9.]+)'", src.read_text()).group(1))
PY
)
stand_in=$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py
if [ ! -s "$stand_in" ]; then
    mkdir -p "$(dirname "$stand_in")"
    cat >"$stand_in" <<'PY'
# Local stand-in for ansible-test's get-pip download (written by gpucluster.ops scripts/sanity.sh).
import subprocess
import sys

args = [a for a in sys.argv[1:] if a not in ("--no-setuptools", "--no-wheel")]
subprocess.check_call([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"])
subprocess.check_call([sys.executable, "-m", "pip", "install"] + args)
PY
fi

rm -rf "$tree"
mkdir -p "$tree"
cd "$here"
git ls-files -z --cached --others --exclude-standard | while IFS= read -r -d '' f; do
    [ -e "$f" ] || continue            # deleted but not yet committed
    mkdir -p "$tree/$(dirname "$f")"
    cp -a "$f" "$tree/$f"
done
cd "$tree"
git init -q
git add -A
ansible-test sanity --venv --requirements --python "$python" --color no "$@"
