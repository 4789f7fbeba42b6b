# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""A playbook run on this machine for the offline playbook tests (tests/unit/test_*_playbook*.py): the checkout's
Ansible settings, and a fake scontrol first on PATH that logs every call and fails, so that a test can assert that
a refused run made no Slurm call."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FAKE_SCONTROL = """#!/bin/sh
echo "$*" >> "$FAKE_SLURM_LOG"
exit 1
"""


def logged_scontrol_env(tmp_path):
    """(environment for ansible-playbook, the log file of the fake scontrol's calls) under ``tmp_path``."""
    log = tmp_path / "scontrol.log"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "scontrol").write_text(FAKE_SCONTROL)
    (bindir / "scontrol").chmod(0o755)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_FORCE_COLOR="false",
               ANSIBLE_NOCOLOR="1", ANSIBLE_COLLECTIONS_PATH=os.path.join(ROOT, ".cache", "collections"),
               FAKE_SLURM_LOG=str(log), PATH="%s:%s" % (bindir, os.environ["PATH"]))
    return env, log
