# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""Collect a node's health inputs (live or from a replay bundle), run the checks, and render the result.

Used by the ``gpu_health`` module and by ``bin/gpucluster-health``; the parsers and the checks live in their own
modules. A bundle is a directory with one file per input (names in ``INPUTS``); a command that failed leaves
``<file>.rc`` and ``<file>.stderr`` beside (or instead of) its output.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import time

from ansible_collections.gpucluster.ops.plugins.module_utils import _health_checks as checks
# write_atomic: the reports' writer (bin/gpucluster-health), one for the collection
from ansible_collections.gpucluster.ops.plugins.module_utils._fleet import write_atomic  # noqa: F401  pylint: disable=unused-import
from ansible_collections.gpucluster.ops.plugins.module_utils._parse_util import DEFAULT_INPUT_MAX_BYTES, read_bounded

CONFIG_DEFAULTS = {
    "node": None,
    "level": "quick",
    "expected": {},
    "thresholds": {},
    "xid": {"ignore": [], "window_s": 86400},
    "sources": {
        "nvidia_smi": "nvidia-smi",
        "ibstat": "ibstat",
        "sys_class_infiniband": "/sys/class/infiniband",
        # "journal" (journalctl -k), "dmesg", or "file:/path/to/kern.log"
        "kernel_log": "journal",
        "systemctl": "systemctl",
        "fabricmanager_unit": "nvidia-fabricmanager",
        # "systemctl" (systemctl is-active <unit>) or "file:/path" holding what systemctl would print
        "fabricmanager_state": "systemctl",
        # the fabric manager binary, run with --version (NVSwitch systems, standard level), or "file:/path"
        # holding what it printed
        "fabricmanager_version": "nv-fabricmanager",
        "dcgmi": "dcgmi",
        "dcgm_level": 3,
        "all_reduce_perf": "all_reduce_perf",
    },
    "timeouts": {"command_s": 30, "dcgm_s": 1800, "nccl_s": 900},
    # input_max_bytes: the largest tool output or bundle file read; a larger one is unreadable (unknown), never
    # parsed in part. clock_skew_s: how far a capture time or a kernel log stamp may lie ahead of the clock.
    "limits": {"input_max_bytes": DEFAULT_INPUT_MAX_BYTES, "clock_skew_s": 300},
    "state_file": "/var/lib/gpucluster-health/state.json",
    # Counters saved longer ago than this are not compared with (a rising counter needs a recent baseline).
    "state_max_age_s": 1800,
    "slurm": {"max_drained_share": 0.1},
}

# Inputs whose content cannot show that it was cut short or replaced: any text is a valid kernel log. Their failure
# (a non-zero exit, a timeout, an unreadable file) and their absence are still unknown; only their content is
# taken as it comes.
CONTENT_UNVERIFIABLE = ("kernel",)
# Non-zero exits that are an answer, not a failure: systemctl is-active prints the state and exits 3 when inactive
# (but "active" with a non-zero exit contradicts itself and is a failure).
_ANSWER_EXITS = {"fabricmanager": (1, 2, 3, 4)}
_SYSTEMCTL_STATES = ("active", "inactive", "failed", "activating", "deactivating", "reloading", "maintenance",
                     "refreshing", "unknown")
# Exit codes for inputs that could not be read at all (outside the 0-255 a program can exit with): a bundle file
# that is not a readable regular file, and a command or file whose output passed limits.input_max_bytes.
RC_UNREADABLE = 1000
RC_OVER_CAP = 1001
# The oldest capture time taken as real (before it, a bundle's clock was not set).
_EARLIEST_CAPTURE = 1262304000  # 2010-01-01T00:00:00Z

# name, bundle file, lowest level at which the checks need it
INPUTS = (
    ("nvsmi", "nvidia-smi-q.xml", "quick"),
    ("nvlink", "nvlink-status.txt", "quick"),
    ("ib", "sys-class-infiniband", "quick"),
    ("kernel", "kernel.log", "quick"),
    ("fabricmanager", "fabricmanager.state", "quick"),
    ("nvlink_errors", "nvlink-errors.txt", "standard"),
    ("fabricmanager_version", "fabricmanager-version.txt", "standard"),
    ("dcgm", "dcgmi-diag.json", "deep"),
    ("nccl", "nccl-all-reduce.txt", "deep"),
)
# Extra files --collect writes so that a bundle is complete for a person or a later replay with other tools.
EXTRA_COLLECT = (
    ("nvidia-smi-q.txt", lambda c: [c["sources"]["nvidia_smi"], "-q"]),
    ("topo.txt", lambda c: [c["sources"]["nvidia_smi"], "topo", "-m"]),
    ("ibstat.txt", lambda c: [c["sources"]["ibstat"]]),
)


def load_config(path=None, overrides=None):
    """Read the checker's config (JSON, or YAML when PyYAML is there) over the defaults."""
    config = _deep_copy(CONFIG_DEFAULTS)
    if path:
        with open(path) as handle:
            text = handle.read()
        data = _load_structured(text, path)
        if not isinstance(data, dict):
            raise ValueError("%s: the config must be a mapping, not %s" % (path, type(data).__name__))
        _deep_update(config, data)
    if overrides:
        _deep_update(config, overrides)
    _validate_config(config, path or "(defaults)")
    if not config.get("node"):
        config["node"] = socket.gethostname().split(".")[0]
    return config


