# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Run a module's main() in-process, the community.general way, for every module test.

The module args are set with ansible-core's ``patch_module_args`` (2.19), ``AnsibleModule.exit_json`` and
``fail_json`` raise ``ModuleExit`` carrying the result, ``run_command`` answers from a callable of the test (or fails
the test: a module test never runs a program of this machine), ``get_bin_path`` finds every program in /usr/bin
except those named missing, and ``warn`` collects into the result's ``warnings``
(left out when there is none, as ansible-core does).
"""

from unittest import mock

import pytest
from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.testing import patch_module_args


class ModuleExit(Exception):
    """What exit_json or fail_json was called with; ``result["failed"]`` tells which (and ``msg`` is set on fail)."""

    def __init__(self, result):
        super().__init__(result)
        self.result = result


def _no_command(argv, **_kwargs):
    raise AssertionError("the module ran %r, and this test gave it no run_command" % (argv,))


def run_module(module, args, check=False, run_command=None, missing=()):
    """Run ``module.main()`` with ``args`` (check mode when ``check``); return the result dict.

    ``run_command(argv, **kwargs)`` returns (rc, stdout, stderr) as ``AnsibleModule.run_command`` does; ``missing``
    names the programs ``get_bin_path`` does not find (it then fails the module when they are required, as
    ansible-core does).
    """
    if check:
        args = dict(args, _ansible_check_mode=True)
    warnings = []
    answer = run_command or _no_command

    def finish(result):
        if warnings:
            result["warnings"] = list(warnings)
        raise ModuleExit(result)

    def exit_json(_self, **result):
        finish(dict(result, failed=False))

    def fail_json(_self, msg, **result):
        result.pop("exception", None)
        finish(dict(result, failed=True, msg=msg))

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        del opt_dirs
        if arg in missing:
            if required:
                self.fail_json(msg="Failed to find required executable \"%s\"" % arg)
            return None
        return "/usr/bin/" + arg

    def warn(_self, warning, **_kwargs):
        warnings.append(warning)

    with mock.patch.multiple(AnsibleModule, exit_json=exit_json, fail_json=fail_json, get_bin_path=get_bin_path,
                             warn=warn, run_command=lambda _self, argv, **kwargs: answer(argv, **kwargs)):
        with patch_module_args(args):
            with pytest.raises(ModuleExit) as caught:
                module.main()
    return caught.value.result
