# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The team quota model: inventory ``team_quota_teams`` to Slurm QOS/accounts/users, slurm.conf keys and Kubernetes.

Standard library only. ``build()`` validates the whole model, collects every problem (each names the variable path
and the value) and raises one ``TeamQuotaError`` listing them all, so that an operator fixes a file in one pass. The
filter ``gpucluster.ops.team_quotas`` wraps it. What Slurm did with these objects is recorded in the molecule scenario
``team-quota`` and in ../shared/docs/slurm-facts.md (sacctmgr 22.05 and 24.11).
Durations (``min_runtime_before_preemption``) follow ``_slurm_values.parse_duration``: a bare number is refused.
"""

from __future__ import absolute_import, division, print_function

import math
import re

from ansible_collections.gpucluster.ops.plugins.module_utils._slurm_values import (
    PRIORITY_MAX, TEXT_RE, did_you_mean, format_time, parse_duration)

__metaclass__ = type

PERIODS = ("month", "week", "day")
# PriorityUsageResetPeriod values for the decay alternative, by period.
RESET_PERIODS = {"month": "MONTHLY", "week": "WEEKLY", "day": "DAILY"}
DEFAULT_PRIORITIES = {"low": 100, "medium": 500, "high": 1000}
PREEMPT_MODES = ("requeue", "cancel")
RESET_METHODS = ("timer", "decay")
TEAM_KEYS = ("description", "gpu_hours", "max_concurrent", "priority", "preemptible_by", "can_preempt",
             "min_runtime_before_preemption", "preempt_mode", "members", "gpu_types", "partitions",
             "kubernetes_namespace", "kubernetes_max_concurrent", "shares")
MEMBER_KEYS = ("name", "default")
QOS_PREFIX = "gpucluster.ops: "       # QOS descriptions start with it: prune only ever removes QOS carrying it
ORGANIZATION = "gpucluster.ops"        # accounts carry it as Organization: prune only ever removes those
GPU_RESOURCE = "nvidia.com/gpu"
# Kueue's storage version (v0.19: v1beta2, which named a ClusterQueue's cohort ``cohortName``); v1beta1 is only served.
KUEUE_API = "kueue.x-k8s.io/v1beta2"
MANAGED_LABELS = {"app.kubernetes.io/managed-by": "gpucluster.ops"}

TEAM_RE = re.compile(r"^[a-z][a-z0-9_-]{0,29}$")
USER_RE = re.compile(r"^[a-z_][a-z0-9_.-]{0,31}$")
GPU_TYPE_RE = re.compile(r"^[a-z0-9][a-z0-9_.-]{0,39}$")
PARTITION_RE = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DESCRIPTION_RE = TEXT_RE                # sacctmgr prints descriptions in '|'-separated output
# Fair share: a team's Fairshare= shares when it names none. Equal shares: a team's max_concurrent is a ceiling, not
# an entitlement, and a team without one has no number to be proportional to; set ``shares`` where a team is owed more.
DEFAULT_SHARES = 1
# PriorityWeightFairshare and PriorityWeightAge beside PriorityWeightQOS (10000): the QOS priority still orders the
# teams, fair share orders the teams of one priority level by their use, and age keeps a waiting job from starving.
DEFAULT_FAIRSHARE_WEIGHT = 10000
DEFAULT_AGE_WEIGHT = 1000
SHARES_MAX = 2 ** 31 - 1
WEIGHT_MAX = 2 ** 32 - 1
# Off-peak pricing: every partition bills GRES/gpu=BILLING_PER_GPU per GPU (the off-peak one factor x that), and a
# team's budget is GrpTRESMins=billing=<GPU-minutes x BILLING_PER_GPU>. Slurm keeps a job's billing TRES as a whole
# number, so a factor of 0.5 on one GPU must not round to 0: hence 1000 per GPU, and factors in steps of 0.001.
BILLING_PER_GPU = 1000
OFFPEAK_KEYS = ("factor", "open", "close", "partition", "base_partition")
PRICE_MAX = 1e9
CURRENCY_RE = re.compile(r"^[A-Za-z$\u20ac\u00a3\u00a5]{1,8}$")
_GPU_HOURS_RE = re.compile(r"^\s*(?P<sign>-)?\s*(?P<hours>[0-9][0-9_,]*(?:\.[0-9]+)?)\s*/\s*(?P<period>[A-Za-z]+)\s*$")


class TeamQuotaError(ValueError):
    """The model is wrong; ``problems`` lists every problem found, each naming the variable and the value."""

    def __init__(self, problems):
        self.problems = list(problems)
        super(TeamQuotaError, self).__init__("; ".join(self.problems))


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def parse_count(value, where, allow_none=True):
    """A non-negative integer (a decimal string is accepted: templated inventory values arrive as strings)."""
    if value is None and allow_none:
        return None
    if _is_int(value):
        number = value
    elif isinstance(value, str) and re.match(r"^\s*-?[0-9]+\s*$", value):
        number = int(value)
    else:
        raise ValueError("%s is %r: use a whole number of GPUs (or leave it out for no limit)" % (where, value))
    if number < 0:
        raise ValueError("%s is %r: a limit cannot be negative" % (where, value))
    return number


def parse_gpu_hours(value, where):
    """``'20000/month'`` -> (20000, 'month', 1200000 GPU-minutes); None -> (None, None, None) (no budget)."""
    if value is None:
        return None, None, None
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError("%s is %r: write GPU-hours per period as '<hours>/month', '<hours>/week' or '<hours>/day'"
                         % (where, value))
    match = _GPU_HOURS_RE.match(value)
    if not match:
        raise ValueError("%s is %r: write GPU-hours per period as '<hours>/month', '<hours>/week' or '<hours>/day'"
                         % (where, value))
    period = match.group("period").lower()
    if period.endswith("s") and period[:-1] in PERIODS:
        period = period[:-1]
    if period not in PERIODS:
        raise ValueError("%s is %r: unknown period '%s'%s; use month, week or day"
                         % (where, value, match.group("period"), did_you_mean(period, PERIODS)))
    if match.group("sign"):
        raise ValueError("%s is %r: a GPU-hour budget cannot be negative" % (where, value))
    hours_text = match.group("hours").replace("_", "").replace(",", "")
    hours = float(hours_text) if "." in hours_text else int(hours_text)
    minutes = hours * 60
    if abs(minutes - round(minutes)) > 1e-9:
        raise ValueError("%s is %r: Slurm counts GPU-minutes, and %s GPU-hours is not a whole number of them"
                         % (where, value, hours_text))
    if isinstance(hours, float) and hours.is_integer():
        hours = int(hours)
    return hours, period, int(round(minutes))


def parse_priority(value, levels, where):
    """A QOS priority: a level name (``high``) or a number from 0 to 4294967294."""
    if _is_int(value) or (isinstance(value, str) and re.match(r"^\s*-?[0-9]+\s*$", value)):
        number = int(value)
        if number < 0 or number > PRIORITY_MAX:
            raise ValueError("%s is %r: a priority number runs from 0 to %d" % (where, value, PRIORITY_MAX))
        return number, None
    if isinstance(value, str) and value.strip().lower() in levels:
        name = value.strip().lower()
        return levels[name], name
    raise ValueError("%s is %r: unknown priority%s; use one of %s or a number"
                     % (where, value, did_you_mean(str(value).lower(), levels), ", ".join(sorted(levels))))


def _names(value, where, pattern, what):
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        raise ValueError("%s is %r: expected a list of %s" % (where, value, what))
    result = []
    for item in value:
        if not isinstance(item, str) or not pattern.match(item):
            raise ValueError("%s has %r, which is not a valid %s" % (where, item, what))
        if item in result:
            raise ValueError("%s lists %r twice" % (where, item))
        result.append(item)
    return result


def _levels(priorities):
    levels = dict(DEFAULT_PRIORITIES if priorities is None else priorities)
    checked = {}
    for name, number in levels.items():
        if not isinstance(name, str) or not re.match(r"^[a-z][a-z0-9_-]*$", name.lower()):
            raise TeamQuotaError(["priority level name %r is not a lower-case word" % (name,)])
        if not _is_int(number) or number < 0 or number > PRIORITY_MAX:
            raise TeamQuotaError(["priority level %s is %r: use a number from 0 to %d" % (name, number, PRIORITY_MAX)])
        checked[name.lower()] = number
    return checked


class _Problems(object):
    def __init__(self):
        self.items = []

    def run(self, func, *args):
        try:
            return func(*args)
        except ValueError as exc:
            self.items.append(str(exc))
            return None


def _members(value, where):
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise ValueError("%s is %r: expected a list of user names or {name, default} entries" % (where, value))
    result, seen = [], set()
    for index, item in enumerate(value):
        here = "%s[%d]" % (where, index)
        if isinstance(item, dict):
            unknown = sorted(set(item) - set(MEMBER_KEYS))
            if unknown:
                raise ValueError("%s has unknown key(s) %s; a member is {name, default}" % (here, ", ".join(unknown)))
            name, default = item.get("name"), item.get("default", False)
            if not isinstance(default, bool):
                raise ValueError("%s.default is %r: use true or false" % (here, default))
        else:
            name, default = item, False
        if not isinstance(name, str) or not USER_RE.match(name):
            raise ValueError("%s is %r, which is not a user name (lower case, up to 32 characters)" % (here, name))
        if name in seen:
            raise ValueError("%s lists user %s twice" % (where, name))
        seen.add(name)
        result.append({"name": name, "default": default})
    return result


def _team(name, spec, levels, default_priority, var, problems):
    where = "%s.%s" % (var, name)
    if not isinstance(name, str) or not TEAM_RE.match(name):
        problems.items.append("%s: team name %r must be 1-30 lower-case letters, digits, '-' or '_', starting with a "
                              "letter (it becomes a Slurm account and QOS name)" % (var, name))
        return None
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        problems.items.append("%s is %r: a team is a mapping of %s" % (where, spec, ", ".join(TEAM_KEYS)))
        return None
    for key in sorted(set(spec) - set(TEAM_KEYS)):
        problems.items.append("%s has unknown key '%s'%s" % (where, key, did_you_mean(key, TEAM_KEYS)))
    team = {"name": name}
    description = spec.get("description")
    if description is None:
        description = "team %s" % name
    if not isinstance(description, str) or not DESCRIPTION_RE.match(description):
        problems.items.append("%s.description is %r: up to 200 characters without quotes, '|', '\\' or line breaks "
                              "(sacctmgr prints it in '|'-separated output)" % (where, description))
    team["description"] = description
    hours = problems.run(parse_gpu_hours, spec.get("gpu_hours"), where + ".gpu_hours") or (None, None, None)
    team["gpu_hours"], team["period"], team["gpu_minutes"] = hours
    team["max_concurrent"] = problems.run(parse_count, spec.get("max_concurrent"), where + ".max_concurrent")
    priority = problems.run(parse_priority, spec.get("priority", default_priority), levels, where + ".priority")
    team["priority"], team["priority_name"] = priority or (0, None)
    team["preemptible_by"] = problems.run(_names, spec.get("preemptible_by"), where + ".preemptible_by", TEAM_RE,
                                          "team name") or []
    team["can_preempt"] = problems.run(_names, spec.get("can_preempt"), where + ".can_preempt", TEAM_RE,
                                       "team name") or []
    team["min_runtime_s"] = problems.run(parse_duration, spec.get("min_runtime_before_preemption"),
                                         where + ".min_runtime_before_preemption") or 0
    mode = spec.get("preempt_mode", "requeue")
    if mode not in PREEMPT_MODES:
        problems.items.append("%s.preempt_mode is %r: use %s" % (where, mode, " or ".join(PREEMPT_MODES)))
    team["preempt_mode"] = mode
    team["members"] = problems.run(_members, spec.get("members"), where + ".members") or []
    team["gpu_types"] = problems.run(_names, spec.get("gpu_types"), where + ".gpu_types", GPU_TYPE_RE,
                                     "GPU type (lower case, as in Gres=gpu:<type>:N)") or []
    team["partitions"] = problems.run(_names, spec.get("partitions"), where + ".partitions", PARTITION_RE,
                                      "partition name") or []
    namespace = spec.get("kubernetes_namespace", "team-%s" % name.replace("_", "-"))
    if not isinstance(namespace, str) or not NAMESPACE_RE.match(namespace):
        problems.items.append("%s.kubernetes_namespace is %r: a Kubernetes namespace name is up to 63 lower-case "
                              "letters, digits and '-'" % (where, namespace))
    team["kubernetes_namespace"] = namespace
    team["kubernetes_max_concurrent"] = problems.run(parse_count, spec.get("kubernetes_max_concurrent"),
                                                     where + ".kubernetes_max_concurrent")
    team["shares"] = problems.run(parse_shares, spec.get("shares"), where + ".shares") or DEFAULT_SHARES
    return team


def _whole(value, low, high):
    """``value`` (a whole number, or a decimal string as templated inventory gives it) within low..high, else None."""
    if _is_int(value) or (isinstance(value, str) and re.match(r"^\s*-?[0-9]+\s*$", value)):
        number = int(value)
        if low <= number <= high:
            return number
    return None


def parse_shares(value, where):
    """A team's Fairshare= shares: a whole number from 1 (None: DEFAULT_SHARES)."""
    if value is None:
        return DEFAULT_SHARES
    number = _whole(value, 1, SHARES_MAX)
    if number is None:
        raise ValueError("%s is %r: fair-share shares are a whole number from 1 to %d (only their ratio between teams "
                         "matters)" % (where, value, SHARES_MAX))
    return number


