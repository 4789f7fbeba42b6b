# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The node side of playbooks/health_sweep.yml, sent by ansible.builtin.raw (no module machinery on the node).

One call per node: run the installed checker (``gpucluster-health --format json``), or replay a captured bundle on
the controller, and read the versions the fleet compares (the GPU stack's local fact, ``ofed_info -s``, the HCAs'
``fw_ver``). It prints one JSON document and exits 0 whatever it found: the checker's exit code (0 ok, 1 warning,
2 error, 3 unknown, 64 usage or config error) is a field, not a failure. Standard library only.

The one argument is a JSON object: ``cli`` (the checker), ``config_file`` (its config on the node), ``level``,
``run_checker`` (false: only tell whether the checker is there and read the versions), ``from_dir`` (a bundle to
replay, with ``config``: the checker's config as a mapping, given on stdin), ``timeout_s``, and for the monthly
maintenance's preflight ``tools`` (names of the checker's sources, such as ``dcgmi``, each resolved on the node from
the config's sources, else from ``sources`` (the inventory's health_check_sources), else the program's name); the
answer then also holds the config's ``thresholds``.
"""

import glob
import json
import os
import shutil
import subprocess
import sys

STACK_FACT = "/etc/ansible/facts.d/gpucluster_gpu_stack.fact"
SYS_CLASS_INFINIBAND = "/sys/class/infiniband"


def run(argv, stdin=None, timeout=60):
    """(rc, stdout, stderr); rc 127 when the program cannot be started, 124 when it ran past the timeout."""
    try:
        proc = subprocess.run(argv, input=stdin.encode("utf-8") if stdin is not None else None,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, check=False,
                              env=dict(os.environ, LC_ALL="C", LANG="C"))
    except OSError as error:
        return 127, "", str(error)
    except subprocess.TimeoutExpired:
        return 124, "", "%s ran past %d s" % (argv[0], timeout)
    return proc.returncode, proc.stdout.decode("utf-8", "replace"), proc.stderr.decode("utf-8", "replace")


def checker(args, out):
    """Run the checker; fill rc, result (the parsed JSON document or None) and error."""
    from_dir = args.get("from_dir")
    if from_dir:
        argv = [sys.executable, args["cli"], "--from-dir", from_dir, "--config", "/dev/stdin"]
        stdin = json.dumps(args.get("config") or {})
    else:
        argv = [args["cli"]] + (["--config", args["config_file"]] if out["config_exists"] else [])
        stdin = None
    argv += ["--level", args["level"], "--format", "json"]
    rc, stdout, stderr = run(argv, stdin, args.get("timeout_s") or 3600)
    out["rc"] = rc
    try:
        result = json.loads(stdout)
    except ValueError:
        result = None
    if not isinstance(result, dict) or "status" not in result:
        out["result"] = None
        out["error"] = "gpucluster-health exited %d without a result: %s" % (
            rc, (stderr.strip().splitlines() or [stdout.strip()[:200] or "no output"])[-1])
        return
    # The run's timing is the sweep's business, not the node's health: the module path has none either.
    for key in ("duration_s", "cpu_s"):
        result.pop(key, None)
    out["result"] = result


def read_config(args):
    """The checker's config on the node as a mapping, or None when there is none or it cannot be read."""
    try:
        with open(args["config_file"]) as handle:
            config = json.load(handle)
    except (IOError, OSError, ValueError, KeyError, TypeError):
        return None
    return config if isinstance(config, dict) else None


def config_sources(args):
    """The config's sources (a mapping, empty when there is none)."""
    sources = (read_config(args) or {}).get("sources")
    return sources if isinstance(sources, dict) else {}


def tools(args):
    """{name: {"path": what the config names, "found": the program's full path or None}} for ``args["tools"]``."""
    sources = dict(args.get("sources") or {})
    sources.update(config_sources(args))
    found = {}
    for name in args.get("tools") or []:
        path = str(sources.get(name) or name)
        resolved = shutil.which(path)
        found[name] = {"path": path, "found": resolved}
    return found


def stack(from_dir):
    """The installed GPU stack (the roles' local fact), or None."""
    if from_dir or not os.access(STACK_FACT, os.X_OK):
        return None
    rc, stdout, _stderr = run([STACK_FACT])
    try:
        return json.loads(stdout) if rc == 0 else None
    except ValueError:
        return None


def ofed(from_dir):
    """`ofed_info -s` without its trailing colon (MLNX_OFED_LINUX-24.10-1.1.4.0), or None."""
    if from_dir or not shutil.which("ofed_info"):
        return None
    rc, stdout, _stderr = run(["ofed_info", "-s"])
    version = stdout.strip().rstrip(":").strip()
    return version if rc == 0 and version else None


def ib_firmware(args):
    """{HCA: fw_ver} from the bundle's or the node's sysfs (the checker's sources.sys_class_infiniband)."""
    if args.get("from_dir"):
        root = os.path.join(args["from_dir"], "sys-class-infiniband")
    else:
        root = SYS_CLASS_INFINIBAND
        root = config_sources(args).get("sys_class_infiniband") or root
    firmware = {}
    for path in sorted(glob.glob(os.path.join(root, "*", "fw_ver"))):
        try:
            with open(path) as handle:
                firmware[os.path.basename(os.path.dirname(path))] = handle.read().strip()
        except (IOError, OSError):
            continue
    return firmware


def main():
    args = json.loads(sys.argv[1])
    from_dir = args.get("from_dir")
    out = {
        "installed": os.path.isfile(args["cli"]) and os.access(args["cli"], os.X_OK),
        "config_exists": bool(args.get("config_file")) and os.path.isfile(args["config_file"]),
        "rc": None,
        "result": None,
        "error": None,
    }
    if from_dir and not os.path.isdir(from_dir):
        out["error"] = "health_sweep_from_dir %s is not a directory" % from_dir
    elif args.get("run_checker") and out["installed"]:
        checker(args, out)
    if args.get("tools"):
        out["tools"] = tools(args)
        thresholds = (read_config(args) or {}).get("thresholds")
        out["thresholds"] = thresholds if isinstance(thresholds, dict) else {}
    out["stack"] = stack(from_dir)
    out["ofed_version"] = ofed(from_dir)
    out["ib_fw"] = ib_firmware(args)
    sys.stdout.write(json.dumps(out, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
