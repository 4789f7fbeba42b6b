"""The metric names a PromQL expression reads (enough of PromQL for our rules and dashboards), and the metrics that
exist: the dcgm_exporter role's default counters, the health checker's own, the Slurm collector's, and Prometheus's."""

import os
import re

import yaml

from ansible_collections.gpucluster.ops.plugins.module_utils import _health, _slurm_metrics

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
             "inf", "nan", "Inf", "NaN"}
# Series Prometheus makes itself.
PROMETHEUS_METRICS = {"up", "ALERTS", "ALERTS_FOR_STATE", "scrape_duration_seconds", "scrape_samples_scraped"}


def metric_names(expr):
    """Metric names in a PromQL expression (functions, keywords, labels, strings and durations left out)."""
    text = re.sub(r'"(\\.|[^"\\])*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = re.sub(r"\boffset\s+[0-9]+[a-z]+", " ", text)
    text = re.sub(r"\$\w+", " ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", text):
        rest = text[match.end():].lstrip()
        if rest.startswith("(") or match.group(0) in _KEYWORDS:
            continue
        names.add(match.group(0))
    return names


def counter_fields():
    with open(os.path.join(ROOT, "roles", "dcgm_exporter", "defaults", "main.yml")) as handle:
        defaults = yaml.safe_load(handle)
    return {c["field"] for c in defaults["dcgm_exporter_counters"] if c["type"] != "label"}


def health_metrics():
    """The names gpucluster-health writes, from its own renderer."""
    result = {"node": "gpu01", "level": "standard", "status": "error", "gpus": [{}],
              "findings": [{"code": "GPU-XID-ERROR", "severity": "error", "target": "gpu0"}], "unreadable": []}
    text = _health.render_prometheus(result, duration_s=1.5)
    return set(re.findall(r"^# TYPE (\S+) ", text, re.M))


def slurm_metrics():
    """The names gpucluster-slurm-metrics writes, from its own table."""
    return set(_slurm_metrics.HELP)


def known_metrics():
    return counter_fields() | health_metrics() | slurm_metrics() | PROMETHEUS_METRICS