def _weight(value, name, problems):
    """A PriorityWeight* value: None (key left out) or a whole number from 0 to 4294967295."""
    if value is None:
        return None
    number = _whole(value, 0, WEIGHT_MAX)
    if number is None:
        problems.items.append("%s is %r: use a whole number from 0 to %d" % (name, value, WEIGHT_MAX))
    return number


def _interval(value, name, problems, minutes=False):
    """PriorityCalcPeriod (``minutes``: whole minutes, at least 1) or PriorityDecayHalfLife (a Slurm time, 0 allowed):
    from a duration ('1m', '7d', '7-00:00:00'); None: the key is left out."""
    if value is None:
        return None
    try:
        seconds = parse_duration(value, name)
    except ValueError as exc:
        problems.items.append(str(exc))
        return None
    if seconds % 60:
        problems.items.append("%s is %r: Slurm counts it in whole minutes" % (name, value))
        return None
    if minutes:
        if seconds == 0:
            problems.items.append("%s is %r: slurmctld recalculates priorities at least every minute" % (name, value))
            return None
        return seconds // 60
    return format_time(seconds) if seconds else 0


def parse_factor(value, where):
    """The off-peak factor: 0 < f <= 1, in steps of 1/BILLING_PER_GPU; returns (factor, billing weight per GPU)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError("%s is %r: give a number above 0 and at most 1 (0.5: off-peak GPU-hours count half)"
                         % (where, value))
    try:
        factor = float(value)
    except ValueError:
        raise ValueError("%s is %r: give a number above 0 and at most 1 (0.5: off-peak GPU-hours count half)"
                         % (where, value))
    if math.isnan(factor) or factor <= 0 or factor > 1:
        raise ValueError("%s is %r: the off-peak factor is above 0 and at most 1 (a factor above 1 would make the "
                         "quiet hours dearer, 0 or less would leave off-peak work outside every budget)"
                         % (where, value))
    weight = factor * BILLING_PER_GPU
    if abs(weight - round(weight)) > 1e-6:
        raise ValueError("%s is %r: give the factor in steps of %s (Slurm bills whole units)"
                         % (where, value, 1.0 / BILLING_PER_GPU))
    return factor, int(round(weight))


def _offpeak(spec, var, problems):
    """The off-peak window and factor (None: off), checked; see build()."""
    if spec is None or spec == {}:
        return None
    if not isinstance(spec, dict):
        problems.items.append("%s is %r: give {factor, open, close} (or leave it empty for no off-peak pricing)"
                              % (var, spec))
        return None
    for key in sorted(set(spec) - set(OFFPEAK_KEYS)):
        problems.items.append("%s has unknown key '%s'%s" % (var, key, did_you_mean(key, OFFPEAK_KEYS)))
    factor = problems.run(parse_factor, spec.get("factor"), var + ".factor") or (None, None)
    result = {"factor": factor[0], "billing_per_gpu": factor[1]}
    for key in ("open", "close"):
        value = spec.get(key)
        if not isinstance(value, str) or not value.strip() or not TEXT_RE.match(value):
            problems.items.append("%s.%s is %r: give a systemd OnCalendar time (such as 'Mon..Fri *-*-* 20:00:00'); "
                                  "without it the off-peak window never %ss" % (var, key, value, key))
            value = None
        result[key] = value.strip() if value else value
    if result["open"] and result["open"] == result["close"]:
        problems.items.append("%s: open and close are both %r, so the off-peak window never opens"
                              % (var, result["open"]))
    for key, default in (("partition", "offpeak"), ("base_partition", None)):
        value = spec.get(key, default)
        if value is not None and (not isinstance(value, str) or not PARTITION_RE.match(value)):
            problems.items.append("%s.%s is %r, which is not a partition name" % (var, key, value))
            value = None
        result[key] = value
    return result


def _prices(prices, currency, cluster_types, var, problems, currency_var="team_quota_currency"):
    """Price per GPU-hour per GPU type ({type: number >= 0}); '' prices untyped GPUs."""
    if prices is None:
        prices = {}
    if not isinstance(prices, dict):
        problems.items.append("%s is %r: give {GPU type: price per GPU-hour}" % (var, prices))
        return {}
    checked = {}
    for gpu in sorted(prices, key=str):
        value = prices[gpu]
        where = "%s.%s" % (var, gpu)
        if not isinstance(gpu, str) or (gpu and not GPU_TYPE_RE.match(gpu)):
            problems.items.append("%s: %r is not a GPU type" % (var, gpu))
            continue
        if cluster_types and gpu and gpu not in cluster_types:
            problems.items.append("%s: '%s' is not one of the cluster's GPU types (%s)%s"
                                  % (var, gpu, ", ".join(cluster_types), did_you_mean(gpu, cluster_types)))
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                value = float(value) if isinstance(value, str) else None
            except ValueError:
                value = None
            if value is None:
                problems.items.append("%s is %r: give the price of one GPU-hour as a number" % (where, prices[gpu]))
                continue
        if math.isnan(value) or value < 0 or value > PRICE_MAX:
            problems.items.append("%s is %r: a price per GPU-hour is a number from 0 to %d (a negative price is refused)"
                                  % (where, prices[gpu], PRICE_MAX))
            continue
        checked[gpu] = value
    if not isinstance(currency, str) or not CURRENCY_RE.match(currency):
        problems.items.append("%s is %r: give a short name such as EUR or USD" % (currency_var, currency))
    return checked


def _preemption(teams, var, problems):
    """Fill each team's ``preempts`` and ``preempted_by`` from both directions; refuse self-loops and cycles."""
    edges = set()
    for team in teams.values():
        for other in team["can_preempt"]:
            edges.add((team["name"], other, "%s.%s.can_preempt" % (var, team["name"])))
        for other in team["preemptible_by"]:
            edges.add((other, team["name"], "%s.%s.preemptible_by" % (var, team["name"])))
    graph = dict((name, set()) for name in teams)
    for high, low, where in sorted(edges):
        if high == low:
            problems.items.append("%s: team %s cannot preempt itself" % (where, high))
        elif high not in teams or low not in teams:
            unknown = high if high not in teams else low
            problems.items.append("%s names team '%s', which is not in %s%s"
                                  % (where, unknown, var, did_you_mean(unknown, teams)))
        else:
            graph[high].add(low)
    for name in sorted(graph):
        cycle = _find_cycle(graph, name)
        if cycle:
            problems.items.append("%s: preemption goes in a circle (%s): each of these teams could requeue the other's "
                                  "jobs forever" % (var, " -> ".join(cycle)))
            break
    for name, team in teams.items():
        team["preempts"] = sorted(graph[name])
        team["preempted_by"] = sorted(h for h in graph if name in graph[h])
        if team["min_runtime_s"] and not team["preempted_by"]:
            problems.items.append("%s.%s.min_runtime_before_preemption is set, but no team can preempt %s (add it to "
                                  "another team's can_preempt or to its own preemptible_by)" % (var, name, name))


