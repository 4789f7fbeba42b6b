# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The health sweep's fan-out: the probe on every node reached by ssh, from one task on the controller
(documentation: plugins/modules/health_fanout.py).

Ansible's per-host task costs the controller about 0.02 s before it does anything and the sweep's record of a node
took five of them (docs/performance.md). Here one task starts one ``ssh`` per node, ``forks`` at a time, each running
the same probe as the raw task of roles/operations/tasks/health_sweep_node.yml, and builds every node's record with the same
function (plugin_utils/_health_sweep.py). A node it cannot do the same way (another connection, a password, become,
a replayed bundle, the module method, a probe that found no checker) is left to the playbook's own tasks, by name.
"""

from __future__ import annotations

import json
import os
import resource
import shlex
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from ansible import constants as C
from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import connection_loader

from ansible_collections.gpucluster.ops.plugins.plugin_utils import _health_sweep

ARGS = ("hosts", "script", "pins", "install_dir", "config_file", "timeout_s")
SSH_CONNECTIONS = ("ssh", "smart", "ansible.builtin.ssh", "ansible.legacy.ssh")


def ssh_argv(options, command):
    """The ssh command line for one node from the ssh connection plugin's options resolved for it (host, port,
    remote_user, private_key_file, timeout, host_key_checking, ssh_executable, ssh_args, ssh_common_args,
    ssh_extra_args), as Ansible's ssh connection builds it, less its connection sharing: one session, no master left
    behind (the first ``-o`` of a name wins in OpenSSH, so these come before the inventory's arguments)."""
    argv = [options.get("ssh_executable") or "ssh", "-o", "BatchMode=yes", "-o", "ControlMaster=no",
            "-o", "ControlPersist=no", "-o", "KbdInteractiveAuthentication=no",
            "-o", "PreferredAuthentications=gssapi-with-mic,gssapi-keyex,hostbased,publickey",
            "-o", "PasswordAuthentication=no", "-o", "ConnectTimeout=%d" % int(options.get("timeout") or 10)]
    if not options.get("host_key_checking"):
        argv += ["-o", "StrictHostKeyChecking=no"]
    if options.get("port"):
        argv += ["-o", "Port=%d" % int(options["port"])]
    if options.get("private_key_file"):
        argv += ["-o", "IdentityFile=\"%s\"" % os.path.expanduser(str(options["private_key_file"]))]
    if options.get("remote_user"):
        argv += ["-o", "User=\"%s\"" % options["remote_user"]]
    for name in ("ssh_args", "ssh_common_args", "ssh_extra_args"):
        argv += shlex.split(str(options.get(name) or ""))
    return argv + ["--", str(options["host"]), command]


def remote_command(python, script, probe_args):
    """The command line the node's shell runs: ``python -c SCRIPT ARGS``, as the raw task of the playbook sends it."""
    return " ".join([shlex.quote(python), "-c", shlex.quote(script), shlex.quote(json.dumps(probe_args, sort_keys=True))])


def run_probe(argv, timeout_s):
    """(probe result as ansible.builtin.raw registers it, seconds). ssh's 255 is an unreachable node, as for Ansible."""
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout_s, check=False)
    except OSError as exc:
        return {"unreachable": True, "msg": "Failed to connect to the host via ssh: %s" % exc}, 0.0
    except subprocess.TimeoutExpired:
        return {"rc": 124, "stdout": "", "stderr": "ssh ran past %d s" % timeout_s, "timed_out": True}, timeout_s
    stdout, stderr = proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")
    seconds = time.monotonic() - started
    if proc.returncode == 255:
        return {"unreachable": True, "msg": "Failed to connect to the host via ssh: %s" % stderr.strip()}, seconds
    return {"rc": proc.returncode, "stdout": stdout, "stderr": stderr}, seconds


