#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
module: apt_mirror
short_description: Copy exactly the pinned packages of a vendor's apt repository, with their dependencies from it, into a signed local one
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Reads the index of one flat apt repository (NVIDIA's CUDA repository for one release and architecture, or its
    libnvidia-container repository) into a scratch apt state, resolves each of O(requests) to package versions, adds
    the dependencies that the same repository offers (at the newest version that satisfies the relation), downloads
    the packages the local repository lacks into O(dest) with C(apt-get download) (which checks them against the
    signed index), and writes a flat repository there (C(apt-ftparchive) C(Packages), C(Packages.gz) and C(Release),
    signed into C(InRelease) and C(Release.gpg) with the key O(sign_with) of O(gnupghome)).
  - Each request is resolved on its own, so nodes that pin different versions each find theirs. A dependency takes the
    version of the package that needs it when that fits (a driver's companions), else one the request's pattern
    takes, else the newest that fits.
  - Packages already in O(dest) stay there (a rollback needs the previous versions); one of another size than the
    index says (a download cut short) is fetched again. The index is rewritten only when a package was added, the
    index does not list exactly the packages present, or another key signed it, so a rerun changes nothing.
  - Dependencies that the repository does not offer are the distribution's own packages, which the nodes take from the
    site's distribution mirror; they are returned in RV(from_distribution).
  - Fails before anything is written, naming every request the repository cannot meet (package, wanted version, the
    host and variable that asked) and what it offers instead.
options:
  upstream:
    description: The vendor repository's URL (C(http://), C(https://) or C(file://)), a flat repository (suite C(/)).
    type: str
    required: true
  signed_by:
    description: The vendor's signing key on this host, which the index must be signed with; the run fails when the
      file is not there (in check mode it reads the index unverified and warns). Without it the index is read
      unverified.
    type: path
  architecture:
    description: The Debian architecture of the nodes (C(amd64), C(arm64)); only its packages and those for all are
      copied. Default this host's.
    type: str
  dest:
    description: The directory of the local flat repository (created when missing).
    type: path
    required: true
  requests:
    description: What the nodes pin, each a group of packages installed at one version or each at its own.
    type: list
    elements: dict
    required: true
    suboptions:
      names:
        description: Package names.
        type: list
        elements: str
        required: true
      pattern:
        description: A regular expression the Debian version must match (as the role that installs it matches); empty
          takes the newest.
        type: str
        default: ""
      together:
        description: All O(requests[].names) at one version, the newest of the first one that O(requests[].pattern)
          takes (as the role chooses it); the request fails when another one is not offered at that version.
        type: bool
        default: false
      want:
        description: The wanted version in words, for messages (C(branch 550), C(2.18.3-1+cuda12.2)).
        type: str
        default: ""
      asked_by:
        description: The host and variable that asked, for messages.
        type: str
        default: ""
  gnupghome:
    description: The GnuPG home holding the mirror's signing key.
    type: path
    required: true
  sign_with:
    description: The signing key's fingerprint.
    type: str
    required: true
  origin:
    description: The C(Origin) and C(Label) of the local repository's C(Release) file.
    type: str
    default: gpucluster-mirror
attributes:
  check_mode:
    support: full
    description: Reads the vendor's index and returns what would be downloaded; writes nothing.
  diff_mode:
    support: none
    description: The packages added are returned in RV(downloaded).
"""

EXAMPLES = r"""
- name: Mirror the driver branch 550 with its fabric manager, and NCCL 2.18.3
  gpucluster.ops.apt_mirror:
    upstream: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/
    signed_by: /var/lib/gpucluster-mirror/keys/cuda-debian12-x86_64.asc
    dest: /srv/gpucluster-mirror/cuda/debian12/x86_64
    gnupghome: /var/lib/gpucluster-mirror/gnupg
    sign_with: 0123456789ABCDEF0123456789ABCDEF01234567
    requests:
      - names: [nvidia-driver, nvidia-kernel-dkms, nvidia-fabricmanager-550, libnvidia-nscq-550]
        pattern: '^([0-9]+:)?550\.'
        together: true
        want: branch 550
        asked_by: nvidia_driver_branch of dgx01
      - names: [libnccl2, libnccl-dev]
        pattern: '^([0-9]+:)?2\.18\.3-1\+cuda12\.2$'
        want: 2.18.3-1+cuda12.2
        asked_by: nccl_version of dgx01
"""

RETURN = r"""
packages:
  description: Every package of the pinned set and of its dependencies from the repository, name to the versions
    the requests take (several where nodes pin different ones).
  returned: success
  type: dict
  sample: {"nvidia-fabricmanager-550": ["550.54.15-1", "550.90.07-1"], "libnccl2": ["2.18.3-1+cuda12.2"]}
downloaded:
  description: The package files added to O(dest) (in check mode, those that would be).
  returned: success
  type: list
  elements: str
from_distribution:
  description: Dependencies the repository does not offer, left to the distribution's mirror.
  returned: success
  type: list
  elements: str
index_written:
  description: Whether the index was (in check mode, would be) rewritten and signed.
  returned: success
  type: bool
"""

import gzip
import os
import re
from functools import cmp_to_key

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpucluster.ops.plugins.module_utils._apt_scratch import (
    ScratchApt, compare_versions, deb_file_name, parse_relations, parse_stanzas, satisfies)


_VERSION_ORDER = cmp_to_key(lambda a, b: compare_versions(a["Version"], b["Version"]))


def index_of(stanzas, architecture=None):
    """``({name: [stanza, newest first]}, {virtual name: [(stanza, provided version)]})`` of the packages built for
    ``architecture`` or for all (every architecture when it is None)."""
    real, provided = {}, {}
    for stanza in stanzas:
        if "Package" not in stanza or "Version" not in stanza:
            continue
        if architecture and stanza.get("Architecture", "all") not in (architecture, "all"):
            continue
        real.setdefault(stanza["Package"], []).append(stanza)
        for group in parse_relations(stanza.get("Provides", "")):
            for name, _op, version in group:
                provided.setdefault(name, []).append((stanza, version))
    for name, versions in real.items():
        unique = {}
        for stanza in versions:
            unique.setdefault(stanza["Version"], stanza)
        real[name] = sorted(unique.values(), key=_VERSION_ORDER, reverse=True)
    return real, provided


def _offered(real, name):
    return ", ".join(s["Version"] for s in real.get(name, [])[:5]) or "none"


def resolve(real, requests):
    """``(picks [(request, {name: version})], errors [str])``: each request's packages at the newest version its
    pattern takes. Requests are resolved one by one: nodes that pin different versions each get theirs."""
    picks, errors = [], []
    for request in requests:
        pattern = re.compile(request.get("pattern") or "")
        names = request["names"]
        offered = dict((name, [s["Version"] for s in real.get(name, []) if pattern.search(s["Version"])]) for name in names)
        where = (" (%s)" % request["asked_by"]) if request.get("asked_by") else ""
        want = request.get("want") or "any version"
        if request.get("together"):
            # The newest version of the first package, as the node chooses; every other one must be offered at it.
            newest = offered[names[0]][0] if offered[names[0]] else ""
            missing = [name for name in names if newest not in offered[name]]
            if newest and not missing:
                picks.append((request, dict((name, newest) for name in names)))
                continue
            errors.append("%s at one version (%s%s): %s %s" % (
                ", ".join(names), want, where,
                "no version matches for" if not newest else "at %s, missing" % newest,
                "; ".join("%s (offered: %s)" % (name, _offered(real, name)) for name in (missing or names))))
            continue
        lacking = [name for name in names if not offered[name]]
        errors.extend("%s %s%s (offered: %s)" % (name, want, where, _offered(real, name)) for name in lacking)
        if not lacking:
            picks.append((request, dict((name, offered[name][0]) for name in names)))
    return picks, errors


def _prefer(fitting, parent_version, pattern):
    """Among the versions that meet a dependency (newest first): the parent's own version (a driver's companion), else
    one the request's pattern takes, else the newest."""
    for stanza in fitting:
        if stanza["Version"] == parent_version:
            return stanza
    for stanza in fitting:
        if pattern and re.search(pattern, stanza["Version"]):
            return stanza
    return fitting[0]


