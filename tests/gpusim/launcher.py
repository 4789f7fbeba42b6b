#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""bin/gpusim as tests/gpusim/install.yml and bench/fleet_sweep.py install it: run lib/gpusim.py, installed
byte-compiled beside bin/, so that a tool call does not compile the simulator's 3,000 lines again (about 0.025 s of
CPU a call on the development machine: half of an ``nvidia-smi -q -x``). The tools are links to this file."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "lib"))
import gpusim  # noqa: E402  pylint: disable=import-error,wrong-import-position

gpusim.cli()
