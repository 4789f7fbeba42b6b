"""A repository twin: a signed flat apt repository with NVIDIA's package names, versions and relations, built from
tests/support/nvidia_twin/manifest.yml with dpkg-deb. Its packages hold marker files instead of drivers, so apt, dpkg,
pinning and holds run for real against NVIDIA's structure while only the payload is a stand-in (as the GPU simulator
stands in for the hardware).

    python3 tests/support/repo_twin.py OUT [--omit NAME=VERSION ...] [--archive FILE.tar] [--gnupghome DIR]
                                           [--repository NAME] [--manifest FILE]

writes OUT/<repository path>/ (the .deb files, Packages, Packages.gz, Release, InRelease, Release.gpg and the public
key under the manifest's key file name) and prints a JSON summary. The signing key is made afresh in a temporary GnuPG
home for each build, or kept in --gnupghome DIR so that several twins (a complete mirror and an incomplete one) have
one signer.
"""

import argparse
import gzip
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
MANIFEST = os.path.join(HERE, "nvidia_twin", "manifest.yml")
RELATIONS = ("depends", "pre_depends", "recommends", "conflicts", "breaks", "provides", "replaces")
CONTROL_FIELD = {"depends": "Depends", "pre_depends": "Pre-Depends", "recommends": "Recommends",
                 "conflicts": "Conflicts", "breaks": "Breaks", "provides": "Provides", "replaces": "Replaces"}
MAINTAINER = "gpucluster.ops repository twin <twin@gpucluster.invalid>"
SIGNER = "gpucluster.ops repository twin (test key) <twin@gpucluster.invalid>"


def load(path=MANIFEST):
    """The manifest as a dict."""
    with open(path) as handle:
        return yaml.safe_load(handle)


def _branch(driver):
    return driver.split(".", 1)[0]


def _fill(template, driver):
    if driver is None:
        return template
    return template.replace("{driver}", driver).replace("{branch}", _branch(driver))


def _drivers(manifest):
    return [entry["version"] if isinstance(entry, dict) else str(entry) for entry in manifest.get("drivers", [])]


def expand(manifest):
    """Every package version the manifest describes: [{name, version, fields: {control field: value}, files}]."""
    packages = []
    for entry in manifest["packages"]:
        if entry.get("per_driver"):
            branches = [str(branch) for branch in entry.get("branches", [])]
            drivers = [d for d in _drivers(manifest) if not branches or _branch(d) in branches]
            versions = [(d, _fill(str(entry.get("version", "{driver}-1")), d)) for d in drivers]
        else:
            literal = entry.get("versions") or [entry["version"]]
            versions = [(None, str(version)) for version in literal]
        for driver, version in versions:
            fields = {}
            for relation in RELATIONS:
                values = [_fill(str(value), driver) for value in entry.get(relation) or []]
                if values:
                    fields[CONTROL_FIELD[relation]] = ", ".join(values)
            packages.append({"name": _fill(entry["name"], driver), "version": version, "driver": driver,
                             "architecture": entry.get("architecture", "amd64"), "fields": fields,
                             "files": [_fill(path, driver) for path in entry.get("files") or []],
                             "repository": entry.get("repository", "cuda")})
    return packages


def _marker(package, path):
    """The content of a marker file at ``path``: a unit that does nothing, a program that says what it is, or text."""
    what = "%s %s from the gpucluster.ops repository twin: a marker, not NVIDIA's software" % (
        package["name"], package["version"])
    if path.endswith(".service"):
        return ("[Unit]\nDescription=%s\n\n[Service]\nType=oneshot\nRemainAfterExit=yes\nExecStart=/bin/true\n\n"
                "[Install]\nWantedBy=multi-user.target\n" % what), 0o644
    if "/bin/" in path or "/sbin/" in path:
        return "#!/bin/sh\necho '%s' >&2\nexit 1\n" % what, 0o755
    return what + "\n", 0o644


def build_deb(package, out_dir, work):
    """Build one .deb of ``package`` into ``out_dir``; return its file name."""
    root = os.path.join(work, "%s_%s" % (package["name"], package["version"].replace(":", "_")))
    os.makedirs(os.path.join(root, "DEBIAN"))
    marker_doc = "/usr/share/doc/%s/gpucluster-twin" % package["name"]
    for path in package["files"] + [marker_doc]:
        content, mode = _marker(package, path)
        target = os.path.join(root, path.lstrip("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w") as handle:
            handle.write(content)
        os.chmod(target, mode)
    control = ["Package: %s" % package["name"], "Version: %s" % package["version"],
               "Architecture: %s" % package["architecture"], "Maintainer: %s" % MAINTAINER, "Section: non-free/libs",
               "Priority: optional"]
    control += ["%s: %s" % item for item in sorted(package["fields"].items())]
    control.append("Description: %s (repository twin)\n Marker files only: no NVIDIA software is in this package."
                   % package["name"])
    with open(os.path.join(root, "DEBIAN", "control"), "w") as handle:
        handle.write("\n".join(control) + "\n")
    name = "%s_%s_%s.deb" % (package["name"], package["version"].split(":")[-1], package["architecture"])
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, os.path.join(out_dir, name)],
                   check=True, stdout=subprocess.DEVNULL)
    shutil.rmtree(root)
    return name


