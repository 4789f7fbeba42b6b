# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

"""fleet.html: the fleet report (``_fleet.build``'s document) as one self-contained page.

Inline CSS and script only (no external script, font or image, so the page opens from a mail attachment or an
air-gapped share). A grid of nodes by GPUs coloured by each cell's worst severity, a filter box (text, "hide OK
nodes"), each node's findings with their actions, the drift table, the RMA list, the changes since the previous
report, and the sweep's time and options. "Hide OK" never hides a node out of service in Slurm (status ``drained``,
``data-in-service="0"``). The filter state lives in the URL hash (``#filter=gpu0&hideok=1``) and in
the body's ``data-filter``/``data-hideok`` attributes; each filtered element carries ``data-shown``; ``data-ready`` is
set when the script has run and ``data-js-error`` when it failed (tests read them). Without the script the page shows
everything.
"""

from __future__ import annotations

import html
import json

from ansible_collections.gpucluster.ops.plugins.module_utils import _fleet

SEVERITY_LABEL = {"ok": "OK", "info": "info", "warning": "warning", "error": "error", "unknown": "unknown",
                  _fleet.DRAINED: "drained"}
# What a GPU cell shows besides its colour, for readers who do not tell the colours apart.
MARK = {"ok": "", "info": "i", "warning": "W", "error": "E", "unknown": "?"}

