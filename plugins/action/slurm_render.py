# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The slurm role's render step in one task, on the controller (documentation: plugins/modules/slurm_render.py).

It does what the step did with three set_fact tasks and four ``lookup('template')`` calls, in one pass: each host's
variables read once (``hostvars[host]``, Ansible's own view) for every line, one node pass shared by the NodeName and
gres.conf lines, the topology checked against those node names, and then the templates rendered by Ansible's own
``template`` lookup with the lines as variables. The lines and the files are byte for byte what the filters and the
lookups give (tests/unit/roles/test_slurm_render_paths.py compares both on a generated inventory).

Only public interfaces of ansible-core: the action plugin API, ``hostvars`` and the lookup plugin loader.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Mapping

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import lookup_loader
from ansible.template import is_trusted_as_template

from ansible_collections.gpucluster.ops.plugins.module_utils import _slurm_render as render

# The lines each file's template reads, as the variables the slurm role's templates name them.
LINE_VARIABLES = {"node": "__slurm_node_lines", "gres": "__slurm_gres_lines", "partition": "__slurm_partition_lines",
                  "topology": "__slurm_topology_lines"}
ARGS = ("hosts", "group", "partitions", "fabric", "gpu_type_map", "autodetect", "templates")


class ActionModule(ActionBase):
    """Render the NodeName, gres.conf, PartitionName and topology lines, then the configuration files."""

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
            raise AnsibleActionFail("slurm_render: unknown options %s (known: %s)" % (", ".join(unknown), ", ".join(ARGS)))
        templates = args.get("templates") or {}
        if not hasattr(templates, "items"):
            raise AnsibleActionFail("slurm_render: templates is %r, not a mapping of file name to template" % (templates,))
        # The worker process holds the whole inventory: Python's cyclic garbage collector, set off by the objects a
        # render of 10,000 nodes makes, would walk all of it again and again (8% of a profile's samples, in the
        # hostlist sort alone). Nothing made here is cyclic garbage, and the worker ends after this task.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            try:
                lines = self._lines(args, task_vars)
            except _StageError as exc:
                result.update(failed=True, msg="%s: %s" % (exc.stage, exc))
                return result
            result["lines"] = lines
            result["files"] = self._files(templates, lines, task_vars)
        finally:
            if gc_was_enabled:
                gc.enable()
        result["changed"] = False
        return result

    def _lines(self, args, task_vars):
        templar = self._templar
        hostvars = _HostVarsOnce(task_vars.get("hostvars", {}), templar)
        groups = task_vars.get("groups", {})
        # a group's name rather than its 10,000 host names: Ansible sends a task's templated options back to the main
        # process with the result, each name with its origin
        hosts = groups.get(args["group"]) or [] if args.get("group") else args.get("hosts") or []
        type_map = args.get("gpu_type_map")
        with _stage("slurm_node_lines"):
            specs = render.node_specs(hosts, hostvars, render.DEFAULTS, type_map)
            node = render.node_lines_of(specs)
        with _stage("slurm_gres_lines"):
            gres = render.gres_lines_of(specs, hostvars, args.get("autodetect"))
        with _stage("slurm_partition_lines"):
            partition = render.partition_lines(args.get("partitions"), groups, hostvars,
                                               dict((spec.host, spec.name) for spec in specs), node)
        topology = []
        if args.get("fabric"):
            with _stage("slurm_topology_lines"):
                topology = render.topology_lines(args["fabric"], [spec.name for spec in specs])
        return {"node": node, "gres": gres, "partition": partition, "topology": topology}

    def _files(self, templates, lines, task_vars):
        """Each template rendered by Ansible's template lookup (trim_blocks, the ansible_managed header), trimmed, with
        one final newline, the lines given to it as the variables the templates name."""
        # The lookup deep-copies its variables for each template, so that a template cannot change the task's; the
        # templates only read them, and a shallow copy does that job (at 10,000 nodes the deep copies of groups,
        # vars and the fabric cost most of this step).
        temp_vars = _ShallowCopied(task_vars)
        temp_vars.update((LINE_VARIABLES[key], value) for key, value in lines.items())
        lookup = lookup_loader.get("ansible.builtin.template", loader=self._loader, templar=self._templar)
        files = {}
        for name, src in templates.items():
            rendered = lookup.run([to_text(src)], variables=temp_vars, trim_blocks=True)[0]
            files[str(name)] = to_text(rendered if rendered is not None else "").strip() + "\n"
        return files


class _ShallowCopied(dict):
    """The variables given to the template lookup: its deep copy of them is a shallow one."""

    def __deepcopy__(self, memo):
        return dict(self)


class _HostVarsOnce(object):
    """``hostvars`` read once per host, values templated only where they hold a template.

    ``hostvars[host]`` computes the host's variables afresh at every call and templates every value read (finalizing
    every list and mapping), which at 10,000 nodes costs most of the render. Here each host's variables are read once
    with ``HostVars.raw_get()`` (public: the same variables, untemplated), and a value is templated, in that host's
    variables as ``hostvars[host][key]`` does it, only when it holds a trusted string with Jinja markers
    (``Templar.is_possibly_template`` and ``is_trusted_as_template``, both public).
    """

    def __init__(self, hostvars, templar=None):
        self.hostvars = hostvars
        self.templar = templar
        self.raw = hasattr(hostvars, "raw_get") and templar is not None
        self.seen = {}
        # Whether a value holds a template, by the value's identity: a group's variables are the same objects in every
        # host's variables (the value is kept with its verdict, so that its identity is not reused).
        self.judged = {}

    def __getitem__(self, host):
        view = self.seen.get(host)
        if view is None:
            if self.raw:
                variables = self.hostvars.raw_get(host)
                if not isinstance(variables, Mapping):     # an unknown host: hostvars gives an undefined marker
                    raise KeyError(host)
                view = _HostView(variables, self.templar, self.judged)
            else:
                view = self.hostvars[host]
            self.seen[host] = view
        return view

    def __contains__(self, host):
        return host in self.seen or host in self.hostvars

    def get(self, host, default=None):
        return self[host] if host in self else default


_MISSING = object()


class _Reads(object):
    """The variables one call read from a host's view: (name, the raw value or _MISSING); shareable when none of them
    was a template (a templated value is the host's own, whatever object it came from)."""

    def __init__(self):
        self.items = []
        self.shareable = True


class _HostView(Mapping):
    """One host's variables as ``hostvars[host]`` gives them, templating only the values that hold a template."""

    def __init__(self, variables, templar, judged):
        self.variables = variables
        self.templar = templar
        self.judged = judged
        self.host_templar = None
        self.reading = None

    @contextlib.contextmanager
    def reads(self):
        """Record which variables are read (and as which objects) while the block runs."""
        self.reading = _Reads()
        try:
            yield self.reading
        finally:
            self.reading = None

    def same_values(self, reads):
        """Whether this host's variables named in ``reads`` are the very objects read there, missing alike, equal
        numbers, or both empty mappings (a host without facts has an empty ansible_facts of its own)."""
        variables = self.variables
        for name, value in reads.items:
            got = variables.get(name, _MISSING)
            if got is value:
                continue
            if isinstance(got, (int, float)) and type(got) is type(value) and got == value:
                continue
            if isinstance(got, Mapping) and isinstance(value, Mapping) and not got and not value:
                continue
            return False
        return True

    def get(self, key, default=None):
        if key not in self.variables:
            if self.reading is not None:
                self.reading.items.append((key, _MISSING))
            return default
        return self[key]

    def __getitem__(self, key):
        value = self.variables[key]
        known = self.judged.get(id(value))
        if known is None or known[0] is not value:
            known = self.judged[id(value)] = (value, self._may_template(value))
        if self.reading is not None:
            self.reading.items.append((key, value))
            if known[1]:
                self.reading.shareable = False
        if not known[1]:
            return value
        if self.host_templar is None:
            self.host_templar = self.templar.copy_with_new_env(available_variables=self.variables)
        return self.host_templar.template(value)

    def __iter__(self):
        return iter(self.variables)

    def __len__(self):
        return len(self.variables)

    def _may_template(self, value, depth=0):
        """Whether Ansible would template ``value``: a trusted string with Jinja markers in it, or a container that
        holds one (the templar's own light check, ``is_possibly_template``, per string)."""
        if isinstance(value, str):
            return (("{" in value or value.startswith("#")) and self.templar.is_possibly_template(value)
                    and is_trusted_as_template(value))
        if depth > 50:
            return True
        if isinstance(value, Mapping):
            return any(self._may_template(k, depth + 1) or self._may_template(v, depth + 1) for k, v in value.items())
        if isinstance(value, (list, tuple, set)):
            return any(self._may_template(v, depth + 1) for v in value)
        return False


class _StageError(Exception):
    def __init__(self, stage, message):
        super(_StageError, self).__init__(message)
        self.stage = stage


class _stage(object):  # pylint: disable=invalid-name
    """Turn a SlurmRenderError into a failure named after the filter that gives the same lines on its own."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is not None and issubclass(kind, render.SlurmRenderError):
            raise _StageError(self.name, str(value))
        return False
