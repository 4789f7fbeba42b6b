# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment(object):
    """What the modules that manage slurmdbd's records through sacctmgr share (slurm_account, slurm_qos).

    Each module describes its own check and diff mode; the support levels and the notes are stated here once.
    """

    DOCUMENTATION = r"""
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
notes:
  - Runs where C(sacctmgr) reaches slurmdbd (the Slurm controller or database host), as a Slurm administrator.
  - Tested against sacctmgr 22.05 (Debian 12) and 24.11 (Debian 13).
"""
