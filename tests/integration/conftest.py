# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The integration tests' plugins: no silent skips under CI=true (tests/support/skip_policy.py)."""

import skip_policy


def pytest_configure(config):
    skip_policy.register(config)
