"""images/debian-systemd/gpucluster_zipcache.py, the test images' bytecode cache for modules imported from zip files
(Ansible's AnsiballZ payloads): a module imported from a zip gives the same results the first time (compiled, then
kept) and the next (from the cache, with the file name of the zip it is imported from now), a changed source is
compiled anew, and an unreadable cache falls back to compiling."""

import importlib.util
import os
import sys
import zipfile
import zipimport

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HOOK = os.path.join(ROOT, "images", "debian-systemd", "gpucluster_zipcache.py")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the cache is for root only")


@pytest.fixture
def hook(tmp_path, monkeypatch):
    original = zipimport._compile_source  # pylint: disable=protected-access
    spec = importlib.util.spec_from_file_location("gpucluster_zipcache_under_test", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "_DIR", str(tmp_path / "cache"))
    try:
        assert zipimport._compile_source is not original  # pylint: disable=protected-access
        yield module
    finally:
        zipimport._compile_source = original  # pylint: disable=protected-access


def _payload(path, source):
    with zipfile.ZipFile(str(path), "w") as archive:
        archive.writestr("zcpkg/__init__.py", "")
        archive.writestr("zcpkg/util.py", source)
    return str(path)


def _load(zip_path, name="zcpkg.util"):
    for key in [k for k in sys.modules if k == "zcpkg" or k.startswith("zcpkg.")]:
        del sys.modules[key]
    sys.path.insert(0, zip_path)
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(zip_path)
        sys.path_importer_cache.pop(zip_path, None)


SOURCE = "def where():\n    return __file__\n\ndef fail():\n    raise ValueError('boom')\n\nVALUE = 41 + 1\n"


def test_the_cache_gives_the_same_module_with_the_current_file_name(hook, tmp_path):
    first = _load(_payload(tmp_path / "one.zip", SOURCE))
    cached = list((tmp_path / "cache").rglob("*"))
    assert first.VALUE == 42 and [p for p in cached if p.is_file()], cached
    second = _load(_payload(tmp_path / "two.zip", SOURCE))
    assert second.VALUE == 42 and second.where().startswith(str(tmp_path / "two.zip"))
    with pytest.raises(ValueError) as raised:
        second.fail()
    assert raised.tb.tb_next.tb_frame.f_code.co_filename.startswith(str(tmp_path / "two.zip"))


def test_a_changed_source_is_compiled_anew_and_a_broken_cache_entry_is_ignored(hook, tmp_path):
    assert _load(_payload(tmp_path / "one.zip", SOURCE)).VALUE == 42
    assert _load(_payload(tmp_path / "two.zip", SOURCE.replace("41 + 1", "41 + 2"))).VALUE == 43
    for entry in (tmp_path / "cache").rglob("*"):
        if entry.is_file():
            entry.write_bytes(b"not marshal data")
    assert _load(_payload(tmp_path / "three.zip", SOURCE)).VALUE == 42