def _digests(path):
    data = open(path, "rb").read()
    return {"size": len(data), "md5": hashlib.md5(data).hexdigest(), "sha1": hashlib.sha1(data).hexdigest(),
            "sha256": hashlib.sha256(data).hexdigest()}


def _control_of(deb):
    return subprocess.run(["dpkg-deb", "-f", deb], check=True, stdout=subprocess.PIPE).stdout.decode().rstrip("\n")


def write_index(repo_dir, debs, origin, label):
    """Packages, Packages.gz and Release of a flat repository in ``repo_dir``."""
    stanzas = []
    for deb in sorted(debs):
        digests = _digests(os.path.join(repo_dir, deb))
        stanzas.append("%s\nFilename: ./%s\nSize: %d\nMD5sum: %s\nSHA1: %s\nSHA256: %s\n" % (
            _control_of(os.path.join(repo_dir, deb)), deb, digests["size"], digests["md5"], digests["sha1"],
            digests["sha256"]))
    packages = "\n".join(stanzas)
    with open(os.path.join(repo_dir, "Packages"), "w") as handle:
        handle.write(packages)
    with gzip.GzipFile(os.path.join(repo_dir, "Packages.gz"), "wb", mtime=0) as handle:
        handle.write(packages.encode())
    release = ["Origin: %s" % origin, "Label: %s" % label, "Architectures: amd64 all",
               "Date: %s" % time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime())]
    for field, key in (("MD5Sum", "md5"), ("SHA1", "sha1"), ("SHA256", "sha256")):
        release.append("%s:" % field)
        for index in ("Packages", "Packages.gz"):
            digests = _digests(os.path.join(repo_dir, index))
            release.append(" %s %16d %s" % (digests[key], digests["size"], index))
    with open(os.path.join(repo_dir, "Release"), "w") as handle:
        handle.write("\n".join(release) + "\n")


def sign(repo_dir, key_file, gnupghome=None):
    """Sign Release (InRelease, Release.gpg) with a key made for this build, or the key kept in ``gnupghome`` (made
    there on first use, so that several twins share one signer); its public key goes to ``key_file``."""
    home = gnupghome or tempfile.mkdtemp(prefix="twin-gnupg-")
    try:
        os.makedirs(home, mode=0o700, exist_ok=True)
        gpg = ["gpg", "--homedir", home, "--batch", "--quiet", "--pinentry-mode", "loopback", "--passphrase", ""]
        listed = subprocess.run(gpg + ["--list-secret-keys"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                check=False).stdout
        if not listed.strip():
            subprocess.run(gpg + ["--quick-generate-key", SIGNER, "ed25519", "sign", "never"], check=True,
                           stderr=subprocess.DEVNULL)
        release = os.path.join(repo_dir, "Release")
        subprocess.run(gpg + ["--yes", "--clearsign", "-o", os.path.join(repo_dir, "InRelease"), release], check=True)
        subprocess.run(gpg + ["--yes", "-abs", "-o", os.path.join(repo_dir, "Release.gpg"), release], check=True)
        subprocess.run(gpg + ["--yes", "--armor", "-o", os.path.join(repo_dir, key_file), "--export"], check=True)
    finally:
        if not gnupghome:
            shutil.rmtree(home, ignore_errors=True)


def build(out, manifest=None, omit=(), repository="cuda", gnupghome=None):
    """Build the twin of one of the manifest's repositories under ``out``; return a summary (path, key file, packages).

    ``omit``: "name=version" (or "name") entries left out, as an incomplete mirror would lack them.
    """
    manifest = manifest or load()
    repo = manifest["repository"] if repository == "cuda" else manifest["repositories"][repository]
    repo_dir = os.path.join(out, repo["path"])
    os.makedirs(repo_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix="twin-build-")
    built = []
    try:
        for package in expand(manifest):
            if package["repository"] != repository:
                continue
            if package["name"] in omit or "%s=%s" % (package["name"], package["version"]) in omit:
                continue
            build_deb(package, repo_dir, work)
            built.append("%s=%s" % (package["name"], package["version"]))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    debs = [name for name in os.listdir(repo_dir) if name.endswith(".deb")]
    write_index(repo_dir, debs, repo.get("origin", "NVIDIA"), repo.get("label", "NVIDIA"))
    sign(repo_dir, repo["key_file"], gnupghome)
    return {"path": repo_dir, "key_file": os.path.join(repo_dir, repo["key_file"]), "packages": built}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("out")
    parser.add_argument("--omit", action="append", default=[], help="NAME or NAME=VERSION to leave out")
    parser.add_argument("--repository", default="cuda")
    parser.add_argument("--archive", help="also pack OUT into this tar file (paths relative to OUT)")
    parser.add_argument("--gnupghome", help="sign with the key kept here (made on first use), not a fresh one")
    parser.add_argument("--manifest", default=MANIFEST, help="another manifest of the same form (default: NVIDIA's)")
    args = parser.parse_args(argv)
    if os.path.isdir(args.out):
        shutil.rmtree(args.out)
    summary = build(args.out, manifest=load(args.manifest), omit=args.omit, repository=args.repository,
                    gnupghome=args.gnupghome)
    if args.archive:
        with tarfile.open(args.archive, "w") as archive:
            archive.add(args.out, arcname=".")
        summary["archive"] = args.archive
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    sys.exit(main())
