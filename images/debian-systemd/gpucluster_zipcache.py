# Test images only (scripts/build-images.sh): a bytecode cache for Python modules imported from zip files, that is
# for the module_utils of Ansible's AnsiballZ payloads, which Python otherwise compiles from source on every task
# (zipimport keeps no bytecode). No role installs this on a node; docs/testing.md says what it saves.
#
# Loaded at interpreter start by gpucluster_zipcache.pth (not under -S, so not by the health checker). Only
# for root, whose cache only root can write. The key is the source and its path inside the zip, so a changed
# module_utils file compiles anew; the cached code gets the file name of the zip it is imported from now, as
# compiling it there would. Any failure falls back to compiling: the cache can make an import faster, never different.
import os
import sys

try:
    if os.geteuid() == 0:
        import hashlib
        import marshal
        import zipimport

        _DIR = os.path.join("/var/cache/gpucluster-zipimport", sys.implementation.cache_tag)
        _COMPILE = zipimport._compile_source  # pylint: disable=protected-access

        def _renamed(code, filename):
            consts = tuple(_renamed(c, filename) if isinstance(c, type(code)) else c for c in code.co_consts)
            return code.replace(co_filename=filename, co_consts=consts)

        def _compile_source(pathname, source):
            inner = pathname.rsplit(".zip" + os.sep, 1)[-1]
            key = hashlib.sha256(inner.encode("utf-8", "surrogateescape") + b"\0" + source).hexdigest()
            path = os.path.join(_DIR, key[:2], key)
            try:
                with open(path, "rb") as handle:
                    return _renamed(marshal.loads(handle.read()), pathname)
            except Exception:  # pylint: disable=broad-except
                pass
            code = _COMPILE(pathname, source)
            try:
                os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
                temp = "%s.%d.tmp" % (path, os.getpid())
                with open(temp, "wb") as handle:
                    handle.write(marshal.dumps(code))
                os.replace(temp, path)
            except Exception:  # pylint: disable=broad-except
                pass
            return code

        zipimport._compile_source = _compile_source  # pylint: disable=protected-access
except Exception:  # pylint: disable=broad-except
    pass