_CSS = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:1em 2em;color:#1b1b1b;background:#fff}
h1{font-size:1.4em;margin:.2em 0}h2{font-size:1.15em;margin:1.2em 0 .4em;border-bottom:1px solid #ccc}
table{border-collapse:collapse}td,th{padding:2px 6px;border:1px solid #ddd;text-align:left;vertical-align:top}
th{background:#f3f3f3}.meta td,.meta th{border:0;padding:0 8px 0 0}
.grid td.g{width:22px;min-width:22px;padding:0;text-align:center;font-size:11px}
.grid td.h{white-space:nowrap;font-family:ui-monospace,monospace}
.s-ok{background:#2e9b4f;color:#fff}.s-info{background:#7fb8e6}.s-warning{background:#f2b632}
.s-error{background:#d62f2f;color:#fff}.s-unknown{background:#8a63b8;color:#fff}.s-none{background:#eee}
.s-drained{background:repeating-linear-gradient(45deg,#5d6d7e 0 6px,#46535f 6px 12px);color:#fff}
.badge{display:inline-block;padding:0 6px;border-radius:3px;font-size:12px}
.counts span{margin-right:1em}.filter{position:sticky;top:0;background:#fff;padding:.4em 0;border-bottom:1px solid #ccc}
.filter input[type=text]{width:22em}[data-shown="0"]{display:none}
.node{margin:.6em 0}.node h3{font-size:1em;margin:.2em 0}.mono{font-family:ui-monospace,monospace}
.legend span{margin-right:.6em}
"""

# The page's script: reads and writes the filter state in the URL hash, shows/hides rows and node sections.
_JS = r"""
(function () {
  var body = document.body;
  window.addEventListener('error', function (e) { body.setAttribute('data-js-error', String(e.message)); });
  var text = document.getElementById('filter-text'), hide = document.getElementById('filter-hideok');
  function readHash() {
    var state = {filter: '', hideok: false}, hash = window.location.hash.replace(/^#/, '');
    if (hash.indexOf('=') < 0) { return null; }
    hash.split('&').forEach(function (part) {
      var pair = part.split('='), value = decodeURIComponent((pair[1] || '').replace(/\+/g, ' '));
      if (pair[0] === 'filter') { state.filter = value; }
      if (pair[0] === 'hideok') { state.hideok = value === '1'; }
    });
    return state;
  }
  function apply(state) {
    var needle = state.filter.trim().toLowerCase(), shown = 0;
    body.setAttribute('data-filter', needle);
    body.setAttribute('data-hideok', state.hideok ? '1' : '0');
    var items = document.querySelectorAll('[data-search]');
    for (var i = 0; i < items.length; i++) {
      var el = items[i];
      var ok = el.getAttribute('data-status') === 'ok' && el.getAttribute('data-in-service') !== '0';
      var show = !(state.hideok && ok) && (!needle || el.getAttribute('data-search').indexOf(needle) >= 0);
      el.setAttribute('data-shown', show ? '1' : '0');
      if (show && el.tagName === 'TR') { shown++; }
    }
    document.getElementById('filter-count').textContent = shown + ' node(s) shown';
  }
  function fromInputs() {
    var state = {filter: text.value, hideok: hide.checked};
    var hash = 'filter=' + encodeURIComponent(state.filter) + (state.hideok ? '&hideok=1' : '');
    if (window.history && window.history.replaceState) { window.history.replaceState(null, '', '#' + hash); }
    apply(state);
  }
  function fromHash() {
    var state = readHash();
    if (state) { text.value = state.filter; hide.checked = state.hideok; }
    apply(state || {filter: text.value, hideok: hide.checked});
  }
  text.addEventListener('input', fromInputs);
  hide.addEventListener('change', fromInputs);
  window.addEventListener('hashchange', fromHash);
  fromHash();
  body.setAttribute('data-ready', '1');
})();
"""


def _e(value):
    return html.escape("" if value is None else str(value), quote=True)


def _badge(severity):
    return '<span class="badge s-%s">%s</span>' % (_e(severity), _e(SEVERITY_LABEL.get(severity, severity)))


def _search(entry):
    parts = [entry["host"], entry["group"] or "", entry["status"], (entry.get("slurm") or {}).get("state") or ""]
    parts += [f["code"] for f in entry["findings"]] + [g["serial"] or "" for g in entry["gpus"]]
    return " ".join(p for p in parts if p).lower()


def _gpu_title(entry, gpu):
    codes = [f["code"] for f in entry["findings"] if gpu["index"] in _fleet.gpu_indexes(f, entry["gpus"])]
    return "%s gpu%s %s\nserial %s, uuid %s, bus %s, VBIOS %s%s" % (
        entry["host"], gpu["index"], gpu["name"] or "", gpu["serial"] or "?", gpu["uuid"] or "?", gpu["bus_id"] or "?",
        gpu["vbios_version"] or "?", ("\n" + " ".join(codes)) if codes else "")


def _grid(report, order):
    width = max([len(e["gpus"]) for e in report["nodes"].values()] + [1])
    head = "".join('<th class="g">%d</th>' % n for n in range(width))
    rows = []
    for entry in order:
        by_index = {g["index"]: g for g in entry["gpus"]}
        cells = []
        for n in range(width):
            gpu = by_index.get(n)
            if gpu is None:
                cells.append('<td class="g s-none" title="no GPU %d"></td>' % n)
            else:
                cells.append('<td class="g s-%s" data-gpu="%d" title="%s">%s</td>' % (
                    _e(gpu["status"]), n, _e(_gpu_title(entry, gpu)), MARK[gpu["status"]]))
        slurm = entry.get("slurm") or {}
        rows.append('<tr data-host="%s" data-status="%s" data-in-service="%s" data-search="%s"><td class="h">'
                    '<a href="#n-%s">%s</a></td>'
                    '<td class="s-%s">%s</td><td class="s-%s" data-cell="node" title="node-level findings">%s</td>'
                    '<td>%s</td><td>%s</td>%s</tr>' % (
                        _e(entry["host"]), _e(_ok(entry["status"])), _in_service(entry), _e(_search(entry)),
                        _e(entry["host"]), _e(entry["host"]), _e(entry["status"]), _e(SEVERITY_LABEL.get(entry["status"])),
                        _e(entry["node_status"]), _e(SEVERITY_LABEL.get(entry["node_status"])),
                        _e(entry["group"] or "-"), _e(slurm.get("state") or "-"), "".join(cells)))
    return ('<p>One row per node, worst first (a node out of service in Slurm whose findings are OK is '
            '<i>drained</i>, never OK); a GPU cell has the colour of its worst finding (hover over it for the '
            'serial, UUID and codes; E error, ? unknown, W warning, i info); <i>node-wide</i> is the worst finding '
            'about the node itself (driver, fabric, InfiniBand, drift, Slurm).</p><table class="grid" id="grid"><thead><tr><th>node</th><th>status</th>'
            '<th>node-wide</th><th>group</th><th>Slurm</th>%s</tr></thead><tbody>%s</tbody></table>'
            % (head, "".join(rows)))


def _ok(status):
    """The filter's notion of OK: ok and info (nothing to do); a drained node is never OK."""
    return "ok" if _fleet.is_ok(status) else status


def _in_service(entry):
    """``data-in-service``: 1 when Slurm schedules on the node, 0 when it is out of service, empty when unknown."""
    return {True: "1", False: "0"}.get(entry.get("in_service"), "")


def _pin(pin):
    if pin is None:
        return "-"
    return ", ".join(str(p) for p in pin) if isinstance(pin, list) else pin


def _findings_table(findings):
    rows = "".join('<tr><td>%s</td><td class="mono">%s</td><td class="mono">%s</td><td>%s</td><td>%s</td></tr>' % (
        _badge(f["severity"]), _e(f["code"]), _e(f["target"]), _e(f["message"]), _e(f["action"])) for f in findings)
    return ('<table><thead><tr><th>severity</th><th>code</th><th>target</th><th>what</th><th>action</th></tr></thead>'
            '<tbody>%s</tbody></table>' % rows)


def _node_sections(order):
    parts = []
    for entry in order:
        if _ok(entry["status"]) == "ok" and not entry["findings"]:
            continue
        detail = ["group %s" % (entry["group"] or "-"), "source %s" % (entry["source"] or "-"),
                  "level %s" % (entry["level"] or "-"), "checked %s" % (entry["checked_at"] or "-")]
        slurm = entry.get("slurm")
        if slurm:
            detail.append("Slurm %s %s" % (slurm.get("state") or "-", slurm.get("reason") or ""))
        parts.append('<div class="node" id="n-%s" data-host="%s" data-status="%s" data-in-service="%s" '
                     'data-search="%s"><h3>%s %s</h3><div>%s</div>%s</div>' % (
                         _e(entry["host"]), _e(entry["host"]), _e(_ok(entry["status"])), _in_service(entry),
                         _e(_search(entry)), _e(entry["host"]), _badge(entry["status"]), _e("; ".join(detail)),
                         _findings_table(entry["findings"])))
    return "".join(parts) or "<p>No node has a finding.</p>"


def _drift(report):
    rows = []
    for group, data in sorted(report["drift"].items()):
        for key, row in sorted(data["keys"].items()):
            values = "; ".join("%s: %s" % (value, ", ".join(hosts)) for value, hosts in sorted(row["values"].items()))
            if row["unknown"]:
                values += "; unknown: %s" % ", ".join(row["unknown"])
            status = "warning" if row["drifted"] else "ok"
            rows.append('<tr><td>%s</td><td>%s</td><td class="mono">%s</td><td class="mono">%s</td><td>%s</td>'
                        '<td class="mono">%s</td></tr>' % (
                            _e(group), _e(row["label"]), _e(_pin(row["pin"])),
                            _e(row["majority"] if row["majority"] is not None else "-"), _badge(status), _e(values)))
    if not rows:
        return "<p>No group to compare.</p>"
    return ('<table id="drift"><thead><tr><th>group</th><th>what</th><th>pin</th><th>majority</th><th>drift</th>'
            '<th>values: nodes</th></tr></thead><tbody>%s</tbody></table>' % "".join(rows))


def _rma(report):
    if not report["rma"]:
        return "<p>Nothing to return (codes: %s).</p>" % _e(", ".join(report["rma_codes"]))
    rows = "".join("<tr>%s</tr>" % "".join('<td class="mono">%s</td>' % _e(row.get(c))
                                           for c in _fleet.RMA_COLUMNS) for row in report["rma"])
    return '<table id="rma"><thead><tr>%s</tr></thead><tbody>%s</tbody></table>' % (
        "".join("<th>%s</th>" % _e(c) for c in _fleet.RMA_COLUMNS), rows)


def _diff(report):
    diff = report["diff"]
    if not diff.get("compared"):
        return "<p>No previous report to compare with.</p>"
    parts = ["<p>Against %s: %d new, %d cleared, %d persisting.</p>" % (
        _e(diff.get("previous") or "the previous report"), diff["counts"]["new"], diff["counts"]["cleared"],
        diff["counts"]["persisting"])]
    for name in ("new", "cleared"):
        if diff[name]:
            parts.append("<h3>%s</h3><ul>%s</ul>" % (name, "".join(
                '<li class="mono">%s %s %s: %s</li>' % (_e(f["node"]), _e(f["code"]), _e(f["target"]),
                                                        _e(f.get("message"))) for f in diff[name])))
    return "".join(parts)


def render(report):
    """The whole page for a report document."""
    order = sorted(report["nodes"].values(), key=lambda e: (-_fleet.status_rank(e["status"]), e["host"]))
    summary = report["summary"]
    options = "".join("<tr><th>%s</th><td class=\"mono\">%s</td></tr>" % (
        _e(key), _e(value if isinstance(value, str) else json.dumps(value, sort_keys=True)))
        for key, value in sorted(report["options"].items()))
    counts = "".join('<span>%s %d</span>' % (_badge(name) if name in SEVERITY_LABEL else _e(name),
                                             summary.get(name, 0))
                     for name in ("nodes", "ok", _fleet.DRAINED, "warning", "error", "unknown", "unreachable"))
    service = report.get("service") or {}
    counts += '<span id="in-service">in service %d of %d%s</span>' % (
        service.get("in_service", 0), summary["nodes"],
        (", %d with no Slurm state" % service["no_slurm_state"]) if service.get("no_slurm_state") else "")
    legend = "".join("<span>%s</span>" % _badge(s)
                     for s in ("ok", "info", _fleet.DRAINED, "warning", "unknown", "error"))
    return """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
<title>Fleet health %(created)s</title><style>%(css)s</style></head>
<body data-ready="0" data-filter="" data-hideok="0">
<h1>Fleet health report</h1>
<table class="meta"><tr><th>created</th><td>%(created)s</td></tr>%(options)s</table>
<p class="counts">%(counts)s</p>
<div class="filter"><label>Filter <input type="text" id="filter-text" placeholder="node, group, code, serial"></label>
<label><input type="checkbox" id="filter-hideok"> hide OK nodes</label> <span id="filter-count"></span>
<span class="legend">%(legend)s</span></div>
<h2>Nodes by GPU</h2>%(grid)s
<h2>Findings by node</h2>%(nodes)s
<h2>Version drift</h2>%(drift)s
<h2>RMA list</h2>%(rma)s
<h2>Since the previous report</h2>%(diff)s
<script>%(js)s</script>
</body></html>
""" % {"created": _e(report.get("created_at") or "-"), "css": _CSS, "options": options, "counts": counts,
       "legend": legend, "grid": _grid(report, order), "nodes": _node_sections(order), "drift": _drift(report),
       "rma": _rma(report), "diff": _diff(report), "js": _JS}