def _load_structured(text, path):
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError as json_error:
        try:
            import yaml  # pylint: disable=import-outside-toplevel
        except ImportError:
            raise ValueError("%s is not JSON (%s) and PyYAML is not installed to read it as YAML" % (path, json_error))
        try:
            return yaml.safe_load(text) or {}
        except yaml.YAMLError as yaml_error:
            raise ValueError("%s is neither JSON nor YAML: %s" % (path, yaml_error))


_INT_KEYS = ("gpu_count", "nvlinks_per_gpu", "ib_port_count", "pcie_width", "pcie_gen")


def _validate_config(config, origin):
    unknown = sorted(k for k in set(config) - set(CONFIG_DEFAULTS) if not str(k).startswith("_"))
    if unknown:
        known = ", ".join(sorted(CONFIG_DEFAULTS))
        raise ValueError("%s: unknown key(s) %s (known: %s)" % (origin, ", ".join(unknown), known))
    share = (config.get("slurm") or {}).get("max_drained_share")
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise ValueError("%s: slurm.max_drained_share must be a number from 0 to 1, not %r" % (origin, share))
    expected = config.get("expected")
    if not isinstance(expected, dict):
        raise ValueError("%s: expected must be a mapping" % origin)
    for key in _INT_KEYS:
        value = expected.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ValueError("%s: expected.%s must be a whole number >= 0, not %r" % (origin, key, value))
    rate = expected.get("ib_rate_gbps")
    if rate is not None and (isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate <= 0):
        raise ValueError("%s: expected.ib_rate_gbps must be a positive number, not %r" % (origin, rate))
    for key, value in (config.get("thresholds") or {}).items():
        if key not in checks.DEFAULT_THRESHOLDS:
            raise ValueError("%s: thresholds.%s is not a known threshold (known: %s)" % (
                origin, key, ", ".join(sorted(checks.DEFAULT_THRESHOLDS))))
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise ValueError("%s: thresholds.%s must be a number, not %r" % (origin, key, value))
    if config.get("level") not in checks.LEVELS:
        raise ValueError("%s: level must be one of %s, not %r" % (origin, ", ".join(checks.LEVELS),
                                                                  config.get("level")))
    ignore = (config.get("xid") or {}).get("ignore") or []
    if not all(isinstance(code, int) and not isinstance(code, bool) for code in ignore):
        raise ValueError("%s: xid.ignore must be a list of Xid numbers, not %r" % (origin, ignore))
    limits = config.get("limits")
    if not isinstance(limits, dict) or set(limits) - set(CONFIG_DEFAULTS["limits"]):
        raise ValueError("%s: limits must be a mapping with the keys %s, not %r" % (
            origin, ", ".join(sorted(CONFIG_DEFAULTS["limits"])), limits))
    for key, lowest in (("input_max_bytes", 1), ("clock_skew_s", 0)):
        value = limits.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
            raise ValueError("%s: limits.%s must be a whole number >= %d, not %r" % (origin, key, lowest, value))
    age = config.get("state_max_age_s")
    if isinstance(age, bool) or not isinstance(age, (int, float)) or age <= 0:
        raise ValueError("%s: state_max_age_s must be a positive number of seconds, not %r" % (origin, age))


def _deep_copy(value):
    return json.loads(json.dumps(value))


def _deep_update(base, extra):
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _deep_update(base[key], value)
        else:
            base[key] = value


def _wanted(name, config, level, snapshot=None):
    """Whether an input is needed at this level with this config (no NVLink call on PCIe-only nodes, ...).

    An expected count of 0 says the node has none (no call); an expectation left out reads the input anyway, so
    that a node checked without a config is still judged on what needs no expected value (an inactive NVLink, a
    port Down or Polling). The fabric manager's version is read on NVSwitch systems only: ``expected.nvswitch``,
    or GPUs with fabric state in the ``nvsmi`` input of ``snapshot`` (read before it).
    """
    expected = config.get("expected") or {}
    allowed = checks.LEVELS[:checks.LEVELS.index(level) + 1]
    input_level = dict((n, lvl) for n, _f, lvl in INPUTS)[name]
    if input_level not in allowed:
        return False
    if name in ("nvlink", "nvlink_errors"):
        return expected.get("nvlinks_per_gpu") != 0
    if name == "fabricmanager":
        return bool(expected.get("nvswitch"))
    if name == "fabricmanager_version":
        return checks.nvswitch_system(snapshot or {}, config)
    if name == "ib":
        return expected.get("ib_port_count") != 0
    if name == "nccl":
        return bool((config.get("thresholds") or {}).get("nccl_busbw_min_gbps"))
    return True


def _optional(name, config):
    """Inputs read without an expectation: their absence on the node (no NVLink, no HCA) is no finding."""
    expected = config.get("expected") or {}
    if name in ("nvlink", "nvlink_errors"):
        return not expected.get("nvlinks_per_gpu")
    if name == "ib":
        return not (expected.get("ib_port_count") or expected.get("ib_rate_gbps"))
    return False