def _find_cycle(graph, start):
    stack = [(start, [start])]
    while stack:
        node, path = stack.pop()
        for nxt in sorted(graph.get(node, ())):
            if nxt == start:
                return path + [start]
            if nxt not in path:
                stack.append((nxt, path + [nxt]))
    return None


def _users(teams, var, problems):
    memberships = {}
    for team in sorted(teams.values(), key=lambda t: t["name"]):
        for member in team["members"]:
            memberships.setdefault(member["name"], []).append((team, member["default"]))
    users = []
    for user in sorted(memberships):
        entries = memberships[user]
        defaults = [team["name"] for team, default in entries if default]
        if len(entries) > 1 and len(defaults) != 1:
            names = ", ".join(team["name"] for team, _default in entries)
            if defaults:
                problems.items.append("%s: user %s is the default member of several teams (%s); mark exactly one "
                                      "membership with default: true" % (var, user, ", ".join(defaults)))
            else:
                problems.items.append("%s: user %s is in teams %s without a default; mark one membership as "
                                      "{name: %s, default: true}" % (var, user, names, user))
            continue
        default = defaults[0] if defaults else entries[0][0]["name"]
        associations = []
        for team, _default in entries:
            for partition in team["partitions"] or [""]:
                associations.append({"account": team["name"], "partition": partition})
        users.append({"name": user, "default_account": default,
                      "accounts": [team["name"] for team, _default in entries], "associations": associations})
    return users


