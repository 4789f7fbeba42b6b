# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm values in one place: times and durations, TRES, and the names and counts sacctmgr takes.

Standard library only. Two directions, two sets of rules:

- **What a person writes** (inventory, module options, filter arguments) goes through ``parse_duration`` (seconds)
  or ``time_limit`` (a slurm.conf time limit). A duration carries its unit: units (``45s``, ``30m``, ``10min``,
  ``2h``, ``1d``, ``1h30m``) or Slurm's own time with ``:`` or ``-`` (``30:00`` is minutes:seconds, ``00:30:00``,
  ``1:30:00``, ``1-12``, ``2-00:00:00``). A bare number, ``30`` or ``"30"``, is refused everywhere: Slurm reads it as
  minutes, and a person may mean seconds. ``0`` alone is taken (it is zero in every unit). In a Slurm time with hours,
  minutes and seconds run from 0 to 59.
- **What Slurm prints** (``sacctmgr -n -P show``) goes through ``parse_time``, which follows Slurm's format: a bare
  number there is minutes, as Slurm's manual says. Minutes are read nowhere else. Keys written in Slurm's own syntax
  (``extra`` PartitionName keys, ``slurm_conf_extra``) are Slurm's and follow Slurm's rules (``is_slurm_time``).

``SpecError`` (a ``ValueError``) names where a wanted value came from and the value; ``SlurmOutputError`` says what
Slurm printed that cannot be read.
"""

from __future__ import absolute_import, division, print_function

import difflib
import re

from ansible_collections.gpucluster.ops.plugins.module_utils._hostlist import expand

__metaclass__ = type

PRIORITY_MAX = 4294967294            # Slurm's QOS priority is a uint32; 0xffffffff means "unset"
TRES_MAX = 2 ** 63 - 1
NAME_RE = re.compile(r"^[a-z0-9_][a-z0-9_.-]{0,63}$")
USER_RE = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}\$?$")
PARTITION_RE = re.compile(r"^[A-Za-z0-9_.-]{0,64}$")
TRES_RE = re.compile(r"^(cpu|mem|node|billing|energy|vmem|pages|fs/disk|gres/[a-z0-9_]+(?::[a-z0-9_.-]+)?|"
                     r"license/[A-Za-z0-9_.-]+|bb/[A-Za-z0-9_.-]+|ic/[A-Za-z0-9_.-]+)$")
TEXT_RE = re.compile(r"^[^|'\"\n\r\\]{0,200}$")
# Slurm's time format (man sbatch --time): minutes, minutes:seconds, hours:minutes:seconds, days-hours,
# days-hours:minutes, days-hours:minutes:seconds.
SLURM_TIME_RE = re.compile(r"^(?:(?P<days>[0-9]+)-)?(?P<a>[0-9]+)(?::(?P<b>[0-9]+))?(?::(?P<c>[0-9]+))?$")
UNLIMITED = ("UNLIMITED", "INFINITE")
_UNIT_RE = re.compile(r"^(?:(?P<d>[0-9]+)d)?(?:(?P<h>[0-9]+)h)?(?:(?P<m>[0-9]+)m(?:in)?)?(?:(?P<s>[0-9]+)s)?$")
_NUMBER_RE = re.compile(r"^\s*-?[0-9]+\s*$")
_FORMS = ("write a duration such as '30m', '2h' or '1h30m', or a Slurm time such as '00:30:00' or '2-00:00:00'")


class SpecError(ValueError):
    """A wanted value is invalid; the message names where it came from (object, option, variable) and the value."""


class SlurmOutputError(ValueError):
    """Slurm printed a value that cannot be read."""


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


# ---------------------------------------------------------------------------------------------------------------------
# Times and durations


def is_slurm_time(text):
    """Whether ``text`` is a time in Slurm's own syntax (a bare number included: Slurm reads minutes) or UNLIMITED."""
    return text.upper() in UNLIMITED or bool(SLURM_TIME_RE.match(text))


def _slurm_seconds(match):
    days = int(match.group("days") or 0)
    a, b, c = match.group("a"), match.group("b"), match.group("c")
    if match.group("days") is not None:          # days-hours[:minutes[:seconds]]
        hours, minutes, seconds = int(a), int(b or 0), int(c or 0)
    elif c is not None:                          # hours:minutes:seconds
        hours, minutes, seconds = int(a), int(b), int(c)
    elif b is not None:                          # minutes:seconds
        hours, minutes, seconds = 0, int(a), int(b)
    else:                                        # minutes (Slurm's output only)
        hours, minutes, seconds = 0, int(a), 0
    return ((days * 24 + hours) * 60 + minutes) * 60 + seconds


