"""The slurm role's render step (tasks_from: render) run by the real ansible-playbook, on the controller of an
inventory: the play, the environment of the run, and the rendered files read back from the JSON callback.

One copy for tests/unit/roles/test_slurm_render.py, tests/unit/test_example_inventories.py and bench/render_scale.py.
The play runs on the first host of slurm_controller, the primary (give it ``ansible_connection: local``); its last task
shows ``__slurm_files``, the role's rendered slurm.conf, gres.conf, topology.conf and cgroup.conf.
"""

import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COLLECTIONS = os.path.join(ROOT, ".cache", "collections")

RENDER_PLAY = """- name: Render the Slurm configuration on the controller
  hosts: slurm_controller[0]
  gather_facts: false
  tasks:
    - name: Run the slurm role's render step
      ansible.builtin.include_role:
        name: gpucluster.ops.slurm
        tasks_from: render
    - name: Show the rendered files
      ansible.builtin.debug:
        var: __slurm_files
"""


def ansible_env(**extra):
    """The environment of an ansible-playbook run on this checkout (ansible.cfg, the collection link of ``make
    setup``, facts only as ansible_facts, no colour, this Python's tools first on PATH), with ``extra`` added."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=COLLECTIONS,
               ANSIBLE_INJECT_FACT_VARS="False", ANSIBLE_NOCOLOR="1",
               PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
    env.update(extra)
    return env


def render_env(**extra):
    """ansible_env() with the JSON callback, which the render's results are read from."""
    return ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json", **extra)


def write_render_play(directory):
    """Write the render play into ``directory``; return its path."""
    path = os.path.join(str(directory), "render.yml")
    with open(path, "w") as handle:
        handle.write(RENDER_PLAY)
    return path


def render_argv(inventory, play, extra_vars_file=None, playbook="ansible-playbook"):
    """The ansible-playbook command line of a render run."""
    argv = [playbook, "-i", str(inventory), str(play)]
    if extra_vars_file is not None:
        argv += ["-e", "@%s" % extra_vars_file]
    return argv


def play_tasks(stdout):
    """The tasks of the render play, from the JSON callback's output (anything printed before it is skipped)."""
    result = json.loads(stdout[stdout.index("{"):])
    return result["plays"][-1]["tasks"]


def rendered_files(stdout):
    """``__slurm_files`` (file name: content) of the controller, from the JSON callback's output of a render run."""
    hosts = play_tasks(stdout)[-1]["hosts"]
    controller = list(hosts)[0]
    return hosts[controller]["__slurm_files"]