def _gpu_types(teams, gpu_types, problems, var):
    cluster = problems.run(_names, gpu_types, "the cluster's GPU types (gpu_types)", GPU_TYPE_RE, "GPU type") or []
    restricted = [t for t in teams.values() if t["gpu_types"]]
    if restricted and not cluster:
        problems.items.append("%s.%s.gpu_types restricts GPU types, but the cluster's GPU types are not given "
                              "(team_quota_gpu_types): the restriction works by setting every other type's limit to 0"
                              % (var, restricted[0]["name"]))
    for team in restricted:
        for gpu in team["gpu_types"]:
            if cluster and gpu not in cluster:
                problems.items.append("%s.%s.gpu_types has '%s', which is not one of the cluster's GPU types (%s)%s"
                                      % (var, team["name"], gpu, ", ".join(cluster), did_you_mean(gpu, cluster)))
    return cluster


# Hours of each budget period at the longest: a 31-day month, so that no budget a month can use is refused.
PERIOD_HOURS = {"month": 24 * 31, "week": 24 * 7, "day": 24}
PERIOD_WORDS = {"month": "a 31-day month", "week": "a week", "day": "a day"}
_MAX_NAMED = 5


def _named(names):
    names = sorted(names)
    shown = ", ".join(names[:_MAX_NAMED])
    return shown + (" and %d more" % (len(names) - _MAX_NAMED) if len(names) > _MAX_NAMED else "")


def _type_text(counts):
    return ", ".join("%d %s" % (counts[t], t or "untyped") for t in sorted(counts)) or "none"


def _check_cluster_shape(cluster, where):
    """(nodes, partitions) of the cluster description (see check_cluster); raises ValueError on a malformed one."""
    if not isinstance(cluster, dict) or not isinstance(cluster.get("nodes"), dict):
        raise ValueError("%s is %r: it is {nodes: {node: {GPU type: count}}, partitions: {name: [nodes]}} "
                         "(the gpucluster.ops.slurm_cluster_gpus filter)" % (where, cluster))
    nodes = {}
    for node, counts in cluster["nodes"].items():
        if not isinstance(counts, dict) or not all(_is_int(c) and c >= 0 for c in counts.values()):
            raise ValueError("%s.nodes.%s is %r: it maps GPU types to counts" % (where, node, counts))
        nodes[str(node)] = dict((str(t), c) for t, c in counts.items() if c)
    partitions = cluster.get("partitions") or {}
    if not isinstance(partitions, dict) or not all(isinstance(m, (list, tuple)) for m in partitions.values()):
        raise ValueError("%s.partitions is %r: it maps partition names to node names" % (where, partitions))
    return nodes, dict((str(p), set(str(n) for n in m)) for p, m in partitions.items())


