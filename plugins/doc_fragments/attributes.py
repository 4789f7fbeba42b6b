# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment(object):
    """The attributes that several modules share, each stated once.

    A module lists the ones that apply, for example ``extends_documentation_fragment: [gpucluster.ops.attributes.facts]``;
    an attribute the module states itself wins over the fragment's, key by key.
    """

    # Modules that only read a node (nvidia-smi, sysfs, the kernel log) on any POSIX target.
    NODE_READER = r"""
attributes:
  check_mode:
    description: Can run in check mode and return changed status prediction without modifying target.
    support: full
    details: The module only reads.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check mode), when in diff mode.
    support: none
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
    platforms: posix
"""

    # Modules that return ansible_facts.
    FACTS = r"""
attributes:
  facts:
    description: Action returns an C(ansible_facts) dictionary that will update existing host facts.
    support: full
"""

    # Slurm modules that read configuration or counters and change nothing.
    SLURM_READER = r"""
attributes:
  check_mode:
    support: full
    description: The module only reads; it runs the same in check mode.
  diff_mode:
    support: none
    description: Nothing changes, so there is no diff.
"""
