#!/usr/bin/env python
# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Check the links of README.md, docs/*.md and roles/*/README.md: relative links and #anchors must resolve.

A link is `[text](target)` or `![alt](target)` outside code spans and fenced code blocks. A relative target must be a
file or directory of the checkout (relative to the Markdown file); `#anchor` (alone or after a Markdown file) must be
one of the target file's headings, slugged as GitHub does. External links (http, https, mailto) are only recognised,
never fetched: the check sends nothing off the machine.

  scripts/check-links.py            the checkout's files; exit 1 with one line per broken link
  scripts/check-links.py FILE...    only these files
"""

import argparse
import glob
import os
import re
import sys
from urllib.parse import unquote

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
LINK = re.compile(r"!?\[(?P<text>(?:[^\[\]]|\[[^\[\]]*\])*)\]\((?P<target>[^()\s]*(?:\([^()\s]*\)[^()\s]*)*)"
                  r"(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def default_files(root=ROOT):
    files = [os.path.join(root, "README.md")]
    files += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    files += sorted(glob.glob(os.path.join(root, "roles", "*", "README.md")))
    return [f for f in files if os.path.isfile(f)]


def prose_lines(text):
    """(line number, line) outside fenced code blocks, with inline code spans blanked out."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, re.sub(r"(`+)(.+?)\1", lambda m: " " * len(m.group(0)), line)


def links(text):
    """(line number, link text, target) of every link of a Markdown text."""
    for number, line in prose_lines(text):
        for match in LINK.finditer(line):
            yield number, match.group("text"), match.group("target")


def slug(heading):
    """GitHub's anchor of a heading: markup dropped, lower case, punctuation removed, spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"<[^>]+>", "", text).replace("`", "")
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(text):
    """Every anchor the headings of a Markdown text give, duplicates numbered as GitHub numbers them."""
    seen = {}
    result = set()
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def check_file(path, root=ROOT):
    """Messages for the broken links of one Markdown file."""
    problems = []
    text = _read(path)
    where = os.path.relpath(path, root)
    for number, _text, target in links(text):
        if not target or EXTERNAL.match(target):
            continue
        file_part, _sep, anchor = target.partition("#")
        if file_part:
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), unquote(file_part)))
            if not os.path.exists(resolved):
                problems.append(f"{where}:{number}: {target}: no such file or directory")
                continue
            inside = os.path.relpath(resolved, root)
            if inside.startswith(".."):
                problems.append(f"{where}:{number}: {target}: outside the checkout")
                continue
        else:
            resolved = path
        if anchor:
            if not resolved.endswith(".md") or not os.path.isfile(resolved):
                problems.append(f"{where}:{number}: {target}: an anchor into a file that is not Markdown")
            elif unquote(anchor).lower() not in anchors(_read(resolved)):
                problems.append(f"{where}:{number}: {target}: no heading gives the anchor #{anchor}")
    return problems


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="Markdown files (default: README.md, docs/*.md, roles/*/README.md)")
    args = parser.parse_args(argv)
    files = [os.path.abspath(f) for f in args.files] or default_files()
    problems = []
    count = 0
    for path in files:
        problems += check_file(path)
        count += sum(1 for _link in links(_read(path)))
    for problem in problems:
        print(problem, file=sys.stderr)
    if not problems:
        print(f"links: {count} links in {len(files)} Markdown files resolve (external ones not fetched)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
