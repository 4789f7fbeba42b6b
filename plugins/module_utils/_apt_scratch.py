# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""One apt repository read into a scratch apt state, and Debian's version order (apt_offer, apt_mirror).

``ScratchApt(module, uri, suite, components, signed_by)`` is a context manager: a temporary directory holding apt's
state, cache and a single ``.sources`` file, so that ``apt-get update``, ``apt-cache`` and ``apt-get download`` see
that repository only and the node's own sources, state and cache never change. The node's ``apt.conf.d`` (its proxy)
still applies. ``update()`` fails the module, naming the URL and apt's error, when the index cannot be read.

``compare_versions(a, b)`` is dpkg's order (epoch, upstream version, Debian revision; ``~`` before everything);
``satisfies(version, op, wanted)`` a dependency's relation; ``parse_relations(field)`` a Depends field into groups of
alternatives ``[[(name, op, version)]]``; ``parse_stanzas(text)`` apt-cache dumpavail's output into dicts.
Standard library only.
"""

import os
import re
import shutil
import tempfile


def _order(char):
    if char == "~":
        return -1
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _compare_part(a, b):
    """dpkg's comparison of an upstream version or a revision: non-digit runs by _order, digit runs as numbers."""
    a, b = a or "", b or ""
    while a or b:
        i = 0
        while i < len(a) and not a[i].isdigit():
            i += 1
        j = 0
        while j < len(b) and not b[j].isdigit():
            j += 1
        text_a, text_b = a[:i], b[:j]
        a, b = a[i:], b[j:]
        for k in range(max(len(text_a), len(text_b))):
            ca = _order(text_a[k]) if k < len(text_a) else 0
            cb = _order(text_b[k]) if k < len(text_b) else 0
            if ca != cb:
                return -1 if ca < cb else 1
        i = 0
        while i < len(a) and a[i].isdigit():
            i += 1
        j = 0
        while j < len(b) and b[j].isdigit():
            j += 1
        num_a, num_b = int(a[:i] or 0), int(b[:j] or 0)
        a, b = a[i:], b[j:]
        if num_a != num_b:
            return -1 if num_a < num_b else 1
    return 0


def _split(version):
    epoch, rest = version.split(":", 1) if ":" in version else ("0", version)
    upstream, revision = rest.rsplit("-", 1) if "-" in rest else (rest, "")
    return int(epoch or 0), upstream, revision


def compare_versions(a, b):
    """-1, 0 or 1 as dpkg --compare-versions orders the two Debian versions."""
    epoch_a, upstream_a, revision_a = _split(a)
    epoch_b, upstream_b, revision_b = _split(b)
    if epoch_a != epoch_b:
        return -1 if epoch_a < epoch_b else 1
    return _compare_part(upstream_a, upstream_b) or _compare_part(revision_a, revision_b)


def satisfies(version, op, wanted):
    """Whether ``version`` meets a dependency's ``(op wanted)``; no op is any version."""
    if not op:
        return True
    order = compare_versions(version, wanted)
    return {"<<": order < 0, "<=": order <= 0, "=": order == 0, ">=": order >= 0, ">>": order > 0,
            "<": order <= 0, ">": order >= 0}.get(op, False)


_RELATION = re.compile(r"^\s*([a-z0-9][a-z0-9+.\-]*)(?::[a-z0-9]+)?\s*(?:\(\s*(<<|<=|=|>=|>>|<|>)\s*([^)\s]+)\s*\))?")


def parse_relations(field):
    """``[[(name, op, version)]]``: a Depends/Pre-Depends field's groups of alternatives (architecture
    qualifiers dropped)."""
    groups = []
    for group in (field or "").split(","):
        alternatives = []
        for alternative in group.split("|"):
            match = _RELATION.match(alternative)
            if match:
                alternatives.append((match.group(1), match.group(2) or "", match.group(3) or ""))
        if alternatives:
            groups.append(alternatives)
    return groups


