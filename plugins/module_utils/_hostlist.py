# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slurm hostlists (``gpu[001-032,040]``): expand and fold them exactly as Slurm does.

Standard library only: the config checker runs on controllers without Ansible or python-hostlist.

Grammar (what ``hostlist_create()`` in Slurm accepts, made strict where Slurm is silently lenient):

- A hostlist is names separated by commas; a name is text with any number of bracket groups ``[r1,r2,...]`` where
  each ``r`` is ``N`` or ``N-M`` (decimal). ``rack[1-2]-gpu[01-02]`` expands outer group first, like Slurm.
- Text after the last bracket group is an error (Slurm 22.05 rejects ``unit[0-1]rack`` in a NodeName; Slurm 24.11,
  python-hostlist and ClusterShell accept it). ``allow_suffix=True`` accepts it, for checking 24.11-only configs.
- The width of the low bound fixes the zero padding of the whole range (``gpu[001-010]``); a high bound written
  with leading zeros but another width (``gpu[1-03]``) is rejected as ambiguous (Slurm quietly reads it as 1-3).
- Unclosed or nested brackets, empty ranges, backwards ranges (``gpu[05-01]``, which scontrol only prints to stderr
  while it exits 0), empty names (``a,,b``), whitespace and ranges of more than 65536 names are errors.