def close(real, provided, pins, pattern=""):
    """Adds to ``pins`` (one request's {name: version}) the dependencies the repository offers; returns
    ``(from_distribution, errors)``."""
    from_distribution, errors = set(), []
    queue = sorted(pins.items())
    while queue:
        name, version = queue.pop(0)
        stanza = next(s for s in real[name] if s["Version"] == version)
        relations = parse_relations(stanza.get("Pre-Depends", "")) + parse_relations(stanza.get("Depends", ""))
        for group in relations:
            if any(alt in pins and satisfies(pins[alt], op, wanted) for alt, op, wanted in group):
                continue
            pick = None
            for alt, op, wanted in group:
                fitting = [s for s in real.get(alt, []) if satisfies(s["Version"], op, wanted)]
                if fitting:
                    best = _prefer(fitting, version, pattern)
                    pick = (alt, best["Version"])
                    break
                providers = [s for s, given in provided.get(alt, []) if (not op and not given) or (
                    given and satisfies(given, op, wanted))]
                if providers:
                    best = _prefer(sorted(providers, key=_VERSION_ORDER, reverse=True), version, pattern)
                    pick = (best["Package"], best["Version"])
                    break
            if pick:
                if pick[0] in pins and pins[pick[0]] != pick[1]:
                    errors.append("%s=%s needs %s=%s, and %s=%s is already pinned" % (
                        name, version, pick[0], pick[1], pick[0], pins[pick[0]]))
                    continue
                pins[pick[0]] = pick[1]
                queue.append(pick)
            elif any(alt in real or alt in provided for alt, _op, _wanted in group):
                errors.append("%s=%s depends on %s, which the repository offers at no fitting version" % (
                    name, version, " | ".join(("%s (%s %s)" % (a, o, w)) if o else a for a, o, w in group)))
            else:
                from_distribution.add(" | ".join(alt for alt, _op, _wanted in group))
    return sorted(from_distribution), errors