def parse_stanzas(text):
    """apt-cache dumpavail's (or a Packages file's) stanzas as dicts of their fields."""
    stanzas, current, last = [], {}, None
    for line in text.splitlines():
        if not line.strip():
            if current:
                stanzas.append(current)
            current, last = {}, None
        elif line[0] in " \t" and last:
            current[last] += "\n" + line.strip()
        elif ":" in line:
            last, value = line.split(":", 1)
            current[last] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def deb_file_name(name, version, architecture):
    """The file name apt-get download gives a package (an epoch's ':' written %3a)."""
    return "%s_%s_%s.deb" % (name, version.replace(":", "%3a"), architecture)


class ScratchApt:
    """A scratch apt state that sees one repository (see the module docstring)."""

    def __init__(self, module, uri, suite="/", components=None, signed_by=None, architecture=None):
        self.module, self.uri, self.suite, self.architecture = module, uri, suite, architecture
        self.components = components or []
        self.signed_by = signed_by if signed_by and os.path.exists(signed_by) else ""
        self.root = None

    def __enter__(self):
        self.root = tempfile.mkdtemp(prefix="gpucluster-apt-")
        for directory in ("sources", "preferences", "state/lists/partial", "cache/archives/partial"):
            os.makedirs(os.path.join(self.root, directory))
        with open(os.path.join(self.root, "status"), "w"):
            pass
        with open(os.path.join(self.root, "sources", "scratch.sources"), "w") as handle:
            handle.write(self.sources())
        return self

    def __exit__(self, *exc):
        shutil.rmtree(self.root, ignore_errors=True)
        return False

    def sources(self):
        lines = ["Types: deb", "URIs: %s" % self.uri, "Suites: %s" % self.suite]
        if self.components:
            lines.append("Components: %s" % " ".join(self.components))
        lines.append("Signed-By: %s" % self.signed_by if self.signed_by else "Trusted: yes")
        return "\n".join(lines) + "\n"

    def options(self):
        root = self.root
        return ["-o", "Dir::Etc::SourceList=/dev/null", "-o", "Dir::Etc::SourceParts=%s/sources" % root,
                "-o", "Dir::Etc::PreferencesParts=%s/preferences" % root, "-o", "Dir::Etc::Preferences=/dev/null",
                "-o", "Dir::State=%s/state" % root, "-o", "Dir::State::status=%s/status" % root,
                "-o", "Dir::Cache=%s/cache" % root, "-o", "Debug::NoLocking=1", "-o", "APT::Sandbox::User=root"] + (
                    ["-o", "APT::Architecture=%s" % self.architecture, "-o", "APT::Architectures=%s" % self.architecture]
                    if self.architecture else [])

    def run(self, program, args, cwd=None):
        return self.module.run_command([program] + self.options() + list(args), cwd=cwd,
                                       environ_update={"LC_ALL": "C"})

    def update(self):
        """Reads the repository's index; fails the module naming the URL and apt's error when it cannot."""
        rc, out, err = self.run("apt-get", ["-q", "update"])
        # Unverified (Trusted: yes), apt still warns of a signature it cannot check: that is not a failure here.
        failed = [line for line in (out + err).splitlines() if line.startswith(("E:", "W:", "Err:"))
                  and (self.signed_by or "GPG error" not in line)]
        if rc != 0 or failed:
            self.module.fail_json(msg="cannot read the package index of %s (suite %s): %s" % (
                self.uri, self.suite, " ".join(failed) or err.strip() or out.strip()))

    def packages_index(self):
        """The repository's Packages index as read by update(), every version of every package (apt-cache shows
        only candidates)."""
        rc, out, err = self.run("apt-get", ["indextargets", "--format", "$(FILENAME)", "Identifier: Packages"])
        files = [line for line in out.splitlines() if line.strip()]
        if rc != 0 or not files:
            self.module.fail_json(msg="cannot find the package index of %s read by apt: %s" % (
                self.uri, err.strip() or "no Packages index"))
        texts = []
        for path in files:
            rc, text, err = self.module.run_command(["/usr/lib/apt/apt-helper", "cat-file", path],
                                                    environ_update={"LC_ALL": "C"})
            if rc != 0:
                self.module.fail_json(msg="cannot read %s (the index of %s): %s" % (path, self.uri, err.strip()))
            texts.append(text)
        return "\n\n".join(texts)