Folding follows Slurm's ``hostlist_ranged_string()``: a name's numeric suffix is its trailing digits, consecutive
numbers with a compatible zero padding join into one range, and consecutive ranges with the same prefix share one
bracket group. ``fold(names)`` sorts like ``scontrol show hostlistsorted`` (natural order of the prefixes, names
without digits first, then padding width, then number) after dropping duplicates; ``fold(names, sort=False)`` keeps
the given order like ``scontrol show hostlist``.
"""

from __future__ import absolute_import, division, print_function

import functools
import re

__metaclass__ = type

MAX_RANGE = 65536          # names in one bracket range: Slurm's MAX_RANGE
MAX_NAMES = 1000000        # names in one expansion: guards memory against "a[0-65535]b[0-65535]"
MAX_SUFFIX_DIGITS = 9      # longer numeric suffixes overflow Slurm's sort arithmetic

_DIGITS = "0123456789"
_TRAILING_DIGITS = re.compile(r"[0-9]+$")
_RANGE = re.compile(r"^([0-9]+)(?:-([0-9]+))?$")
_FORBIDDEN_IN_NAME = re.compile(r"[\s,\[\]]")


class HostlistError(ValueError):
    """A hostlist expression or a name that Slurm would reject or misread."""


# ---------------------------------------------------------------------------------------------------------------------
# Expansion


def _split_top_level(expr):
    """Split at commas outside brackets; brackets must balance and not nest."""
    items = []
    depth = 0
    start = 0
    for pos, char in enumerate(expr):
        if char == "[":
            if depth:
                raise HostlistError("nested '[' in %r" % expr)
            depth = 1
        elif char == "]":
            if not depth:
                raise HostlistError("']' without '[' in %r" % expr)
            depth = 0
        elif char == "," and not depth:
            items.append(expr[start:pos])
            start = pos + 1
    if depth:
        raise HostlistError("unclosed '[' in %r" % expr)
    items.append(expr[start:])
    return items


def _parse_range(text, item):
    """Return (low, high, width) for one bracket range such as ``001-010``."""
    match = _RANGE.match(text)
    if not match:
        what = "empty range" if text == "" else "bad range %r" % text
        raise HostlistError("%s in %r (ranges are N or N-M, decimal)" % (what, item))
    low_text, high_text = match.group(1), match.group(2)
    low = int(low_text)
    high = low if high_text is None else int(high_text)
    if high < low:
        raise HostlistError("range %r in %r runs backwards" % (text, item))
    if high_text is not None and high_text.startswith("0") and len(high_text) != len(low_text):
        raise HostlistError("ambiguous zero padding in range %r of %r: write both bounds with the same width" % (text, item))
    if high - low + 1 > MAX_RANGE:
        raise HostlistError("range %r in %r has more than %d names" % (text, item, MAX_RANGE))
    return low, high, len(low_text)


def _parse_item(item, allow_suffix=False):
    """Return the list of parts of one name expression: strings and lists of (low, high, width)."""
    if item == "":
        raise HostlistError("empty name in hostlist")
    if re.search(r"\s", item):
        raise HostlistError("whitespace in %r" % item)
    parts = []
    rest = item
    while "[" in rest:
        text, _sep, rest = rest.partition("[")
        inner, _sep, rest = rest.partition("]")
        parts.append(text)
        parts.append([_parse_range(r, item) for r in inner.split(",")])
    if rest and parts and not allow_suffix:
        raise HostlistError("text %r after the last bracket range in %r (Slurm 22.05 rejects it)" % (rest, item))
    parts.append(rest)
    return parts


def _expand_item(item, allow_suffix):
    names = [""]
    for part in _parse_item(item, allow_suffix):
        if isinstance(part, str):
            names = [name + part for name in names]
            continue
        numbers = ["%0*d" % (width, num) for low, high, width in part for num in range(low, high + 1)]
        if len(names) * len(numbers) > MAX_NAMES:
            raise HostlistError("%r expands to more than %d names" % (item, MAX_NAMES))
        names = [name + number for name in names for number in numbers]
    return names


def expand(expr, allow_suffix=False):
    """Return the names of a hostlist expression, in Slurm's order, duplicates kept (``scontrol show hostnames``).

    An empty expression has no names. Raises HostlistError naming the offending text.
    """
    if not isinstance(expr, str):
        raise HostlistError("a hostlist must be a string, got %r" % (expr,))
    if expr == "":
        return []
    names = []
    for item in _split_top_level(expr):
        names.extend(_expand_item(item, allow_suffix))
        if len(names) > MAX_NAMES:
            raise HostlistError("%r expands to more than %d names" % (expr, MAX_NAMES))
    return names


def check(expr, allow_suffix=False):
    """Return None when ``expr`` is a valid hostlist, else the reason (never raises)."""
    try:
        expand(expr, allow_suffix)
    except HostlistError as exc:
        return str(exc)
    return None


# ---------------------------------------------------------------------------------------------------------------------
# Folding


def _pad(num, width):
    """Zeros needed to print ``num`` in ``width`` characters (Slurm's _zero_padded)."""
    return max(0, width - len(str(num)))


def _widths_equivalent(first, second):
    """Slurm's _width_equiv on two ranges: adjust one width and return True when both print unchanged."""
    if first[3] == second[3]:
        return True
    first_pad_own, first_pad_other = _pad(first[1], first[3]), _pad(first[1], second[3])
    second_pad_own, second_pad_other = _pad(second[1], second[3]), _pad(second[1], first[3])
    if first_pad_own != first_pad_other and second_pad_own != second_pad_other:
        return False
    if first_pad_own != first_pad_other:
        second[3] = first[3]
    else:
        first[3] = second[3]
    return True


def _new_range(name):
    """A one-name range ``[prefix, low, high, width, single]`` (single: the name has no numeric suffix)."""
    if not name or _FORBIDDEN_IN_NAME.search(name):
        raise HostlistError("%r is not a valid node name (empty, or has whitespace, ',' or brackets)" % (name,))
    try:
        name.encode("ascii")
    except UnicodeEncodeError:
        raise HostlistError("%r is not a valid node name (not ASCII)" % (name,))
    match = _TRAILING_DIGITS.search(name)
    if not match:
        return [name, 0, 0, 0, True]
    digits = match.group()
    if len(digits) > MAX_SUFFIX_DIGITS:
        raise HostlistError("%r has a numeric suffix longer than %d digits" % (name, MAX_SUFFIX_DIGITS))
    return [name[:match.start()], int(digits), int(digits), len(digits), False]


def _push(ranges, new):
    """Slurm's hostlist_push_range: extend the last range when ``new`` continues it, else append."""
    if ranges:
        tail = ranges[-1]
        if (not tail[4] and not new[4] and tail[0] == new[0] and tail[2] == new[1] - 1
                and _widths_equivalent(tail, new)):
            tail[2] = new[2]
            return
    ranges.append(new)


def _natcmp_digits_right(a, i, b, j):
    """strnatcmp's compare_right: the longer digit run wins, else the first differing digit."""
    bias = 0
    while True:
        a_digit = i < len(a) and a[i] in _DIGITS
        b_digit = j < len(b) and b[j] in _DIGITS
        if not a_digit and not b_digit:
            return bias
        if not a_digit:
            return -1
        if not b_digit:
            return 1
        if not bias and a[i] != b[j]:
            bias = -1 if a[i] < b[j] else 1
        i += 1
        j += 1


def _natcmp_digits_left(a, i, b, j):
    """strnatcmp's compare_left (runs with a leading zero): the first differing digit wins."""
    while True:
        a_digit = i < len(a) and a[i] in _DIGITS
        b_digit = j < len(b) and b[j] in _DIGITS
        if not a_digit and not b_digit:
            return 0
        if not a_digit:
            return -1
        if not b_digit:
            return 1
        if a[i] != b[j]:
            return -1 if a[i] < b[j] else 1
        i += 1
        j += 1


def natcmp(a, b):
    """Slurm's strnatcmp (natural order) for strings without whitespace: negative, zero or positive."""
    i = j = 0
    while True:
        char_a = a[i] if i < len(a) else ""
        char_b = b[j] if j < len(b) else ""
        if char_a and char_b and char_a in _DIGITS and char_b in _DIGITS:
            compare = _natcmp_digits_left if "0" in (char_a, char_b) else _natcmp_digits_right
            result = compare(a, i, b, j)
            if result:
                return result
        if not char_a and not char_b:
            return 0
        if char_a != char_b:
            return -1 if char_a < char_b else 1
        i += 1
        j += 1


def _sorted_ranges(names):
    """Unique names as one-name ranges in Slurm's hostlist_sort order.

    Slurm compares prefixes with strnatcmp, puts names without digits first, then orders by number when the widths
    are compatible and by width otherwise. For parsed names that is the key (prefix, width, number): a number
    without leading zeros has as many digits as its width, so the width orders it against padded numbers.
    """
    ranges = [_new_range(name) for name in _unique(names)]
    prefixes = sorted({r[0] for r in ranges}, key=functools.cmp_to_key(natcmp))
    rank = dict((prefix, index) for index, prefix in enumerate(prefixes))
    ranges.sort(key=lambda r: (rank[r[0]], not r[4], r[3], r[1]))
    return ranges


def _unique(names):
    seen = set()
    result = []
    for name in names:
        if name not in seen:
            seen.add(name)
            result.append(name)
    return result


def _same_bracket(first, second):
    """Slurm's hostrange_within_range: same prefix and both have a numeric suffix."""
    return first[0] == second[0] and not first[4] and not second[4]


def _range_text(rng):
    low = "%0*d" % (rng[3], rng[1])
    return low if rng[1] == rng[2] else "%s-%0*d" % (low, rng[3], rng[2])


def _render(ranges):
    """Slurm's hostlist_ranged_string for a list of ranges."""
    out = []
    index = 0
    while index < len(ranges):
        first = ranges[index]
        if first[4]:
            out.append(first[0])
            index += 1
            continue
        group = [first]
        index += 1
        while index < len(ranges) and _same_bracket(ranges[index], group[-1]):
            group.append(ranges[index])
            index += 1
        body = ",".join(_range_text(r) for r in group)
        if len(group) > 1 or first[1] != first[2]:
            body = "[%s]" % body
        out.append(first[0] + body)
    return ",".join(out)


def fold(names, sort=True):
    """Return the hostlist expression Slurm prints for ``names`` (duplicates dropped, first one kept).

    With sort=True the result equals ``scontrol show hostlistsorted``; with sort=False it keeps the order of
    ``names`` and equals ``scontrol show hostlist``. Raises HostlistError for a name that cannot be a node name.
    """
    if isinstance(names, str):
        names = [names]
    names = [str(name) for name in names]
    ranges = []
    singles = _sorted_ranges(names) if sort else [_new_range(name) for name in _unique(names)]
    for single in singles:
        _push(ranges, single)
    return _render(ranges)


def sorted_names(names):
    """Unique names in the order ``fold`` uses (Slurm's sorted hostlist order)."""
    return [r[0] if r[4] else "%s%0*d" % (r[0], r[3], r[1]) for r in _sorted_ranges([str(n) for n in names])]