# --------------------------------------------------------------------------------------------------------------
# Parsing (imports are lazy: a quick run loads only the parsers it needs)
# --------------------------------------------------------------------------------------------------------------

def _parse(name, text, bundle_path=None, since_epoch=None, level="quick"):
    # pylint: disable=import-outside-toplevel
    if name == "nvsmi":
        from ansible_collections.gpucluster.ops.plugins.module_utils import _nvsmi
        if bundle_path and bundle_path.endswith(".csv"):
            return _nvsmi.parse_query_csv(text)
        if bundle_path and bundle_path.endswith(".txt"):
            return _nvsmi.parse_query_text(text)
        return _nvsmi.parse_query_xml(text)
    if name in ("nvlink", "nvlink_errors"):
        from ansible_collections.gpucluster.ops.plugins.module_utils import _nvlink
        return _nvlink.parse_nvlink_status(text) if name == "nvlink" else _nvlink.parse_nvlink_errors(text)
    if name == "ib":
        from ansible_collections.gpucluster.ops.plugins.module_utils import _ib
        if bundle_path and os.path.isdir(bundle_path):
            return _ib.read_sys_class_infiniband(bundle_path, counters=level != "quick")
        return _ib.parse_ibstat(text)
    if name == "kernel":
        from ansible_collections.gpucluster.ops.plugins.module_utils import _kernlog
        return _kernlog.parse_kernel_log(text, since_epoch=since_epoch)
    if name == "fabricmanager":
        return text.strip().splitlines()[0].strip() if text.strip() else None
    if name == "fabricmanager_version":
        from ansible_collections.gpucluster.ops.plugins.module_utils import _fabricmanager
        return _fabricmanager.parse_fabricmanager_version(text)
    if name == "dcgm":
        from ansible_collections.gpucluster.ops.plugins.module_utils import _dcgm
        return _dcgm.parse_dcgmi_diag(text)
    if name == "nccl":
        from ansible_collections.gpucluster.ops.plugins.module_utils import _nccl
        return _nccl.parse_all_reduce(text)
    raise KeyError(name)


def _max_bytes(config):
    return int(((config or {}).get("limits") or {}).get("input_max_bytes") or DEFAULT_INPUT_MAX_BYTES)


def xid_catalog():
    """The Xid catalog of the kernel-log parser ({} when it has none)."""
    # pylint: disable=import-outside-toplevel
    from ansible_collections.gpucluster.ops.plugins.module_utils import _kernlog
    return getattr(_kernlog, "XID_CATALOG", {})


# --------------------------------------------------------------------------------------------------------------
# Replay from a bundle
# --------------------------------------------------------------------------------------------------------------

_NVSMI_FALLBACKS = ("nvidia-smi-q.xml", "nvidia-smi-q.txt", "nvidia-smi-query.csv")
_DCGM_FALLBACKS = ("dcgmi-diag.json", "dcgmi-diag.txt")


def _read_text(path, max_bytes=DEFAULT_INPUT_MAX_BYTES):
    """A bundle or ``file:`` input as text; ``IOError`` with the reason when it is not a readable regular file."""
    data, why = read_bounded(path, max_bytes)
    if data is None:
        raise IOError("%s %s" % (path, why))
    return data.decode("utf-8", "replace")


def _bundle_failure(path, max_bytes):
    """(rc, stderr) recorded beside a bundle file, or None when the command succeeded or left no record."""
    rc_path, err_path = path + ".rc", path + ".stderr"
    rc = None
    if os.path.lexists(rc_path):
        try:
            rc = int(_read_text(rc_path, 64).strip() or "0")
        except (ValueError, IOError, OSError):
            rc = -1
    stderr = ""
    if os.path.lexists(err_path):
        try:
            stderr = _read_text(err_path, max_bytes)
        except (IOError, OSError) as error:
            stderr = str(error)
    if rc in (None, 0) and not (stderr and not os.path.lexists(path)):
        return None
    return {"rc": rc, "stderr": stderr}


def _bundle_file(bundle, name, filename):
    candidates = {"nvsmi": _NVSMI_FALLBACKS, "dcgm": _DCGM_FALLBACKS}.get(name, (filename,))
    if name == "ib" and not os.path.lexists(os.path.join(bundle, filename)):
        candidates = ("ibstat.txt",)
    for candidate in candidates:
        path = os.path.join(bundle, candidate)
        if os.path.lexists(path) or os.path.lexists(path + ".rc") or os.path.lexists(path + ".stderr"):
            return path
    return None