def check_cluster(teams, cluster_types, cluster, var, types_var, problems, where="the cluster"):
    """Check the normalised teams against the cluster they run on; return the warnings (problems go to ``problems``).

    ``cluster`` is ``{nodes: {node: {GPU type: count}}, partitions: {name: [nodes]}}`` (untyped GPUs under ``""``),
    as the gpucluster.ops.slurm_cluster_gpus filter returns it. A team reaches the nodes of its partitions (all nodes
    without partitions) and, there, the GPUs of its GPU types (all GPUs without gpu_types):

    - each GPU type of ``types_var`` and of a team's gpu_types is a type some node has, and, where ``types_var``
      lists types, every type the nodes have is in it (a type left out escapes the restrictions);
    - each partition a team names exists;
    - a team's max_concurrent is at most the GPUs it reaches;
    - a team's budget is at most what those GPUs deliver in its period at the longest (GPUs x 24 h x 31 days for a
      month, x 7 days for a week, x 1 for a day).

    Budgets that add up to more than the whole cluster delivers are normal oversubscription: a warning.
    """
    try:
        nodes, partitions = _check_cluster_shape(cluster, where)
    except ValueError as exc:
        problems.items.append(str(exc))
        return []
    node_types = {}
    for node, counts in nodes.items():
        for gpu in counts:
            if gpu:
                node_types.setdefault(gpu, []).append(node)
    known = ", ".join(sorted(node_types)) or "none"
    for gpu in cluster_types:
        if gpu not in node_types:
            problems.items.append("%s has '%s', which no node of %s has (the nodes' GPU types: %s)%s"
                                  % (types_var, gpu, where, known, did_you_mean(gpu, node_types)))
    if cluster_types:
        for gpu in sorted(set(node_types) - set(cluster_types)):
            problems.items.append("%s is %s, but nodes of %s have GPU type '%s' too (%s): list every type the nodes "
                                  "have, or a team's gpu_types restriction does not cover it"
                                  % (types_var, "[%s]" % ", ".join(cluster_types), where, gpu,
                                     _named(node_types[gpu])))
    warnings = []
    budgets = {}
    for name in sorted(teams):
        team = teams[name]
        path = "%s.%s" % (var, name)
        for gpu in team["gpu_types"]:
            if gpu not in node_types:
                problems.items.append("%s.gpu_types has '%s', which no node of %s has (the nodes' GPU types: %s)%s"
                                      % (path, gpu, where, known, did_you_mean(gpu, node_types)))
        reach = set(nodes)
        if team["partitions"]:
            reach = set()
            for partition in team["partitions"]:
                if partition not in partitions:
                    problems.items.append("%s.partitions has '%s', which is not a partition of %s (partitions: %s)%s"
                                          % (path, partition, where, ", ".join(sorted(partitions)) or "none",
                                             did_you_mean(partition, partitions)))
                else:
                    reach |= partitions[partition]
        counts = {}
        for node in reach:
            for gpu, count in nodes.get(node, {}).items():
                if not team["gpu_types"] or gpu in team["gpu_types"]:
                    counts[gpu] = counts.get(gpu, 0) + count
        gpus = sum(counts.values())
        scope = "%s%s" % ("of GPU type%s %s " % ("s" if len(team["gpu_types"]) > 1 else "", ", ".join(team["gpu_types"]))
                          if team["gpu_types"] else "",
                          "in partition%s %s" % ("s" if len(team["partitions"]) > 1 else "",
                                                 ", ".join(team["partitions"]))
                          if team["partitions"] else "in %s" % where)
        if team["max_concurrent"] is not None and team["max_concurrent"] > gpus:
            problems.items.append("%s.max_concurrent is %d, more than the %d GPUs %s (%s): the team could never use "
                                  "its limit" % (path, team["max_concurrent"], gpus, scope, _type_text(counts)))
        if team["gpu_hours"] is not None:
            deliverable = gpus * PERIOD_HOURS[team["period"]]
            budgets[team["period"]] = budgets.get(team["period"], 0) + team["gpu_hours"]
            if team["gpu_hours"] > deliverable:
                problems.items.append("%s.gpu_hours is '%s/%s', more than the %d GPU-hours the %d GPUs %s deliver in "
                                      "%s (%d x 24 h x %d days)"
                                      % (path, team["gpu_hours"], team["period"], deliverable, gpus, scope,
                                         PERIOD_WORDS[team["period"]], gpus, PERIOD_HOURS[team["period"]] // 24))
    total = sum(sum(c.values()) for c in nodes.values())
    for period in PERIODS:
        if period in budgets and budgets[period] > total * PERIOD_HOURS[period]:
            warnings.append("%s: the /%s budgets add up to %s GPU-hours, more than the %d that the %d GPUs of %s deliver "
                            "in %s: the teams are oversubscribed, and those that spend early leave less for the others"
                            % (var, period, budgets[period], total * PERIOD_HOURS[period], total, where,
                               PERIOD_WORDS[period]))
    return warnings


def _qos(team, cluster_types, reset, billing=False):
    grp_tres = {}
    if team["max_concurrent"] is not None:
        grp_tres["gres/gpu"] = team["max_concurrent"]
    if team["gpu_types"]:
        for gpu in cluster_types:
            if gpu not in team["gpu_types"]:
                grp_tres["gres/gpu:%s" % gpu] = 0
    grp_tres_mins = {}
    if team["gpu_minutes"] is not None:
        if billing:
            grp_tres_mins["billing"] = team["gpu_minutes"] * BILLING_PER_GPU
        else:
            grp_tres_mins["gres/gpu"] = team["gpu_minutes"]
    flags = ["DenyOnLimit"]
    if reset == "timer" and team["gpu_minutes"] is not None:
        flags.append("NoDecay")
    return {
        "name": team["name"],
        "description": QOS_PREFIX + team["description"],
        "priority": team["priority"],
        "flags": flags,
        "grp_tres": grp_tres,
        "grp_tres_mins": grp_tres_mins,
        "preempt": team["preempts"],
        "preempt_mode": team["preempt_mode"] if team["preempted_by"] else "cluster",
        "preempt_exempt_time": format_time(team["min_runtime_s"]),
    }


def _tres(cluster_types):
    return ["gres/gpu"] + ["gres/gpu:%s" % gpu for gpu in cluster_types]


def _slurm_conf(teams, cluster_types, qos_weight, reset, problems, var, accounting_tres=True, fair=None):
    conf = {
        "AccountingStorageEnforce": "associations,limits,qos,safe",
        "PriorityType": "priority/multifactor",
        "PriorityWeightQOS": qos_weight,
    }
    fair = fair or {}
    for key in ("PriorityWeightFairshare", "PriorityWeightAge", "PriorityCalcPeriod", "PriorityDecayHalfLife"):
        if fair.get(key) is not None:
            conf[key] = fair[key]
    if accounting_tres:
        conf["AccountingStorageTRES"] = ",".join(_tres(cluster_types))
    if any(team["preempts"] for team in teams.values()):
        conf.update({"PreemptType": "preempt/qos", "PreemptMode": "REQUEUE", "JobRequeue": 1})
    if reset == "decay":
        periods = sorted(set(t["period"] for t in teams.values() if t["period"]))
        if len(periods) > 1:
            problems.items.append("%s: the decay reset method resets every association on one cluster-wide period, but "
                                  "the teams use several (%s); use the timer method" % (var, ", ".join(periods)))
        elif periods:
            if fair.get("PriorityDecayHalfLife") not in (None, 0):
                problems.items.append("%s: the decay reset method sets PriorityDecayHalfLife=0 (usage is only reset, "
                                      "never decayed), but the decay half-life is %r: leave it unset with "
                                      "reset method decay" % (var, fair["PriorityDecayHalfLife"]))
            conf.update({"PriorityDecayHalfLife": 0, "PriorityUsageResetPeriod": RESET_PERIODS[periods[0]]})
    return conf


def _billing_partitions(partitions, offpeak, var, problems):
    """``partitions`` (the slurm_partitions list) with GRES/gpu billing on each, and the off-peak partition added."""
    if not isinstance(partitions, (list, tuple)) or not all(isinstance(p, dict) and p.get("name") for p in partitions):
        problems.items.append("the partitions are %r: give the slurm_partitions list ({name, groups, ...})"
                              % (partitions,))
        return None
    own = "GRES/gpu=%d" % BILLING_PER_GPU
    cheap = "GRES/gpu=%d" % offpeak["billing_per_gpu"]

    def billing(part):
        return next((str(v) for k, v in (part.get("extra") or {}).items() if str(k).lower() == "tresbillingweights"),
                    None)
    # The model's own output given back (slurm_partitions set from it): the same result again.
    partitions = [p for p in partitions if not (str(p["name"]) == offpeak["partition"] and billing(p) == cheap)]
    names = [str(p["name"]) for p in partitions]
    base = offpeak["base_partition"] or next((str(p["name"]) for p in partitions if p.get("default")), None) \
        or (names[0] if names else None)
    if base not in names:
        problems.items.append("%s.base_partition is %r: the off-peak partition copies the nodes of one of the "
                              "partitions (%s)%s" % (var, base, ", ".join(names) or "none", did_you_mean(base or "", names)))
        return None
    if offpeak["partition"] in names:
        problems.items.append("%s.partition is %r, which slurm_partitions already has: the off-peak partition is "
                              "added by the team model" % (var, offpeak["partition"]))
        return None
    result = []
    for part in partitions:
        extra = dict((k, v) for k, v in (part.get("extra") or {}).items()
                     if not (str(k).lower() == "tresbillingweights" and str(v) == own))
        if any(str(k).lower() == "tresbillingweights" for k in extra):
            problems.items.append("partition %s sets TRESBillingWeights itself: with off-peak pricing the team model "
                                  "sets it on every partition (budgets are counted in billing)" % part["name"])
        extra["TRESBillingWeights"] = own
        result.append(dict(part, extra=extra))
    copy = dict(partitions[names.index(base)])
    copy.update({"name": offpeak["partition"], "default": False})
    extra = dict((k, v) for k, v in (copy.get("extra") or {}).items() if str(k).lower() not in ("state", "default"))
    # Closed until the timer opens it: a restarted slurmctld never bills at the off-peak rate by mistake.
    extra.update({"TRESBillingWeights": cheap, "State": "DOWN"})
    copy["extra"] = extra
    result.append(copy)
    return result


def kubernetes_limit(team):
    """(GPUs at once on Kubernetes, the key that sets it): kubernetes_max_concurrent, else max_concurrent."""
    if team["kubernetes_max_concurrent"] is not None:
        return team["kubernetes_max_concurrent"], "kubernetes_max_concurrent"
    return team["max_concurrent"], "max_concurrent"


def _kubernetes_capacity(cluster, cluster_types, where, problems, types_var="team_quota_gpu_types"):
    """GPUs per Kueue flavor of the Kubernetes GPU nodes (``{nodes: {node: {GPU type: count}}}``), or None."""
    try:
        nodes, _partitions = _check_cluster_shape(cluster, where)
    except ValueError as exc:
        problems.items.append(str(exc))
        return None
    totals = {}
    for counts in nodes.values():
        for gpu, count in counts.items():
            totals[gpu] = totals.get(gpu, 0) + count
    if not cluster_types:
        return {"gpu": sum(totals.values())}
    for gpu in sorted(set(totals) - set(cluster_types)):
        problems.items.append("%s is [%s], but %s have %d GPU(s) of type '%s': list every type the Kubernetes GPU "
                              "nodes have, so that each has a Kueue flavor"
                              % (types_var, ", ".join(cluster_types), where, totals[gpu], gpu or "untyped"))
    return dict(("gpu-%s" % gpu, totals.get(gpu, 0)) for gpu in cluster_types)


def _kubernetes_teams(teams, flavors_of, capacity, var, where, problems):
    """Check what Kueue can carry of the teams (with the Kubernetes GPU nodes' ``capacity``); return those it runs.

    A team's GPUs at once must fit the GPUs of its flavors there. Kueue preempts by priority (a borrowing workload
    preempts lower-priority ones up to a threshold), so the teams a team preempts in Slurm must be exactly those on
    Kubernetes whose priority is lower than its own and at most the highest of theirs.
    """
    on = [t for t in teams if kubernetes_limit(t)[0] != 0]
    for team in on:
        limit, key = kubernetes_limit(team)
        reach = sum(capacity.get(flavor, 0) for flavor in flavors_of(team))
        if limit is not None and limit > reach:
            problems.items.append(
                "%s.%s.%s is %d, more than the %d GPUs %son %s: Kueue would admit work that never gets a GPU "
                "(set kubernetes_max_concurrent for the Kubernetes side; 0: no Kubernetes queue for the team)"
                % (var, team["name"], key, limit, reach,
                   "of its GPU types (%s) " % ", ".join(team["gpu_types"]) if team["gpu_types"] else "", where))
        elif limit is None and reach == 0:
            problems.items.append("%s.%s reaches no GPU on %s (its flavors: %s): set kubernetes_max_concurrent: 0 "
                                  "to leave it off Kubernetes" % (var, team["name"], where, ", ".join(flavors_of(team))))
    names = set(t["name"] for t in on)
    priority = dict((t["name"], t["priority"]) for t in on)
    for team in on:
        victims = [v for v in team["preempts"] if v in names]
        for victim in victims:
            if priority[victim] >= team["priority"]:
                problems.items.append(
                    "%s.%s preempts %s in Slurm, but its priority %d is not above %s's %d: Kueue preempts only "
                    "lower-priority workloads (raise %s.%s.priority)"
                    % (var, team["name"], victim, team["priority"], victim, priority[victim], var, team["name"]))
        if not victims:
            continue
        threshold = max(priority[v] for v in victims)
        for other in sorted(names - set(victims) - set([team["name"]])):
            if priority[other] <= threshold and priority[other] < team["priority"]:
                problems.items.append(
                    "%s.%s preempts %s in Slurm but not %s, which Kueue cannot express: %s's priority %d is not above "
                    "%d (%s), so %s's workloads could preempt it too (give %s a priority above %d, or list it in "
                    "%s.%s.can_preempt)" % (var, team["name"], ", ".join(victims), other, other, priority[other],
                                            threshold, ", ".join(victims), team["name"], other, threshold, var,
                                            team["name"]))
    return on


def _replicas(replicas, cluster_types, variable, problems):
    """{flavor: nvidia.com/gpu the device plugin advertises per physical GPU} from {GPU type: replicas}."""
    if not replicas:
        return {}
    if not isinstance(replicas, dict):
        problems.items.append("%s is %r: a mapping of GPU type to replicas per GPU" % (variable, replicas))
        return {}
    out = {}
    for gpu, count in sorted(replicas.items(), key=lambda item: str(item[0])):
        if not _is_int(count) or count < 1:
            problems.items.append("%s.%s is %r: a whole number of replicas per GPU, at least 1" % (variable, gpu, count))
        elif cluster_types and gpu in cluster_types:
            out["gpu-%s" % gpu] = count
        elif cluster_types:
            # keyed by GPU model (gpu_operator_gpu_model): one the quotas do not name would go uncounted
            problems.items.append("%s time-slices %s, which is no GPU type of the quotas (%s): its slices cannot be "
                                  "counted; name the model as the type (gpu_operator_gpu_model) or the type as the "
                                  "model" % (variable, gpu, ", ".join(cluster_types)))
        else:
            problems.items.append("%s time-slices %s, but the quotas name no GPU types (team_quota_gpu_types): the "
                                  "slices of one type cannot be counted apart" % (variable, gpu))
    return out


def _kubernetes(teams, cluster_types, flavor_label, cohort, kubernetes_cluster=None, var="team_quota_teams",
                where="the Kubernetes GPU nodes", problems=None, types_var="team_quota_gpu_types",
                replicas=None, replicas_var="gpu_operator_time_slicing"):
    """Namespaces, ResourceQuotas and Kueue objects that mean what the Slurm QOS mean.

    All GPUs of the Kubernetes GPU nodes are one pool, the Cohort's own nominalQuota (per flavor); each team's
    ClusterQueue has nominalQuota 0 and borrowingLimit = its GPUs at once (Slurm's GrpTRES gres/gpu), so idle GPUs
    go to whoever asks, as in Slurm, and no team holds GPUs it does not use. A team that preempts others in Slurm
    gets borrowWithinCohort LowerPriority with maxPriorityThreshold = the highest priority of the teams it preempts
    (its workloads all borrow, so this is what takes GPUs from their running work); the others never preempt.
    Without ``kubernetes_cluster`` (the Kubernetes GPU nodes' GPUs) the Cohort has no quota: Kueue admits nothing.
    Quotas count what the device plugin advertises: with ``replicas`` ({GPU type: time-slicing replicas per GPU,
    the GPU Operator's}) a flavor's pool, each team's borrowing limit on it and its ResourceQuota are the physical
    GPUs times the replicas; the checks against the nodes stay in physical GPUs.
    """
    problems = problems if problems is not None else _Problems()
    per_gpu = _replicas(replicas, cluster_types, replicas_var, problems)
    labels = dict(MANAGED_LABELS)
    objects = []
    flavors = ["gpu-%s" % gpu for gpu in cluster_types] or ["gpu"]

    def flavors_of(team):
        if cluster_types and team["gpu_types"]:
            return ["gpu-%s" % gpu for gpu in cluster_types if gpu in team["gpu_types"]]
        return flavors

    ordered = sorted(teams.values(), key=lambda t: t["name"])
    capacity = None
    if kubernetes_cluster is not None:
        capacity = _kubernetes_capacity(kubernetes_cluster, cluster_types, where, problems, types_var)
    on = _kubernetes_teams(ordered, flavors_of, capacity, var, where, problems) if capacity is not None else \
        [t for t in ordered if kubernetes_limit(t)[0] != 0]
    for gpu in cluster_types or [None]:
        flavor = {"apiVersion": KUEUE_API, "kind": "ResourceFlavor",
                  "metadata": {"name": "gpu-%s" % gpu if gpu else "gpu", "labels": dict(labels)}, "spec": {}}
        if gpu:
            flavor["spec"]["nodeLabels"] = {flavor_label: gpu}
        objects.append(flavor)
    pool = {"apiVersion": KUEUE_API, "kind": "Cohort", "metadata": {"name": cohort, "labels": dict(labels)},
            "spec": {}}
    if capacity is not None:
        pool["spec"]["resourceGroups"] = [{
            "coveredResources": [GPU_RESOURCE],
            "flavors": [{"name": flavor,
                         "resources": [{"name": GPU_RESOURCE,
                                        "nominalQuota": str(capacity.get(flavor, 0) * per_gpu.get(flavor, 1))}]}
                        for flavor in flavors]}]
    objects.append(pool)
    names = set(t["name"] for t in on)
    priority = dict((t["name"], t["priority"]) for t in on)
    for team in on:
        namespace = team["kubernetes_namespace"]
        limit = kubernetes_limit(team)[0]
        team_labels = dict(labels, **{"gpucluster.ops/team": team["name"]})
        annotations = {"gpucluster.ops/priority": str(team["priority"])}
        if team["gpu_hours"] is not None:
            # Neither ResourceQuota nor Kueue meters GPU-hours: the budget is carried as information only.
            annotations["gpucluster.ops/gpu-hours"] = "%s/%s" % (team["gpu_hours"], team["period"])
        if team["min_runtime_s"]:
            # Kueue has no minimum run time before preemption either: information only.
            annotations["gpucluster.ops/min-runtime-before-preemption"] = format_time(team["min_runtime_s"])
        objects.append({"apiVersion": "v1", "kind": "Namespace",
                        "metadata": {"name": namespace, "labels": dict(team_labels)}})
        if limit is not None:
            objects.append({"apiVersion": "v1", "kind": "ResourceQuota",
                            "metadata": {"name": "gpu-quota", "namespace": namespace, "labels": dict(team_labels),
                                         "annotations": dict(annotations)},
                            "spec": {"hard": {"requests." + GPU_RESOURCE: str(
                                limit * max([per_gpu.get(f, 1) for f in flavors_of(team)] or [1]))}}})

        # Quantities as strings, the form Kueue's webhook writes back (a number here would be a change at every run).
        def resource(flavor, limit=limit):
            quota = {"name": GPU_RESOURCE, "nominalQuota": "0"}
            if limit is not None:
                quota["borrowingLimit"] = str(limit * per_gpu.get(flavor, 1))
            return quota
        victims = [v for v in team["preempts"] if v in names]
        preemption = {"withinClusterQueue": "Never", "reclaimWithinCohort": "Never",
                      "borrowWithinCohort": {"policy": "Never"}}
        if victims:
            preemption = {"withinClusterQueue": "Never", "reclaimWithinCohort": "Any",
                          "borrowWithinCohort": {"policy": "LowerPriority",
                                                 "maxPriorityThreshold": max(priority[v] for v in victims)}}
        objects.append({
            "apiVersion": KUEUE_API, "kind": "ClusterQueue",
            "metadata": {"name": team["name"], "labels": dict(team_labels), "annotations": dict(annotations)},
            "spec": {
                "cohortName": cohort,
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "queueingStrategy": "BestEffortFIFO",
                "resourceGroups": [{
                    "coveredResources": [GPU_RESOURCE],
                    "flavors": [{"name": flavor, "resources": [resource(flavor)]} for flavor in flavors_of(team)],
                }],
                "preemption": preemption,
            },
        })
        objects.append({"apiVersion": KUEUE_API, "kind": "LocalQueue",
                        "metadata": {"name": team["name"], "namespace": namespace, "labels": dict(team_labels)},
                        "spec": {"clusterQueue": team["name"]}})
        objects.append({"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass",
                        "metadata": {"name": "team-%s" % team["name"].replace("_", "-"), "labels": dict(team_labels)},
                        "value": team["priority"],
                        "description": "Priority of team %s (Slurm QOS priority)" % team["name"]})
    return objects


def build(teams, priorities=None, default_priority="medium", gpu_types=None, qos_weight=10000, reset="timer",
          variable="team_quota_teams", flavor_label="gpucluster.ops/gpu-type", cohort="gpucluster",
          accounting_tres=True, cluster=None, gpu_types_variable="team_quota_gpu_types", cluster_name="the cluster",
          kubernetes_cluster=None, kubernetes_name="the Kubernetes GPU nodes", fairshare_weight=DEFAULT_FAIRSHARE_WEIGHT,
          age_weight=DEFAULT_AGE_WEIGHT,
          calc_period=None, decay_half_life=None, offpeak=None, partitions=None, prices=None, currency="EUR",
          offpeak_variable="team_quota_offpeak", prices_variable="team_quota_gpu_prices", kubernetes_replicas=None,
          kubernetes_replicas_variable="gpu_operator_time_slicing"):
    """Validate ``teams`` (the inventory mapping) and return the normalised model with its Slurm and Kubernetes forms.

    With ``cluster`` (see check_cluster) the teams are checked against the cluster's nodes and partitions too, and
    the model has ``warnings``. With ``kubernetes_cluster`` (the same shape, of the Kubernetes GPU nodes) the
    Kubernetes objects get the Cohort's GPUs and the teams are checked against them (see _kubernetes), counted as
    the device plugin advertises them with ``kubernetes_replicas`` (GPU type to time-slicing replicas). Raises
    ``TeamQuotaError`` listing every problem.

    Fair share: ``fairshare_weight``, ``age_weight``, ``calc_period`` and ``decay_half_life`` become
    PriorityWeightFairshare, PriorityWeightAge, PriorityCalcPeriod and PriorityDecayHalfLife (None: left out); each
    team's ``shares`` (default DEFAULT_SHARES) is its account's Fairshare=.
    Off-peak pricing (``offpeak``: {factor, open, close, partition, base_partition}): budgets are counted in billing
    (GrpTRESMins=billing=GPU-minutes x BILLING_PER_GPU), every partition of ``partitions`` bills BILLING_PER_GPU per
    GPU and an off-peak partition on the nodes of ``base_partition`` bills factor x that; the model's
    ``slurm_partitions`` is that list (for the slurm role) and ``offpeak`` the window for the timers.
    ``prices``: price of a GPU-hour per GPU type (``currency``), for the usage report's cost.
    """
    problems = _Problems()
    if teams is None:
        teams = {}
    if not isinstance(teams, dict):
        raise TeamQuotaError(["%s is %r: it is a mapping of team name to its quota" % (variable, teams)])
    levels = _levels(priorities)
    if reset not in RESET_METHODS:
        problems.items.append("reset method is %r: use %s" % (reset, " or ".join(RESET_METHODS)))
    if not _is_int(qos_weight) or qos_weight < 0:
        problems.items.append("PriorityWeightQOS is %r: use a non-negative whole number" % (qos_weight,))
    fair = {"PriorityWeightFairshare": _weight(fairshare_weight, "team_quota_priority_weight_fairshare "
                                                                 "(PriorityWeightFairshare)", problems),
            "PriorityWeightAge": _weight(age_weight, "team_quota_priority_weight_age (PriorityWeightAge)", problems),
            "PriorityCalcPeriod": _interval(calc_period, "team_quota_priority_calc_period (PriorityCalcPeriod)",
                                            problems, minutes=True),
            "PriorityDecayHalfLife": _interval(decay_half_life, "team_quota_priority_decay_half_life "
                                                                "(PriorityDecayHalfLife)", problems)}
    window = _offpeak(offpeak, offpeak_variable, problems)
    normal = {}
    for name in sorted(teams, key=str):
        team = _team(name, teams[name], levels, default_priority, variable, problems)
        if team is not None:
            normal[name] = team
    _preemption(normal, variable, problems)
    users = _users(normal, variable, problems)
    cluster_types = _gpu_types(normal, gpu_types, problems, variable)
    conf = _slurm_conf(normal, cluster_types, qos_weight, reset, problems, variable, accounting_tres, fair)
    price_list = _prices(prices, currency, cluster_types, prices_variable, problems)
    slurm_partitions = None
    if window is not None and partitions is not None and window["billing_per_gpu"] is not None:
        slurm_partitions = _billing_partitions(partitions, window, offpeak_variable, problems)
    warnings = []
    if cluster is not None:
        warnings = check_cluster(normal, cluster_types, cluster, variable, gpu_types_variable, problems, cluster_name)
    kubernetes = _kubernetes(normal, cluster_types, flavor_label, cohort, kubernetes_cluster, variable,
                             kubernetes_name, problems, gpu_types_variable, kubernetes_replicas,
                             kubernetes_replicas_variable)
    if problems.items:
        raise TeamQuotaError(problems.items)
    ordered = [normal[name] for name in sorted(normal)]
    for team in ordered:
        # What the QOS counts the budget in, and how many of those units one GPU-minute at the full rate is.
        team["budget_tres"] = "billing" if window is not None else "gres/gpu"
        team["budget_units_per_gpu_minute"] = BILLING_PER_GPU if window is not None else 1
    reset_groups = {}
    if reset == "timer":
        for team in ordered:
            if team["period"]:
                reset_groups.setdefault(team["period"], []).append(team["name"])
    return {
        "teams": ordered,
        "users": users,
        "slurm": {
            "qos": [_qos(team, cluster_types, reset, window is not None) for team in ordered],
            "accounts": [{"name": t["name"], "description": t["description"], "organization": ORGANIZATION,
                          "parent": "root", "qos": [t["name"]], "default_qos": t["name"], "fairshare": t["shares"]}
                         for t in ordered],
            "users": [{"name": u["name"], "default_account": u["default_account"],
                       "associations": u["associations"]} for u in users],
        },
        "slurm_conf": conf,
        "tres": _tres(cluster_types),
        "reset": reset_groups,
        "kubernetes": kubernetes,
        "warnings": warnings,
        "offpeak": window,
        "slurm_partitions": slurm_partitions,
        "prices": price_list,
        "currency": currency,
    }
