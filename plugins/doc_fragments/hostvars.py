# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment(object):
    """The hostvars argument of the filters that read other hosts' variables (positional, after the input)."""

    DOCUMENTATION = r"""
options:
  hostvars:
    description: The C(hostvars) of the play.
    type: dict
    required: true
"""