def accept_input(snapshot, name, rc, out, err, parsed, optional=False):
    """Put one collected or replayed input into the snapshot: the same rule for the live node and for a bundle.

    A command that failed (non-zero exit, timeout, killed, an unreadable file: ``rc`` other than 0) is recorded in
    ``failures`` and so is ``unknown`` at best; what it printed before failing is still judged (an error it shows
    counts) and the input is marked ``partial``, so that every expected GPU, link or port missing from it is a
    finding, never silently absent. The exception is a non-zero exit that is the tool's answer, and an output that
    itself explains the exit (``dcgmi diag`` reporting a failed test, ``nvidia-smi`` naming a lost GPU). An output
    that is empty although the command succeeded is a failure too, except for the kernel log (which may be empty)
    and for an ``optional`` input (no expectation names it: older drivers print nothing on a GPU without NVLink).
    ``out`` is None for an input read from a directory (``/sys/class/infiniband``). ``rc`` is ``RC_UNREADABLE`` or
    ``RC_OVER_CAP`` when the input could not be read at all: ``unknown`` even for nvidia-smi, since a file problem
    says nothing about the GPUs.
    """
    failed = rc != 0 and not (rc in _ANSWER_EXITS.get(name, ()) and parsed in _SYSTEMCTL_STATES
                              and parsed != "active")
    content = _has_content(parsed)
    if not failed and out is not None and not out.strip() and name not in CONTENT_UNVERIFIABLE:
        if optional:
            snapshot[name] = None
            return
        failed, err = True, "exited 0 but printed nothing"
    if failed and optional and not content:
        # Read without an expectation (no nvlinks_per_gpu, no ib_port_count) and nothing came back: a note, since
        # nothing is known to be missing. The same on the node and in its bundle.
        snapshot.setdefault("notes", []).append("%s could not be read (rc %s: %s); nothing expects it" % (
            name, rc, checks.first_line(err)))
        snapshot[name] = None
        return
    if failed and not _explains_failure(name, parsed):
        snapshot["failures"][name] = {"rc": rc, "stderr": err or (out or "")[-400:],
                                      "unreadable": rc in (RC_UNREADABLE, RC_OVER_CAP)}
    if failed and not content:
        snapshot[name] = None
        return
    snapshot[name] = parsed
    if failed or (isinstance(parsed, dict) and parsed.get("unreadable")):
        snapshot.setdefault("partial", {})[name] = True


def _explains_failure(name, parsed):
    """Whether a failed tool's output says why it failed in words a check judges (a failed DCGM test, a lost GPU,
    every NVLink inactive), so the failure itself is no extra finding. An error no check judges explains nothing."""
    if not isinstance(parsed, dict) or parsed.get("unreadable"):
        return False
    if name == "dcgm" and any(r.get("status") == "fail" for r in parsed.get("results") or []):
        return True
    return any(checks.judged_error(name, e) for e in parsed.get("errors") or [])


def replay(bundle, config, level):
    """Snapshot from a bundle directory. Time windows count back from the bundle's capture time.

    Every file is read with the input cap and only when it is a regular file (``sys-class-infiniband/`` is a
    directory by design); anything else is an input that could not be read, so ``unknown``.
    """
    snapshot = {"failures": {}, "missing": []}
    if not os.path.isdir(bundle):
        raise ValueError("%s is not a directory" % bundle)
    max_bytes = _max_bytes(config)
    for name, filename, _lvl in INPUTS:
        if not _wanted(name, config, level, snapshot):
            continue
        path = _bundle_file(bundle, name, filename)
        if path is None:
            if not _optional(name, config):
                snapshot["missing"].append(filename)
            continue
        failure = _bundle_failure(path, max_bytes)
        rc, err = (failure["rc"], failure["stderr"]) if failure else (0, "")
        out, parsed = "", None
        if name == "ib" and os.path.isdir(path) and not os.path.islink(path):
            out, parsed = None, _parse(name, "", bundle_path=path, level=level)
        elif os.path.lexists(path):
            try:
                out = _read_text(path, max_bytes)
            except (IOError, OSError) as error:
                rc, err = RC_UNREADABLE, str(error)
            else:
                parsed = _parse(name, out, bundle_path=path, level=level)
        elif rc in (0, None):
            rc = RC_UNREADABLE
        accept_input(snapshot, name, -1 if rc is None else rc, out, err, parsed, optional=_optional(name, config))
    snapshot["now"] = _capture_time(bundle, snapshot, config)
    return snapshot


def _has_content(parsed):
    if parsed is None or isinstance(parsed, str):
        return bool(parsed)
    return bool(parsed.get("gpus") or parsed.get("errors") or parsed.get("devices") or parsed.get("events")
                or parsed.get("results") or parsed.get("rows") or parsed.get("version"))


def _capture_time(bundle, snapshot, config):
    """The epoch the bundle's time windows count back from, or None when it cannot be trusted.

    ``captured_at`` that cannot be parsed, lies ahead of this machine's clock, lies before 2010, or lies before
    the bundle's own newest kernel log stamp is a finding (``unknown``) and the windows are not applied: no Xid or
    flap is dropped on a wrong clock. Without ``captured_at``, the newest kernel log stamp is used.
    """
    path = os.path.join(bundle, "captured_at")
    latest = (snapshot.get("kernel") or {}).get("latest_epoch")
    skew = int(((config or {}).get("limits") or {}).get("clock_skew_s", 300))
    if not os.path.lexists(path):
        return latest if latest else None
    try:
        text = _read_text(path, 256).strip()
    except (IOError, OSError) as error:
        return _time_problem(snapshot, "captured_at cannot be read: %s" % error)
    parsed = _parse_iso(text)
    if parsed is None:
        return _time_problem(snapshot, "captured_at %r is not an ISO 8601 time" % text[:60])
    if parsed > time.time() + skew:
        return _time_problem(snapshot, "captured_at %s lies in the future (this machine's clock: %s)" % (
            _iso(parsed), _iso(time.time())))
    if parsed < _EARLIEST_CAPTURE:
        return _time_problem(snapshot, "captured_at %s lies before 2010: the capturing node's clock was not set" %
                             _iso(parsed))
    if latest and latest > parsed + skew:
        return _time_problem(snapshot, "captured_at %s lies before the kernel log's newest stamp %s" % (
            _iso(parsed), _iso(latest)))
    return parsed