def listed_files(dest):
    """The package files the local index lists (an empty set when there is no index)."""
    path = os.path.join(dest, "Packages")
    if not os.path.exists(path):
        return None
    with open(path) as handle:
        return set(os.path.basename(s.get("Filename", "")) for s in parse_stanzas(handle.read()))


def write_index(module, dest, gnupghome, key, origin):
    def run(argv, **kwargs):
        rc, out, err = module.run_command(argv, cwd=dest, environ_update={"LC_ALL": "C"}, **kwargs)
        if rc != 0:
            module.fail_json(msg="%s failed in %s: %s" % (" ".join(argv[:3]), dest, (err or out).strip()))
        return out

    packages = run(["apt-ftparchive", "packages", "."])
    for name in ("InRelease", "Release.gpg", "Release"):
        if os.path.exists(os.path.join(dest, name)):
            os.remove(os.path.join(dest, name))
    with open(os.path.join(dest, "Packages"), "w") as handle:
        handle.write(packages)
    with gzip.GzipFile(os.path.join(dest, "Packages.gz"), "wb", mtime=0) as handle:
        handle.write(packages.encode())
    release = run(["apt-ftparchive", "-o", "APT::FTPArchive::Release::Origin=%s" % origin,
                   "-o", "APT::FTPArchive::Release::Label=%s" % origin, "release", "."])
    with open(os.path.join(dest, "Release"), "w") as handle:
        handle.write(release)
    gpg = ["gpg", "--homedir", gnupghome, "--batch", "--yes", "--local-user", key]
    run(gpg + ["--clearsign", "--output", "InRelease", "Release"])
    run(gpg + ["--armor", "--detach-sign", "--output", "Release.gpg", "Release"])


SIGNED_BY_MARK = ".gpucluster-signed-by"


def _signed_by(dest):
    path = os.path.join(dest, SIGNED_BY_MARK)
    if not os.path.exists(path):
        return ""
    with open(path) as handle:
        return handle.read().strip()


