"""Users' GPU jobs on the shared cluster, as test_6_gpu_job.py and test_9_xid_requeue.py submit them: a small test image
in the users' rootless stores on the GPU nodes, the users' shells, the jobs' sacct records."""

import re
import shlex

IMAGE = "localhost/gpujob-test:1"
DATASET = "/srv/datasets/imagenet"
USERS = ("alice", "bob")
USER_STORES = "/var/lib/gpucluster/containers/users"
# A small image from the node's own programs and their libraries: sh, sleep, ls, touch, cat and env; no ldconfig and
# no /etc/ld.so.conf, as in many images (the spec's hook runs the node's ldconfig on the container's root).
BUILD_IMAGE = r"""
set -eu
root=$(mktemp -d)
mkdir -p "$root/bin"
for prog in dash sleep ls touch cat env; do
    path=$(command -v "$prog")
    cp -L "$path" "$root/bin/$prog"
    for lib in $(ldd "$path" | grep -o '/[^ ]*'); do
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
done
ln -s dash "$root/bin/sh"
tar -C "$root" -cf /var/tmp/gpujob-image.tar .
chmod 0644 /var/tmp/gpujob-image.tar
rm -rf "$root"
mkdir -p {dataset}
echo data > {dataset}/train-00000
""".format(dataset=DATASET)


def as_user(host, user, command):
    """Run ``command`` in ``user``'s login shell on ``host``; return the testinfra result."""
    return host.run("su - %s -c %s" % (user, shlex.quote(command)))


def job_id(result):
    assert result.rc == 0, result.stdout + result.stderr
    found = re.match(r"submitted job (\d+): ", result.stdout)
    assert found, result.stdout
    return found.group(1)


def allocated(ctl, job):
    """The GRES indices Slurm allocated to the job (scontrol show job -d: GRES=gpu:h100:2(IDX:1-2))."""
    out = ctl.check_output("scontrol show job -d %s" % job)
    found = re.search(r"GRES=gpu:[^ ]*\(IDX:([0-9,-]+)\)", out)
    assert found, out
    indices = []
    for part in found.group(1).split(","):
        low, _sep, high = part.partition("-")
        indices += list(range(int(low), int(high or low) + 1))
    return indices


def sacct(ctl, job, fields):
    out = ctl.check_output("sacct -n -P -X -j %s -o %s" % (job, fields))
    return out.strip().split("|") if out.strip() else []


# Each user's rootless podman state starts empty (a rerun on a kept cluster): no podman process of the user left, an
# empty store (the directory the user_tools role made for the user on node-local disk), no runtime directory. The log
# directory stands in for a shared home directory.
RESET_USER = r"""
set -eu
uid=$(id -u {user})
for proc in /proc/[0-9]*; do
    [ "$(stat -c %u "$proc" 2>/dev/null)" = "$uid" ] && kill -9 "${{proc#/proc/}}" 2>/dev/null || true
done
rm -rf /home/{user}/.local/share/containers /home/{user}/.config/containers "/tmp/storage-run-$uid" "/tmp/podman-run-$uid"
find {store}/$uid -mindepth 1 -maxdepth 1 -exec rm -rf {{}} +
install -d -o {user} -g {user} -m 0750 /home/{user}/gpu-job-logs
"""


def load_image(scenario, ctl, names):
    """Each of the nodes ``names`` with the dataset and the test image in every user's rootless store. The image is
    loaded the way a user without a registry loads one: in a job on the node (`srun ... podman import`), where
    gpu-job's jobs run podman (a store first used in a login session would remember that session's runtime directory,
    which a job does not have)."""
    for name in names:
        node = scenario.host(name)
        node.check_output(BUILD_IMAGE)
        for user in USERS:
            node.check_output(RESET_USER.format(user=user, store=USER_STORES))
    for name in names:
        for user in USERS:
            result = as_user(ctl, user, "srun --nodelist=%s --time=2 env -u XDG_RUNTIME_DIR podman import -q "
                             "/var/tmp/gpujob-image.tar %s" % (name, IMAGE))
            assert result.rc == 0, (name, user, result.stdout, result.stderr)
    return names
