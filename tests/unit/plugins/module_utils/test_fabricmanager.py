# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nv-fabricmanager --version: the version, or None with a note saying what came instead."""

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils._fabricmanager import parse_fabricmanager_version

from parser_testlib import fixture


def parse(text):
    """The parser with its contract checked (also the never-raises property's check)."""
    result = parse_fabricmanager_version(text)
    assert set(result) == {"version", "errors", "unreadable"}
    assert result["version"] is None or isinstance(result["version"], str)
    assert isinstance(result["errors"], list) and isinstance(result["unreadable"], list)
    assert (result["version"] is None) == bool(result["unreadable"])
    return result


def test_the_version_line():
    assert parse(fixture("fabricmanager", "version_550.txt"))["version"] == "550.54.15"


@pytest.mark.parametrize("text, version", [
    ("Fabric Manager version is : 535.183.01\n", "535.183.01"),
    ("Fabric Manager version is: 570.86\r\n", "570.86"),
    (b"\x1b[0mFabric Manager version is : 550.127.05\n", "550.127.05"),
    ("some banner\nFabric Manager version is : 560.35.03\n", "560.35.03"),
])
def test_layouts(text, version):
    assert parse(text)["version"] == version


@pytest.mark.parametrize("text, note", [
    ("", "the output is empty"),
    ("bash: nv-fabricmanager: command not found\n", "first line: 'bash: nv-fabricmanager: command not found'"),
    ("Fabric Manager version is : \n", "no 'Fabric Manager version is"),
])
def test_no_version(text, note):
    result = parse(text)
    assert result["version"] is None and note in result["unreadable"][0]
