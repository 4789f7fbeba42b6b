# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the collection's filters share, on the controller: turning the errors of the logic they wrap into Ansible's
filter errors, checking the list of host names they are applied to and the host names themselves, and expanding a
Slurm hostlist under Slurm's rules (hostlist_expand, hostlist_fold).

The logic itself is in module_utils (_slurm_render, _hostlist, _ipoib, ...), where unit tests and the modules reach it
without Ansible's template engine; each filter is a thin wrapper, and the wrapping is here.
"""

from __future__ import annotations

import functools
import re

from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.module_utils._hostlist import check as slurm_hostlist_check

try:
    import hostlist as python_hostlist
except ImportError:
    python_hostlist = None

# One label of a host name (RFC 1123): letters, digits and '-', not at either end.
HOSTNAME_LABEL = re.compile(r"^(?!-)[A-Za-z0-9-]{1,63}(?<!-)$")


def filter_errors(errors, prefix=None):
    """Decorate a filter so that the exceptions ``errors`` (a class or a tuple of them) raised in it come out as
    AnsibleFilterError, with the message ``"<prefix>: <error>"``, or the error's own message without a prefix."""

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except errors as exc:
                raise AnsibleFilterError("%s: %s" % (prefix, exc) if prefix else str(exc))
        return wrapper
    return decorate


def check_host_names(hosts, filter_name, refuse=(str,)):
    """Fail unless ``hosts`` is a list of host names (an iterable that is none of the types ``refuse``)."""
    if isinstance(hosts, refuse) or not hasattr(hosts, "__iter__"):
        raise AnsibleFilterError("%s expects a list of host names, got %r" % (filter_name, hosts))


def valid_hostname(name, label=HOSTNAME_LABEL):
    """True when ``name`` is a host name of at most 253 characters whose dot-separated labels match ``label``."""
    if not name or len(name) > 253:
        return False
    return all(label.match(part) for part in name.rstrip(".").split("."))


def expand_with_slurm_rules(expr, caller="hostlist_expand"):
    """Expand ``expr`` with python-hostlist after checking Slurm's own rules (which are stricter)."""
    if not isinstance(expr, str):
        raise AnsibleFilterError("%s: a hostlist must be a string, got %r" % (caller, expr))
    reason = slurm_hostlist_check(expr)
    if reason is not None:
        raise AnsibleFilterError("%s: %s" % (caller, reason))
    if python_hostlist is None:
        raise AnsibleFilterError("%s: needs the python-hostlist library on the Ansible controller "
                                 "(pip install python-hostlist)" % caller)
    if expr == "":
        return []
    try:
        return python_hostlist.expand_hostlist(expr, allow_duplicates=True)
    except python_hostlist.BadHostlist as exc:
        raise AnsibleFilterError("%s: python-hostlist cannot read %r: %s" % (caller, expr, exc))