class ActionModule(ActionBase):
    """Probe the nodes reached by ssh, all at once; build their records; name the others."""

    TRANSFERS_FILES = False
    _requires_connection = False
    _supports_check_mode = True
    _supports_async = False

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super(ActionModule, self).run(tmp, task_vars)
        del tmp
        args = self._task.args
        unknown = sorted(set(args) - set(ARGS))
        if unknown:
            raise AnsibleActionFail("health_fanout: unknown options %s (known: %s)" % (", ".join(unknown), ", ".join(ARGS)))
        for name in ("script", "install_dir", "config_file"):
            if not isinstance(args.get(name), str) or not args.get(name):
                raise AnsibleActionFail("health_fanout: %s is %r: it must be a non-empty string" % (name, args.get(name)))
        hosts = list(args.get("hosts") or [])
        pins = list(args.get("pins") or [])
        timeout_s = int(args.get("timeout_s") or 3600)
        hostvars = task_vars.get("hostvars") or {}
        connection_loader.get("ssh", class_only=True)  # the ssh plugin's options known to the config manager

        by_task, plans = {}, {}
        for host in hosts:
            plan = self._plan(host, hostvars[host], args, pins)
            if isinstance(plan, str):
                by_task[host] = plan
            else:
                plans[host] = plan
        records, seconds = {}, {}
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        with ThreadPoolExecutor(max_workers=max(1, min(int(C.DEFAULT_FORKS), len(plans) or 1))) as pool:
            futures = {host: pool.submit(run_probe, plan["argv"], timeout_s) for host, plan in plans.items()}
            for host, future in futures.items():
                probe, seconds[host] = future.result()
                plan = plans[host]
                answer = _health_sweep.answer_of(probe)
                if not probe.get("unreachable") and not probe.get("timed_out") and _health_sweep.needs_module(answer):
                    # No checker there, or a probe that printed no answer: the playbook's tasks do what they do
                    # for such a node (the gpu_health module).
                    by_task[host] = "the probe found no checker or printed no answer (rc %s)" % probe.get("rc")
                    continue
                records[host] = _health_sweep.record(probe, None, False, **plan["record"])
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        result.update(changed=False, records=records, by_task=[h for h in hosts if h in by_task],
                      why_by_task=by_task, seconds=seconds, forks=int(C.DEFAULT_FORKS),
                      ssh_cpu_s=round(after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime, 3))
        return result

    def _plan(self, host, hv, args, pins):
        """What to run on ``host`` ({argv, record: the record's arguments}), or why its own tasks do it."""
        def get(name, default=None):
            return hv[name] if name in hv else default

        connection = get("ansible_connection") or C.DEFAULT_TRANSPORT
        if connection not in SSH_CONNECTIONS:
            return "connection %s" % connection
        if (get("health_sweep_method") or "auto") != "auto":
            return "health_sweep_method %s" % get("health_sweep_method")
        if get("health_sweep_from_dir") is not None:
            return "a bundle to replay"
        level = get("health_sweep_level") or "quick"
        if self._play_context.check_mode and level != "quick":
            return "check mode at the %s level (the module reads the saved counters)" % level
        if self._play_context.become or get("ansible_become") or get("ansible_ssh_pass") is not None:
            return "become or a password"
        options = C.config.get_plugin_options("connection", "ssh", variables=hv)
        if options.get("password") or options.get("private_key"):
            return "a password or a key in a variable"
        interpreter = get("ansible_python_interpreter") or "auto"
        python = "python3" if str(interpreter).startswith("auto") else str(interpreter)
        probe_args = {"cli": get("health_check_install_dir", args["install_dir"]) + "/bin/gpucluster-health",
                      "config_file": get("health_check_config_file", args["config_file"]),
                      "level": level, "run_checker": True, "from_dir": None, "config": {}}
        command = remote_command(python, args["script"], probe_args)
        return {
            "argv": ssh_argv(options, command),
            "record": {"node_name": get("health_check_node_name", host),
                       "groups": list(get("health_sweep_groups") or []),
                       "group_names": list(get("group_names") or []),
                       "health_check_expected": get("health_check_expected") or {},
                       "health_sweep_expected": get("health_sweep_expected") or {},
                       "pinnable": pins},
        }