def _time_problem(snapshot, message):
    snapshot.setdefault("time_problems", []).append(message)
    return None


def _parse_iso(text):
    """Epoch seconds from an ISO 8601 time such as 2026-11-30T07:00:00Z or 2026-11-30T07:00:00+01:00."""
    import datetime  # pylint: disable=import-outside-toplevel
    text = text.strip().replace("Z", "+00:00")
    if len(text) > 5 and text[-5] in "+-" and text[-3] != ":":
        text = text[:-2] + ":" + text[-2:]
    try:
        moment = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    try:
        return moment.timestamp()
    except (OverflowError, OSError, ValueError):
        return None


# --------------------------------------------------------------------------------------------------------------
# Live collection (and --collect)
# --------------------------------------------------------------------------------------------------------------

class Runner(object):
    """Runs commands with a timeout and an output cap in the C locale and counts them."""

    def __init__(self, run_command=None, max_bytes=DEFAULT_INPUT_MAX_BYTES):
        self.calls = 0
        self._run_command = run_command
        self.max_bytes = max_bytes

    def run(self, argv, timeout):
        """Return (rc, stdout, stderr); a missing program is rc 127, a timeout rc 124 with what it printed before,
        an output over the cap ``RC_OVER_CAP`` (the program is killed, nothing of its output is used)."""
        self.calls += 1
        if self._run_command is not None:
            return self._run_command(argv, timeout)
        env = dict(os.environ, LC_ALL="C", LANG="C")
        try:
            # not AnsibleModule.run_command: the checker also runs outside a module (Slurm's HealthCheckProgram), and
            # it kills a hung tool at a deadline and caps what it reads, which run_command does not
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                                    stderr=subprocess.PIPE, env=env)
        except OSError as error:
            return 127, "", "%s: %s" % (argv[0], error.strerror or error)
        out, err, why = _read_process(proc, timeout, self.max_bytes)
        if why == "timeout":
            return 124, out, "%s did not finish within %d s (a hung GPU or driver makes nvidia-smi hang)%s" % (
                " ".join(argv), timeout, (": " + err.strip()[:200]) if err.strip() else "")
        if why == "cap":
            return RC_OVER_CAP, "", "%s printed more than the %d-byte input cap (limits.input_max_bytes): killed" % (
                " ".join(argv), self.max_bytes)
        return proc.returncode, out, err


