# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Read Slurm configuration files the way Slurm's parser (src/common/parse_config.c) reads them.

Standard library only; never raises on file content.

- A ``#`` preceded by an even number of backslashes starts a comment.
- After the comment is cut, a line that ends in an odd number of backslashes (trailing blanks allowed after them)
  continues on the next line; the last backslash is removed.
- Then every backslash is removed and the character after it kept (``\\#`` is ``#``, ``\\\\`` is ``\\``).
- ``Include FILE`` at the very start of a line reads FILE in place (relative to the including file's directory;
  ``%c`` is the ClusterName in lower case).
- Otherwise a line is ``Key=Value`` pairs: the key is ``[A-Za-z0-9_.]+``, blanks may surround ``=``, and the value is
  ``"quoted text"`` or a run of non-blank characters. A line whose first key is a line key (NodeName=,
  PartitionName=, SwitchName=, Name=, ...) takes more pairs; any other line takes exactly one pair. Text left over
  is a parse error, as in Slurm.
"""

from __future__ import absolute_import, division, print_function

import os
import re

__metaclass__ = type

MAX_INCLUDE_DEPTH = 16
MAX_FILE_BYTES = 16 * 1024 * 1024

_PAIR = re.compile(r'^\s*([A-Za-z0-9_.]+)\s*([-*+/]?)=\s*(?:"([^"]*)"|(\S+))(?=\s|$)')
_INCLUDE = re.compile(r"^include\s", re.IGNORECASE)


class Statement(object):
    """One logical line: where it starts, its first pair, and the pairs that follow it on the line."""

    __slots__ = ("file", "line", "key", "value", "pairs", "text")

    def __init__(self, file, line, key, value, pairs, text):
        self.file = file
        self.line = line
        self.key = key
        self.value = value
        self.pairs = pairs          # [(key, value, op)] after the first pair (line keys only)
        self.text = text

    def get(self, key, default=None):
        """Value of ``key`` among the pairs after the first one (case-insensitive), last one wins."""
        found = default
        lower = key.lower()
        for pair_key, pair_value, _op in self.pairs:
            if pair_key.lower() == lower:
                found = pair_value
        return found

    def __repr__(self):
        return "Statement(%s:%d %s=%s %r)" % (self.file, self.line, self.key, self.value, self.pairs)


def problem(file, line, key, message, severity="error"):
    """A problem record, as every check returns it."""
    return {"file": file, "line": line, "key": key, "message": message, "severity": severity}


def _strip_comment(line):
    backslashes = 0
    for pos, char in enumerate(line):
        if char == "#" and backslashes % 2 == 0:
            return line[:pos]
        backslashes = backslashes + 1 if char == "\\" else 0
    return line


def _continuation_cut(line):
    """Return the line without its continuation backslash, or None when the line does not continue."""
    end = len(line.rstrip())
    stripped = line[:end]
    count = len(stripped) - len(stripped.rstrip("\\"))
    if count % 2 == 1:
        return stripped[:-1]
    return None


def _strip_escapes(line):
    return re.sub(r"\\(.?)", r"\1", line, flags=re.DOTALL)


def logical_lines(text):
    """Yield (first physical line number, logical line) the way Slurm's _get_next_line joins and unescapes them."""
    physical = text.split("\n")
    if physical and physical[-1] == "":
        physical.pop()
    buffer = ""
    start = None
    for number, raw in enumerate(physical, 1):
        if start is None:
            start = number
        line = _strip_comment(raw.rstrip("\r"))
        cut = _continuation_cut(line)
        if cut is not None:
            buffer += cut
            continue
        yield start, _strip_escapes(buffer + line)
        buffer = ""
        start = None
    if start is not None:
        yield start, _strip_escapes(buffer)


def match_pair(text):
    """Match one ``Key=Value`` at the start of text: (key, value, operator, rest of the text) or None."""
    match = _PAIR.match(text)
    if not match:
        return None
    value = match.group(3) if match.group(3) is not None else match.group(4)
    return match.group(1), value, match.group(2) or "", text[match.end():]


def parse_pairs(text):
    """Parse ``Key=Value`` pairs from the start of text: return ([(key, value, op)], leftover text)."""
    pairs = []
    while True:
        found = match_pair(text)
        if found is None:
            return pairs, text
        pairs.append(found[:3])
        text = found[3]


def read_text(path):
    """Return (text, error): the file decoded as UTF-8 (bad bytes replaced); text is None when unreadable."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except (IOError, OSError) as exc:
        return None, "cannot read: %s" % (exc.strerror or exc)
    if len(data) > MAX_FILE_BYTES:
        return None, "larger than %d bytes" % MAX_FILE_BYTES
    return data.decode("utf-8", "replace"), None


class ConfigReader(object):
    """Read one Slurm config file, following Include lines inside the config directory.

    ``line_keys`` are the lower-case keys that take more pairs on their line. Problems of reading and syntax go to
    ``problems``; ``statements`` are the parsed lines in order.
    """

    def __init__(self, directory, line_keys):
        self.directory = os.path.realpath(directory)
        self.line_keys = line_keys
        self.statements = []
        self.problems = []
        self.cluster_name = None

    def read(self, name):
        """Read ``name`` (relative to the directory). Return False when the file does not exist."""
        path = os.path.join(self.directory, name)
        if not os.path.exists(path):
            return False
        self._read_file(path, name, 0, ())
        return True

    def _relative(self, path):
        return os.path.relpath(path, self.directory)

    def _read_file(self, path, shown, depth, chain):
        text, error = read_text(path)
        if text is None:
            self.problems.append(problem(shown, 0, "", error))
            return
        if "\0" in text:
            self.problems.append(problem(shown, 0, "", "contains NUL bytes; Slurm ignores the rest of those lines"))
            text = "\n".join(line.split("\0", 1)[0] for line in text.split("\n"))
        for number, line in logical_lines(text):
            if _INCLUDE.match(line):
                self._include(line, shown, number, path, depth, chain + (os.path.realpath(path),))
            elif line != "":
                self._statement(line, shown, number)

    def _include(self, line, shown, number, path, depth, chain):
        parts = line.split(None, 2)
        target = parts[1] if len(parts) > 1 else ""
        if len(parts) > 2 and parts[2].strip():
            self.problems.append(problem(shown, number, "Include", "text after the file name: %r" % parts[2].strip()))
        if "%c" in target:
            if not self.cluster_name:
                self.problems.append(problem(shown, number, "Include", "%%c in %r needs a ClusterName before it" % target))
                return
            target = target.replace("%c", self.cluster_name.lower())
        full = os.path.realpath(os.path.join(os.path.dirname(path), target))
        if not (full == self.directory or full.startswith(self.directory + os.sep)):
            self.problems.append(problem(shown, number, "Include", "%r is outside the config directory; not checked" % target))
            return
        if not os.path.isfile(full):
            self.problems.append(problem(shown, number, "Include", "%r does not exist (Slurm retries for 60 s, then fails)" % target))
            return
        if full in chain or depth >= MAX_INCLUDE_DEPTH:
            self.problems.append(problem(shown, number, "Include", "%r includes itself" % target))
            return
        self._read_file(full, self._relative(full), depth + 1, chain)

    def _statement(self, line, shown, number):
        first = match_pair(line)
        if first is None:
            if line.strip():
                self.problems.append(problem(shown, number, "", "not a Key=Value line: %r" % line.strip()[:80]))
            return
        key, value, _op, rest = first
        more = []
        if key.lower() in self.line_keys:
            more, rest = parse_pairs(rest)
        if rest.strip():
            self.problems.append(problem(shown, number, key, "text Slurm cannot parse: %r" % rest.strip()[:80]))
        if key.lower() == "clustername":
            self.cluster_name = value
        self.statements.append(Statement(shown, number, key, value, more, line))
