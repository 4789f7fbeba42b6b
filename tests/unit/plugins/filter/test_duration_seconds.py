# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The duration_seconds filter: the collection's duration rules (_slurm_values.parse_duration), errors naming
where the value came from."""

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.gpucluster.ops.plugins.filter.duration_seconds import FilterModule

duration_seconds = FilterModule().filters()["duration_seconds"]


@pytest.mark.parametrize("value, seconds", [
    ("30m", 1800), ("10min", 600), ("2h", 7200), ("1d", 86400), ("1h30m", 5400), ("45s", 45), ("00:30:00", 1800),
    ("2-00:00:00", 172800), (0, 0), ("0", 0),
])
def test_durations(value, seconds):
    assert duration_seconds(value, "maintenance_drain_deadline") == seconds


@pytest.mark.parametrize("value, said", [
    ("soon", "which is not a Slurm time or a duration"),
    (30, "bare number"),
    ("30", "bare number"),
    ("-5m", "cannot be negative"),
    (None, "is not set"),
    ([1], "which is not a Slurm time or a duration"),
])
def test_refusals_name_where_and_value(value, said):
    with pytest.raises(AnsibleFilterError) as error:
        duration_seconds(value, "host gpu01: maintenance_drain_deadline")
    message = str(error.value)
    assert message.startswith("host gpu01: maintenance_drain_deadline is"), message
    assert said in message
    if value is not None:
        assert repr(value) in message