def _read_process(proc, timeout, max_bytes):
    """Read a process's stdout and stderr with a deadline and a cap: (stdout, stderr, None | "timeout" | "cap")."""
    import selectors  # pylint: disable=import-outside-toplevel
    deadline = time.monotonic() + timeout
    buffers = {proc.stdout: [], proc.stderr: []}
    sizes = {proc.stdout: 0, proc.stderr: 0}
    why = None
    with selectors.DefaultSelector() as selector:
        for stream in buffers:
            selector.register(stream, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                why = "timeout"
                break
            for key, _events in selector.select(min(left, 1.0)):
                chunk = os.read(key.fileobj.fileno(), 1 << 16)
                if not chunk:
                    selector.unregister(key.fileobj)
                    continue
                buffers[key.fileobj].append(chunk)
                sizes[key.fileobj] += len(chunk)
                if sizes[key.fileobj] > max_bytes:
                    why = "cap"
                    break
            if why:
                break
    if why:
        proc.kill()
    try:
        proc.wait(timeout=max(1.0, deadline - time.monotonic()) if not why else 5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        why = why or "timeout"
    for stream in buffers:
        stream.close()
    return (b"".join(buffers[proc.stdout]).decode("utf-8", "replace"),
            b"".join(buffers[proc.stderr]).decode("utf-8", "replace"), why)


def _command(name, config):
    sources = config["sources"]
    smi = sources["nvidia_smi"]
    if name == "nvsmi":
        return [smi, "-q", "-x"]
    if name == "nvlink":
        return [smi, "nvlink", "-s"]
    if name == "nvlink_errors":
        return [smi, "nvlink", "-e"]
    if name == "fabricmanager":
        return [sources["systemctl"], "is-active", sources["fabricmanager_unit"]]
    if name == "fabricmanager_version":
        return [sources["fabricmanager_version"], "--version"]
    if name == "dcgm":
        return [sources["dcgmi"], "diag", "-r", str(sources["dcgm_level"]), "-j"]
    if name == "nccl":
        gpus = (config.get("expected") or {}).get("gpu_count") or 8
        return [sources["all_reduce_perf"], "-b", "8", "-e", "8G", "-f", "2", "-g", str(gpus)]
    if name == "kernel":
        window = int((config.get("xid") or {}).get("window_s") or 86400)
        kind = sources["kernel_log"]
        if kind == "dmesg":
            return ["dmesg", "--time-format", "iso"]
        return ["journalctl", "-k", "-o", "short-iso", "--no-pager", "--since", "-%ds" % window]
    raise KeyError(name)


def _timeout(name, config):
    timeouts = config.get("timeouts") or {}
    return {"dcgm": timeouts.get("dcgm_s", 1800), "nccl": timeouts.get("nccl_s", 900)}.get(
        name, timeouts.get("command_s", 30))


def collect(config, level, runner, collect_dir=None):
    """Snapshot from the live node; with collect_dir, also write every output as a replay bundle."""
    snapshot = {"failures": {}, "missing": []}
    now = time.time()
    max_bytes = _max_bytes(config)
    for name, filename, _lvl in INPUTS:
        wanted = _wanted(name, config, level, snapshot)
        bundled = collect_dir and name not in ("nccl", "dcgm") and (
            name != "fabricmanager_version" or checks.nvswitch_system(snapshot, config))
        if not (wanted or bundled):
            continue
        if name == "ib":
            _collect_ib(snapshot, config, level, runner, collect_dir, judge=_wanted(name, config, level))
            continue
        file_source = {"kernel": config["sources"]["kernel_log"],
                       "fabricmanager": config["sources"]["fabricmanager_state"],
                       "fabricmanager_version": config["sources"]["fabricmanager_version"]}.get(name, "")
        if file_source.startswith("file:"):
            rc, out, err = _read_file_source(file_source[len("file:"):], max_bytes)
        else:
            rc, out, err = runner.run(_command(name, config), _timeout(name, config))
        if collect_dir:
            _write_bundle_file(collect_dir, filename, out, rc, err)
        since = now - int((config.get("xid") or {}).get("window_s") or 86400) if name == "kernel" else None
        if name == "kernel" and rc == 0 and err.strip():
            out = out + ("" if out.endswith("\n") or not out else "\n") + err  # journalctl's permission hint
        if not wanted:
            continue  # collected for the bundle only: this level and config do not judge it
        parsed = _parse(name, out, since_epoch=since) if out or name == "fabricmanager" else None
        accept_input(snapshot, name, rc, out, err, parsed, optional=_optional(name, config))
    if collect_dir:
        for filename, argv in EXTRA_COLLECT:
            rc, out, err = runner.run(argv(config), _timeout("extra", config))
            _write_bundle_file(collect_dir, filename, out, rc, err)
        _write(os.path.join(collect_dir, "captured_at"), _iso(now) + "\n")
    snapshot["now"] = now
    latest = (snapshot.get("kernel") or {}).get("latest_epoch")
    skew = int((config.get("limits") or {}).get("clock_skew_s", 300))
    if latest and latest > now + skew:
        _time_problem(snapshot, "the kernel log's newest stamp %s lies ahead of this node's clock %s" % (
            _iso(latest), _iso(now)))
    return snapshot


def _collect_ib(snapshot, config, level, runner, collect_dir, judge=True):
    # pylint: disable=import-outside-toplevel
    from ansible_collections.gpucluster.ops.plugins.module_utils import _ib
    root = config["sources"]["sys_class_infiniband"]
    if os.path.isdir(root):
        parsed = _ib.read_sys_class_infiniband(root, counters=level != "quick" or bool(collect_dir))
        if collect_dir:
            _copy_sysfs(root, os.path.join(collect_dir, "sys-class-infiniband"))
        if judge:
            accept_input(snapshot, "ib", 0, None, "", parsed)
        return
    if _optional("ib", config):
        return  # no HCA and no expectation of one
    rc, out, err = runner.run([config["sources"]["ibstat"]], _timeout("ib", config))
    if collect_dir:
        _write_bundle_file(collect_dir, "ibstat.txt", out, rc, err)
    parsed = _ib.parse_ibstat(out) if out else None
    if not judge:
        return
    accept_input(snapshot, "ib", rc, out, err or ("%s does not exist and ibstat failed" % root), parsed)


def _read_file_source(path, max_bytes=DEFAULT_INPUT_MAX_BYTES):
    try:
        return 0, _read_text(path, max_bytes), ""
    except (IOError, OSError) as error:
        return RC_UNREADABLE, "", str(error)


_SYSFS_DEVICE_FILES = ("fw_ver", "hca_type", "board_id", "node_guid")


def _copy_sysfs(src, dst):
    """Copy what the checks read of a /sys/class/infiniband tree (device ids, port state, counters).

    An empty tree (no HCA) is copied as an empty directory: without it the replay reads ``ibstat.txt`` instead, and a
    node that has no port judges differently live (``IB-PORT-COUNT``) and from its bundle (``CHECK-INPUT-FAILED``).
    """
    if not os.path.isdir(dst):
        os.makedirs(dst)
    for dirpath, dirnames, filenames in os.walk(src, followlinks=True):
        rel = os.path.relpath(dirpath, src)
        depth = 0 if rel == "." else rel.count(os.sep) + 1
        keep_files = []
        if depth == 1:          # <device>/
            dirnames[:] = [d for d in dirnames if d == "ports"]
            keep_files = [f for f in filenames if f in _SYSFS_DEVICE_FILES]
        elif depth == 2:        # <device>/ports/
            dirnames[:] = [d for d in dirnames if d.isdigit()]
        elif depth == 3:        # <device>/ports/<n>/
            dirnames[:] = [d for d in dirnames if d in ("counters", "hw_counters")]
            keep_files = filenames
        elif depth == 4:        # counters/ and hw_counters/
            dirnames[:] = []
            keep_files = filenames
        for filename in keep_files:
            try:
                content = _read_text(os.path.join(dirpath, filename))
            except (IOError, OSError):
                continue
            _write(os.path.join(dst, rel, filename), content)


def _write_bundle_file(directory, filename, out, rc, err):
    path = os.path.join(directory, filename)
    if out or rc == 0:
        _write(path, out)   # an empty output is written too: the replay must see it, not a missing input
    if rc != 0:
        _write(path + ".rc", "%d\n" % rc)
        _write(path + ".stderr", err)


def _write(path, text):
    parent = os.path.dirname(path)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent)
    with open(path, "w") as handle:
        handle.write(text)


def _iso(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


# --------------------------------------------------------------------------------------------------------------
# Counter state between runs (rising NVLink and IB counters)
# --------------------------------------------------------------------------------------------------------------

def counters_of(snapshot):
    """The counters the next run compares against, with the time they were read."""
    state = {"saved_at": snapshot.get("now") or time.time(), "nvlink_errors": {}, "ib_counters": {}}
    for gpu in (snapshot.get("nvlink_errors") or {}).get("gpus") or []:
        for link in gpu.get("links") or []:
            state["nvlink_errors"]["gpu%s/link%s" % (gpu.get("index"), link.get("link"))] = dict(
                link.get("counters") or {})
    for device in (snapshot.get("ib") or {}).get("devices") or []:
        for port in device.get("ports") or []:
            counters = port.get("counters") or {}
            if counters:
                state["ib_counters"]["%s/%s" % (device.get("name"), port.get("port"))] = {
                    k: counters.get(k) for k in ("link_downed", "symbol_error", "link_error_recovery")}
    return state


def load_state(path, max_age_s=None, now=None):
    """Counters of the previous run, or {} when there is none, it cannot be read, or it is not current: saved more
    than ``max_age_s`` ago, in the future, or without a time. Returns (state, note or None)."""
    data, why = read_bounded(path, 16 * 1024 * 1024)
    if data is None:
        return {}, (None if not os.path.lexists(path) else "%s %s" % (path, why))
    try:
        state = json.loads(data.decode("utf-8", "replace"))
    except ValueError as error:
        return {}, "%s is not JSON (%s)" % (path, error)
    if not isinstance(state, dict):
        return {}, "%s does not hold a mapping" % path
    if max_age_s is None:
        return state, None
    now = time.time() if now is None else now
    saved = state.get("saved_at")
    if isinstance(saved, bool) or not isinstance(saved, (int, float)):
        return {}, "%s has no saved_at time: its counters are not compared with" % path
    if not math.isfinite(saved) or saved > now + 300 or now - saved > max_age_s:
        return {}, "%s was saved at %s, not within %d s of now (%s): its counters are not compared with" % (
            path, _iso(saved) if math.isfinite(saved) and 0 <= saved < 1e11 else repr(saved), max_age_s, _iso(now))
    return state, None


def save_state(path, snapshot):
    """Write the counters atomically (the file is read by the next run, maybe concurrently)."""
    parent = os.path.dirname(path)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent, 0o755)
    tmp = "%s.%d.tmp" % (path, os.getpid())
    with open(tmp, "w") as handle:
        json.dump(counters_of(snapshot), handle)
    os.rename(tmp, path)


# --------------------------------------------------------------------------------------------------------------
# The whole run and its renderings
# --------------------------------------------------------------------------------------------------------------

def evaluate(snapshot, config, level, source):
    """Run the checks on a snapshot and build the result document."""
    snapshot.setdefault("xid_catalog", xid_catalog() if snapshot.get("kernel") else {})
    findings = checks.run_checks(snapshot, config, level)
    unreadable = []
    for name in ("nvsmi", "nvlink", "nvlink_errors", "ib", "kernel", "dcgm", "nccl"):
        data = snapshot.get(name)
        if isinstance(data, dict):
            unreadable.extend({"input": name, "detail": note} for note in data.get("unreadable") or [])
    for name, failure in sorted((snapshot.get("failures") or {}).items()):
        unreadable.append({"input": name, "detail": "rc %s: %s" % (failure.get("rc"),
                                                                   checks.first_line(failure.get("stderr")))})
    gpus = [{key: g.get(key) for key in ("index", "minor_number", "bus_id", "uuid", "name", "serial", "vbios_version")}
            for g in ((snapshot.get("nvsmi") or {}).get("gpus") or [])]
    return {
        "status": checks.worst(findings),
        "exit_code": checks.exit_code(findings),
        "node": config.get("node"),
        "level": level,
        "source": source,
        "checked_at": _iso(snapshot.get("now") or time.time()),
        "driver_version": (snapshot.get("nvsmi") or {}).get("driver_version"),
        "gpus": gpus,
        "findings": findings,
        "unreadable": unreadable,
        "missing_inputs": snapshot.get("missing") or [],
        "notes": snapshot.get("notes") or [],
    }


def render_human(result):
    """A short summary for people at a shell."""
    lines = ["%s: %s (%s check, %d GPU(s)%s, %s)" % (
        result["node"], result["status"].upper(), result["level"], len(result["gpus"]),
        ", driver %s" % result["driver_version"] if result.get("driver_version") else "", result["source"])]
    for item in result["findings"]:
        lines.append("  %-7s %-32s %-16s %s" % (item["severity"], item["code"], item["target"], item["message"]))
        if item.get("action"):
            lines.append("          -> %s" % item["action"])
    if result.get("missing_inputs"):
        lines.append("  (bundle has no %s)" % ", ".join(result["missing_inputs"]))
    return "\n".join(lines) + "\n"


_STATUS_VALUE = {"ok": 0, "info": 0, "warning": 1, "error": 2, "unknown": 3}


def _label(value):
    return str(value).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def render_prometheus(result, duration_s=None):
    """Prometheus text format for node_exporter's textfile collector."""
    node = _label(result["node"])
    out = [
        "# HELP gpucluster_health_status Worst finding of the last health check: 0 ok, 1 warning, 2 error, 3 unknown.",
        "# TYPE gpucluster_health_status gauge",
        'gpucluster_health_status{node="%s",level="%s"} %d' % (node, result["level"], _STATUS_VALUE[result["status"]]),
        "# HELP gpucluster_health_last_run_timestamp_seconds When the last health check ran.",
        "# TYPE gpucluster_health_last_run_timestamp_seconds gauge",
        'gpucluster_health_last_run_timestamp_seconds{node="%s",level="%s"} %d' % (node, result["level"], int(time.time())),
        "# HELP gpucluster_health_gpus GPUs the health check saw.",
        "# TYPE gpucluster_health_gpus gauge",
        'gpucluster_health_gpus{node="%s"} %d' % (node, len(result["gpus"])),
        "# HELP gpucluster_health_finding A finding of the last health check (1 while it holds).",
        "# TYPE gpucluster_health_finding gauge",
    ]
    for item in result["findings"]:
        out.append('gpucluster_health_finding{node="%s",code="%s",severity="%s",target="%s"} 1' % (
            node, _label(item["code"]), item["severity"], _label(item["target"])))
    out.append("# HELP gpucluster_health_unreadable_inputs Parts of tool output the checker could not read.")
    out.append("# TYPE gpucluster_health_unreadable_inputs gauge")
    out.append('gpucluster_health_unreadable_inputs{node="%s"} %d' % (node, len(result["unreadable"])))
    if duration_s is not None:
        out.append("# HELP gpucluster_health_duration_seconds How long the last health check took.")
        out.append("# TYPE gpucluster_health_duration_seconds gauge")
        out.append('gpucluster_health_duration_seconds{node="%s",level="%s"} %.3f' % (node, result["level"],
                                                                                      duration_s))
    return "\n".join(out) + "\n"


def run(config, level=None, from_dir=None, collect_dir=None, runner=None, use_state=True, write_state=True):
    """Collect (or replay) and evaluate. Returns (result, runner). ``write_state=False`` reads the saved counters
    (``use_state``) but saves none: a note says what would have been saved (check mode)."""
    level = level or config.get("level") or "quick"
    if level not in checks.LEVELS:
        raise ValueError("level must be one of %s, not %r" % (", ".join(checks.LEVELS), level))
    runner = runner or Runner(max_bytes=_max_bytes(config))
    if from_dir:
        snapshot = replay(from_dir, config, level)
        source = "replay of %s" % from_dir
    else:
        if collect_dir and not os.path.isdir(collect_dir):
            os.makedirs(collect_dir)
        snapshot = collect(config, level, runner, collect_dir)
        source = "live"
    state_file = config.get("state_file")
    if use_state and state_file and not from_dir and level != "quick":
        snapshot["previous"], note = load_state(state_file, config.get("state_max_age_s"), snapshot.get("now"))
        if note:
            snapshot.setdefault("notes", []).append(note)
    result = evaluate(snapshot, config, level, source)
    damaged = sorted(n for n in ("nvlink_errors", "ib")
                     if n in snapshot["failures"] or (snapshot.get("partial") or {}).get(n))
    if use_state and state_file and not from_dir and level != "quick" and damaged:
        # a baseline is only replaced by a complete reading: the old one stays, with its own time
        result["notes"].append("counters not saved: %s failed or was read in part" % ", ".join(damaged))
    elif use_state and state_file and not from_dir and level != "quick" and not write_state:
        result["notes"].append("check mode: the counters would have been saved to %s" % state_file)
    elif use_state and state_file and not from_dir and level != "quick":
        try:
            save_state(state_file, snapshot)
        except (IOError, OSError) as error:
            result["unreadable"].append({"input": "state", "detail": "cannot save %s: %s" % (state_file, error)})
    result["tool_calls"] = runner.calls
    return result, runner
