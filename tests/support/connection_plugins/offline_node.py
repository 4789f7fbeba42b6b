# Test tooling only (tests/support/offline_preflight.py), never shipped as part of the collection's plugins.
"""A node that is never connected to: each module call is answered from canned data, nothing is executed."""

from __future__ import annotations

import ast
import json
import re

from ansible.errors import AnsibleConnectionFailure
from ansible.plugins.connection import ConnectionBase

DOCUMENTATION = """
    name: offline_node
    short_description: answer module calls from canned data, never run anything anywhere
    description:
        - For the unit tests' bad-input runs. No process is started, no file is copied and no network is used; a
          module call (pipelined, the only kind accepted) is read for its module name and arguments and answered
          with the first canned answer that matches; a call without one, a raw command, a file transfer or a
          privilege escalation is refused (the task is unreachable).
        - The facts of the node are the answer to the setup module.
    author: gpucluster.ops tests
    options:
        facts:
            description: The node's facts, without the ansible_ prefix (the answer to every setup call).
            type: dict
            default: {}
            vars:
                - name: offline_node_facts
        answers:
            description:
                - Canned answers, in order; the first whose C(module) is the module called and whose C(args) are
                  all in the call's arguments (a missing C(args) matches every call) gives the module's result.
            type: list
            elements: dict
            default: []
            vars:
                - name: offline_node_answers
        tmp_dirs:
            description:
                - Answer the shell commands with which an action plugin that transfers files (those of
                  kubernetes.core.k8s and k8s_info) finds the home directory and makes and removes its temporary
                  directory, with made-up paths, without running them. Off by default, and then they are refused
                  like any other command.
            type: bool
            default: false
            vars:
                - name: offline_node_tmp_dirs
        log:
            description: A file that gets one JSON line per call (module, arguments, answered or refused).
            type: str
            default: ''
            env:
                - name: OFFLINE_NODE_LOG
"""

_ARG = re.compile(r"^(ansible_module|params)=(.*),$", re.MULTILINE)
_HOME = "/offline-node-home"
_TMP_MADE = re.compile(r"echo (ansible-tmp-[0-9A-Za-z._-]+)=\"` echo (\S+) `\"")
_TMP_REMOVED = re.compile(r"^/bin/sh -c 'rm -f -r \S*ansible-tmp-[0-9A-Za-z._-]+/? > /dev/null 2>&1 && sleep 0'$")


def tmp_dir_answer(cmd):
    """The made-up output of a home-directory or temporary-directory command, or None for any other command."""
    text = cmd if isinstance(cmd, str) else " ".join(cmd)
    if text == "/bin/sh -c 'echo ~ && sleep 0'":
        return _HOME + "\n"
    made = _TMP_MADE.search(text)
    if made and "mkdir" in text:
        return "%s=%s\n" % (made.group(1), made.group(2))
    if _TMP_REMOVED.match(text):
        return ""
    return None


def module_call(in_data):
    """(module name, arguments) of a pipelined AnsiballZ wrapper, or (None, None) when in_data is not one."""
    text = in_data.decode("utf-8", "replace") if isinstance(in_data, bytes) else str(in_data or "")
    found = {key: ast.literal_eval(value) for key, value in _ARG.findall(text)}
    if "ansible_module" not in found or "params" not in found:
        return None, None
    args = json.loads(found["params"]).get("ANSIBLE_MODULE_ARGS", {})
    return short_name(found["ansible_module"]), {k: v for k, v in args.items() if not k.startswith("_ansible_")}


def short_name(module):
    """ansible.builtin.stat and ansible.legacy.stat are stat; a collection's module keeps its full name."""
    for prefix in ("ansible.builtin.", "ansible.legacy."):
        if module.startswith(prefix):
            return module[len(prefix):]
    return module


def matches(wanted, got):
    """Every key of `wanted` is in `got` with an equal value."""
    return all(key in got and got[key] == value for key, value in (wanted or {}).items())


class Connection(ConnectionBase):
    """Answers module calls from the host's canned data; refuses everything else."""

    transport = "offline_node"
    has_pipelining = True
    always_pipeline_modules = True

    def _connect(self):
        self._connected = True
        return self

    def _log(self, entry):
        path = self.get_option("log")
        if path:
            with open(path, "a") as handle:
                handle.write(json.dumps(dict(entry, host=self._play_context.remote_addr), default=str) + "\n")

    def _refusal(self, what, **entry):
        """The error that refuses `what` (the task becomes unreachable), logged."""
        self._log(dict(entry, refused=what))
        return AnsibleConnectionFailure("offline_node: refused (nothing runs on a node in this test): %s" % what)

    def exec_command(self, cmd, in_data=None, sudoable=True):
        super(Connection, self).exec_command(cmd, in_data=in_data, sudoable=sudoable)
        if self.become is not None:
            raise self._refusal("privilege escalation for %r" % cmd)
        module, args = module_call(in_data or b"")
        if module is None:
            answer = tmp_dir_answer(cmd) if self.get_option("tmp_dirs") else None
            if answer is None:
                raise self._refusal("the command %r" % cmd)
            self._log({"shell": cmd, "answered": True})
            return 0, answer.encode("utf-8"), b""
        if module == "setup":
            result = {"changed": False,
                      "ansible_facts": {"ansible_" + key: value for key, value in self.get_option("facts").items()}}
        else:
            answer = next((a for a in self.get_option("answers")
                           if short_name(a.get("module", "")) == module and matches(a.get("args"), args)), None)
            if answer is None:
                asked = json.dumps(args, sort_keys=True, default=str)
                raise self._refusal("no canned answer for %s %s" % (module, asked), module=module, args=args)
            result = dict({"changed": False}, **answer.get("result", {}))
        self._log({"module": module, "args": args, "answered": True})
        return 0, json.dumps(result).encode("utf-8"), b""

    def put_file(self, in_path, out_path):
        super(Connection, self).put_file(in_path, out_path)
        raise self._refusal("copying %s to %s" % (in_path, out_path))

    def fetch_file(self, in_path, out_path):
        super(Connection, self).fetch_file(in_path, out_path)
        raise self._refusal("fetching %s to %s" % (in_path, out_path))

    def close(self):
        self._connected = False