def parse_time(text):
    """Seconds from a duration Slurm printed (``00:00:20``, ``2-00:00:00``, ``7`` minutes; empty for unset: 0)."""
    text = (text or "").strip()
    if not text:
        return 0
    match = SLURM_TIME_RE.match(text)
    if not match:
        raise SlurmOutputError("cannot read the duration %r" % text)
    return _slurm_seconds(match)


def format_time(seconds):
    """Seconds as sacctmgr prints and takes them: ``00:00:20``, ``01:30:00``, ``2-00:00:00``."""
    days, rest = divmod(int(seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    text = "%02d:%02d:%02d" % (hours, minutes, secs)
    return "%d-%s" % (days, text) if days else text


def _bare_number(value, where):
    number = str(value).strip()
    if isinstance(value, str):
        said = "a number in a string is a bare number, and a bare number is ambiguous"
    else:
        said = "a bare number is ambiguous"
    return SpecError("%s is %r: %s (Slurm reads it as minutes, a person may mean seconds); write '%sm', '%ss' or a "
                     "Slurm time such as '00:30:00'" % (where, value, said, number, number))


def parse_duration(value, where):
    """Seconds from a duration a person wrote (see the module's rules); ``None`` stays ``None`` (unset).

    Raises ``SpecError`` naming ``where`` and the value: for a bare number (``0`` aside), a negative duration, minutes
    or seconds above 59 in a Slurm time with hours, and anything else that is not a duration.
    """
    if value is None:
        return None
    if _is_int(value) or (isinstance(value, str) and _NUMBER_RE.match(value)):
        number = int(value)
        if number == 0:
            return 0
        if number < 0:
            raise SpecError("%s is %r, which is not a Slurm time or a duration: a duration cannot be negative"
                            % (where, value))
        raise _bare_number(value, where)
    if not isinstance(value, str):
        raise SpecError("%s is %r, which is not a Slurm time or a duration: %s" % (where, value, _FORMS))
    text = value.strip().lower().replace(" ", "")
    if text.startswith("-"):
        raise SpecError("%s is %r, which is not a Slurm time or a duration: a duration cannot be negative"
                        % (where, value))
    units = _UNIT_RE.match(text)
    if text and units and any(units.groupdict().values()):
        parts = dict((k, int(v or 0)) for k, v in units.groupdict().items())
        return ((parts["d"] * 24 + parts["h"]) * 60 + parts["m"]) * 60 + parts["s"]
    match = SLURM_TIME_RE.match(text)
    if match and (":" in text or "-" in text):
        if (match.group("days") is not None or match.group("c") is not None) and (
                int(match.group("b") or 0) > 59 or int(match.group("c") or 0) > 59):
            raise SpecError("%s is %r: minutes and seconds run from 0 to 59" % (where, value))
        return _slurm_seconds(match)
    raise SpecError("%s is %r, which is not a Slurm time or a duration: %s" % (where, value, _FORMS))


def time_limit(value, where):
    """A time limit a person wrote, as slurm.conf takes it (``MaxTime``, ``DefaultTime``).

    ``UNLIMITED``/``INFINITE`` (any case) are upper-cased; a Slurm time with ``:`` or ``-`` is kept as written; units
    become whole minutes, Slurm's unit for these limits (``90m`` -> ``90``), and a part of a minute is refused; ``0``
    is ``0``. The rest is refused as ``parse_duration`` refuses it (a bare number first of all).
    """
    if isinstance(value, str) and value.strip().upper() in UNLIMITED:
        return value.strip().upper()
    seconds = parse_duration(value, where)
    if seconds is None:
        raise SpecError("%s is None, which is not a Slurm time or a duration: %s, or UNLIMITED" % (where, _FORMS))
    text = value.strip() if isinstance(value, str) else ""
    if ":" in text or "-" in text:
        return text
    if seconds % 60:
        raise SpecError("%s is %r: Slurm keeps this limit in whole minutes (it would round %d seconds up); write "
                        "minutes, such as '%dm'" % (where, value, seconds, seconds // 60 + 1))
    return str(seconds // 60)


# ---------------------------------------------------------------------------------------------------------------------
# TRES


def parse_tres(text):
    """``'gres/gpu:h100=0,gres/gpu=8'`` (as sacctmgr prints it) -> ``{'gres/gpu:h100': 0, 'gres/gpu': 8}``."""
    result = {}
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, _sep, value = item.rpartition("=")
        if not name:
            raise SlurmOutputError("cannot read TRES %r in %r" % (item, text))
        try:
            result[name] = int(value)
        except ValueError:
            raise SlurmOutputError("cannot read TRES count %r in %r" % (item, text))
    return result


# A field of a one-line scontrol record starts where a blank is followed by ``Name=`` (a value may hold blanks: a job's
# name, a comment).
_RECORD_SPLIT_RE = re.compile(r" (?=[A-Za-z][A-Za-z0-9_:/]*=)")


def record_fields(line):
    """One line of ``scontrol -o show job`` (``-d`` too) as ``{key: value}``; a key seen twice keeps its first value
    (the detail fields repeat ``Nodes=``...)."""
    fields = {}
    for part in _RECORD_SPLIT_RE.split((line or "").strip()):
        key, sep, value = part.partition("=")
        if sep:
            fields.setdefault(key, value)
    return fields


# A job's detail fields (``scontrol -o -d show job``), one group per node set: ``Nodes=gpu[01-02] CPU_IDs=0-3 Mem=0
# GRES=gpu:a100:2(IDX:0-1)``; in GRES= the GPU entries (other GRES, ``nic:1(IDX:0)``, have indexes of their own).
_NODE_GRES_RE = re.compile(r"(?:^| )Nodes=(?P<nodes>\S+) CPU_IDs=\S+ Mem=\S+ GRES=(?P<gres>\S*)")
_GPU_IDX_RE = re.compile(r"(?:^|\),|,)gpu(?=[:(])[^(,]*\(IDX:(?P<idx>[0-9,\-]*)\)")


def index_ranges(text):
    """``'0-1,4'`` -> 0, 1, 4 (odd parts are skipped)."""
    for part in (text or "").split(","):
        low, _sep, high = part.partition("-")
        if low.isdigit() and (not high or high.isdigit()):
            yield from range(int(low), int(high or low) + 1)


def job_gpu_indexes(line):
    """The GRES indexes of the GPUs a job holds on each node, from one line of ``scontrol -o -d show job``:
    ``{node: {index}}``. Slurm gives the indexes per node whatever the job asked
    (``--gpus``, ``--gpus-per-node``, ``--gpus-per-task``); a job without detail fields gives ``{}``."""
    gres = {}
    for match in _NODE_GRES_RE.finditer(line or ""):
        indexes = set()
        for idx in _GPU_IDX_RE.finditer(match.group("gres")):
            indexes |= set(index_ranges(idx.group("idx")))
        for node in expand(match.group("nodes")):
            gres.setdefault(node, set()).update(indexes)
    return gres


def format_tres(tres):
    """A TRES dict as sacctmgr takes it, sorted by name; ``None`` values (to clear) become ``-1``."""
    return ",".join("%s=%s" % (name, -1 if tres[name] is None else tres[name]) for name in sorted(tres))


def check_tres(value, where):
    """A wanted TRES mapping ``{name: count}``; ``None`` stays ``None`` (unset)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise SpecError("%s is %r: give a mapping of TRES name to count, for example {gres/gpu: 16}" % (where, value))
    result = {}
    for name, count in value.items():
        if not isinstance(name, str) or not TRES_RE.match(name):
            raise SpecError("%s has TRES %r, which is not a TRES name such as cpu, mem or gres/gpu:a100" % (where, name))
        result[name] = check_int(count, "%s[%s]" % (where, name))
    return result


# ---------------------------------------------------------------------------------------------------------------------
# Counts, text and names as sacctmgr takes them


def check_int(value, where, minimum=0, maximum=TRES_MAX):
    """A whole number from ``minimum`` to ``maximum`` (a decimal string too: templated values arrive as strings)."""
    if _is_int(value):
        number = value
    elif isinstance(value, str) and _NUMBER_RE.match(value):
        number = int(value)
    else:
        raise SpecError("%s is %r, which is not a whole number" % (where, value))
    if number < minimum or number > maximum:
        raise SpecError("%s is %r: it must be from %d to %d" % (where, value, minimum, maximum))
    return number


def check_text(value, where):
    """A description or organization: sacctmgr prints it in ``|``-separated output."""
    if not isinstance(value, str) or not TEXT_RE.match(value):
        raise SpecError("%s is %r: up to 200 characters without quotes, '|', '\\' or line breaks" % (where, value))
    return value


def did_you_mean(word, choices):
    """" (did you mean 'x'?)" with the closest of ``choices`` to a wrong ``word``, or "" when none is close."""
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    return " (did you mean '%s'?)" % close[0] if close else ""


def check_name(value, where, pattern=NAME_RE):
    """An account, QOS or user name."""
    if not isinstance(value, str) or not pattern.match(value):
        raise SpecError("%s is %r, which is not a valid name (lower-case letters, digits, '_', '.', '-')"
                        % (where, value))
    return value


def check_name_list(value, where):
    """A list of names (a comma string too), sorted; ``None`` stays ``None`` (unset)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = [v for v in value.split(",") if v]
    if not isinstance(value, (list, tuple)):
        raise SpecError("%s is %r, which is not a list of names" % (where, value))
    names = [check_name(v, where) for v in value]
    if len(set(names)) != len(names):
        raise SpecError("%s is %r: it names something twice" % (where, value))
    return sorted(names)