def main():
    module = AnsibleModule(
        argument_spec=dict(
            upstream=dict(type="str", required=True),
            signed_by=dict(type="path"),
            architecture=dict(type="str"),
            dest=dict(type="path", required=True),
            requests=dict(type="list", elements="dict", required=True, options=dict(
                names=dict(type="list", elements="str", required=True),
                pattern=dict(type="str", default=""),
                together=dict(type="bool", default=False),
                want=dict(type="str", default=""),
                asked_by=dict(type="str", default=""),
            )),
            gnupghome=dict(type="path", required=True),
            sign_with=dict(type="str", required=True),
            origin=dict(type="str", default="gpucluster-mirror"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    dest = params["dest"]
    if params["signed_by"] and not os.path.exists(params["signed_by"]):
        if not module.check_mode:
            module.fail_json(msg="the key of %s, %s, is not on this host: the copies could not be checked against it. "
                             "Nothing was changed." % (params["upstream"], params["signed_by"]))
        module.warn("%s is not on this host yet: the index of %s was read unverified (check mode)" % (
            params["signed_by"], params["upstream"]))
    architecture = params["architecture"]
    if not architecture:
        architecture = module.run_command(["dpkg", "--print-architecture"], check_rc=True)[1].strip()
    with ScratchApt(module, params["upstream"], signed_by=params["signed_by"], architecture=architecture) as apt:
        apt.update()
        real, provided = index_of(parse_stanzas(apt.packages_index()), architecture)
        picks, errors = resolve(real, params["requests"])
        from_distribution = set()
        chosen = set()
        for request, pins in picks:
            left, more = close(real, provided, pins, request.get("pattern") or "")
            from_distribution.update(left)
            errors.extend(more)
            chosen.update(pins.items())
        packages = {}
        for name, version in sorted(chosen):
            packages.setdefault(name, []).append(version)
        if errors:
            module.fail_json(msg="the repository %s cannot give the pinned set: %s. Nothing was changed." % (
                params["upstream"], "; ".join(errors)), packages=packages)
        wanted = {}
        for name, version in chosen:
            stanza = next(s for s in real[name] if s["Version"] == version)
            wanted[deb_file_name(name, version, stanza.get("Architecture", "all"))] = (name, version, stanza)
        present = set(f for f in os.listdir(dest) if f.endswith(".deb")) if os.path.isdir(dest) else set()
        # A file of another size than the index says (a download cut short) is fetched again.
        torn = set(f for f in present & set(wanted)
                   if wanted[f][2].get("Size") and os.path.getsize(os.path.join(dest, f)) != int(wanted[f][2]["Size"]))
        missing = sorted((set(wanted) - present) | torn)
        listed = listed_files(dest)
        index_stale = bool(missing) or listed is None or listed != present or not os.path.exists(
            os.path.join(dest, "InRelease")) or _signed_by(dest) != params["sign_with"]
        if not module.check_mode and missing:
            if not os.path.isdir(dest):
                os.makedirs(dest, 0o755)
            for name in torn:
                os.remove(os.path.join(dest, name))
            rc, out, err = apt.run("apt-get", ["-q", "download"] + ["%s=%s" % wanted[f][:2] for f in missing], cwd=dest)
            absent = [f for f in missing if not os.path.exists(os.path.join(dest, f))]
            if rc != 0 or absent:
                module.fail_json(msg="apt-get download from %s failed (%s): %s" % (
                    params["upstream"], ", ".join(absent) or "rc %d" % rc, (err or out).strip()))
    if not module.check_mode and index_stale:
        if not os.path.isdir(dest):
            os.makedirs(dest, 0o755)
        write_index(module, dest, params["gnupghome"], params["sign_with"], params["origin"])
        with open(os.path.join(dest, SIGNED_BY_MARK), "w") as handle:
            handle.write(params["sign_with"] + "\n")
    module.exit_json(changed=bool(missing) or index_stale, packages=packages, downloaded=missing,
                     from_distribution=sorted(from_distribution), index_written=index_stale)


if __name__ == "__main__":
    main()
