# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: team_quotas
short_description: Validate the team quota model and render its Slurm, slurm.conf and Kubernetes forms
version_added: 0.1.0
author: gpucluster.ops developers (@gpucluster)
description:
  - Takes the inventory mapping of teams (C(team_quota_teams)) and checks all of it, listing every problem with the
    variable path and the value (C(20000/montly), negative numbers, unknown priority names, unknown keys, a team
    preempting itself, preemption in a circle, a user in two teams without a default, a GPU type the cluster does
    not have).
  - "Each team is a mapping with the keys C(description), C(gpu_hours) (C(<hours>/month), C(/week) or C(/day)),
    C(max_concurrent) (GPUs at once), C(priority) (a level name such as C(high) or a number), C(can_preempt) and
    C(preemptible_by) (team names), C(min_runtime_before_preemption) (C(30m), C(2h), C(00:30:00); a bare number but
    C(0) is refused because Slurm reads it as minutes), C(preempt_mode) (C(requeue) or C(cancel)), C(members) (user names,
    or C({name, default}) for a user in several teams), C(gpu_types), C(partitions), C(kubernetes_namespace) and
    C(shares) (fair-share shares, the account's C(Fairshare=); default 1: equal shares, since C(max_concurrent) is a
    ceiling and not an entitlement)."
  - "Returns a dictionary: C(teams) (normalised, sorted by name), C(users), C(slurm) (C(qos), C(accounts), C(users)
    in the form the P(gpucluster.ops.slurm_qos#module) and P(gpucluster.ops.slurm_account#module) modules take),
    C(slurm_conf) (the slurm.conf keys quotas need, for the slurm role's C(slurm_conf_extra)), C(reset) (QOS names
    per budget period, for the reset timers) and C(kubernetes) (Namespace, ResourceQuota and Kueue ResourceFlavor,
    Cohort, ClusterQueue, LocalQueue and WorkloadPriorityClass objects, Kueue's storage version
    C(kueue.x-k8s.io/v1beta2))."
  - "On Kubernetes the GPUs of the Kubernetes GPU nodes are one pool, the Kueue Cohort's own C(nominalQuota) per
    GPU type; each team's ClusterQueue has C(nominalQuota) 0 and C(borrowingLimit) = its GPUs at once (the QOS's
    C(GrpTRES)), so idle GPUs go to whoever asks, as in Slurm. A team that preempts others in Slurm preempts their
    running work in Kueue (C(borrowWithinCohort) C(LowerPriority) with C(maxPriorityThreshold) the highest priority
    of the teams it preempts). GPU-hour budgets and the minimum run time before preemption, which Kueue lacks, are
    annotations only."
  - A team's QOS gets C(GrpTRES=gres/gpu=<max_concurrent>), C(GrpTRESMins=gres/gpu=<hours x 60>), its priority,
    C(Flags=DenyOnLimit,NoDecay), C(Preempt) (the teams it can preempt), and, when another team can preempt it,
    C(PreemptMode) and C(PreemptExemptTime). Its account has that QOS as the only and default QOS.
  - A GPU type restriction sets every other cluster GPU type's limit to 0 (C(gres/gpu:h100=0)); Slurm then refuses
    jobs that ask for another type by name. Slurm does not apply typed limits to jobs that ask for C(gpu:N)
    without a type, so put GPU types in partitions and use C(partitions) where the restriction must be airtight.
positional: gpu_types
options:
  _input:
    description: The teams, a mapping of team name to its quota.
    type: dict
    required: true
  gpu_types:
    description:
      - The cluster's GPU types (C(a100), C(h100)); each becomes a typed TRES in C(AccountingStorageTRES).
      - Needed when a team restricts GPU types.
    type: list
    elements: str
    default: []
  priorities:
    description: Priority level names and their QOS priority numbers.
    type: dict
    default: {low: 100, medium: 500, high: 1000}
  default_priority:
    description: Priority of a team that does not set one.
    type: raw
    default: medium
  qos_weight:
    description: C(PriorityWeightQOS) in the returned slurm.conf keys.
    type: int
    default: 10000
  reset:
    description:
      - How budgets start again each period. C(timer) (default) keeps usage with C(NoDecay) and returns the QOS per
        period for reset timers (C(sacctmgr modify qos ... set RawUsage=0)).
      - C(decay) leaves out C(NoDecay) and returns C(PriorityDecayHalfLife=0) and C(PriorityUsageResetPeriod);
        this resets every association's usage cluster-wide (fairshare too) and needs one period for all teams.
    type: str
    choices: [timer, decay]
    default: timer
  variable:
    description: The variable name that error messages use for the input.
    type: str
    default: team_quota_teams
  flavor_label:
    description: Node label that Kueue ResourceFlavors select a GPU type by.
    type: str
    default: gpucluster.ops/gpu-type
  cohort:
    description: Kueue cohort all team ClusterQueues join.
    type: str
    default: gpucluster
  accounting_tres:
    description:
      - Whether C(slurm_conf) carries C(AccountingStorageTRES). Set false when the slurm.conf writer computes that
        key itself (the gpucluster.ops.slurm role does, from the GPU types of its node lines; give it C(tres) as
        C(slurm_accounting_tres_extra) instead), so that C(slurm_conf_extra) does not replace it.
    type: bool
    default: true
  cluster:
    description:
      - "The cluster the teams run on, as the P(gpucluster.ops.slurm_cluster_gpus#filter) filter returns it
        (C({nodes: {node: {GPU type: count}}, partitions: {name: [nodes]}})). When given, the teams are checked
        against it too. A team reaches the GPUs of its C(gpu_types) (all types without) on the nodes of its
        C(partitions) (all nodes without). Refused are a C(max_concurrent) above the GPUs the team reaches, a
        C(gpu_hours) above what those GPUs deliver in its period at the longest (GPUs x 24 h x 31 days a month,
        x 7 days a week, x 1 a day), a partition no partition of the cluster has, a GPU type (of O(gpu_types) or of
        a team) no node has, and a GPU type the nodes have that a non-empty O(gpu_types) leaves out."
      - "Budgets that together exceed what the whole cluster delivers are oversubscription, which is normal: they
        are returned in C(warnings) and shown as a warning, not refused."
    type: dict
  gpu_types_variable:
    description: The variable name that error messages use for O(gpu_types).
    type: str
    default: team_quota_gpu_types
  cluster_name:
    description: How error messages name the cluster, for example the inventory group of its compute nodes.
    type: str
    default: the cluster
  kubernetes_cluster:
    description:
      - "The Kubernetes GPU nodes in the shape of O(cluster) (C({nodes: {node: {GPU type: count}}})), for the Kueue
        Cohort's GPUs. When given, the Kubernetes side is checked too: a team's GPUs at once (C(kubernetes_max_concurrent),
        else C(max_concurrent)) above the GPUs of its types there, a GPU type of the nodes that O(gpu_types) leaves
        out, and preemption that Kueue cannot express by priority (a team that preempts one of two teams of lower
        priority but not the other, or one of equal or higher priority) are refused."
      - Without it the Cohort has no quota, so Kueue admits nothing.
    type: dict
  kubernetes_name:
    description: How error messages name the Kubernetes GPU nodes, for example their inventory group.
    type: str
    default: the Kubernetes GPU nodes
  kubernetes_replicas:
    description:
      - GPU type to the C(nvidia.com/gpu) the device plugin advertises per physical GPU (the GPU Operator's
        time-slicing replicas, C(gpu_operator_time_slicing)). Quotas count what is advertised; the Cohort's pool of
        the type, each team's borrowing limit on it and its ResourceQuota are the physical GPUs times the replicas.
        The checks against the nodes stay in physical GPUs. Types must be of O(gpu_types).
    type: dict
  fairshare_weight:
    description:
      - C(PriorityWeightFairshare) in the returned slurm.conf keys (the weight of a job's fair-share factor, from the
        team's C(shares) and its use); null leaves the key out (Slurm's default 0), 0 turns fair share off.
    type: int
    default: 10000
  age_weight:
    description: C(PriorityWeightAge) in the returned slurm.conf keys; null leaves it out.
    type: int
    default: 1000
  calc_period:
    description:
      - C(PriorityCalcPeriod) (a duration such as C(5m)), how often slurmctld recalculates usage and priorities;
        null leaves it out (Slurm's 5 minutes).
    type: raw
  decay_half_life:
    description:
      - C(PriorityDecayHalfLife) (a duration such as C(7d)); null leaves it out (Slurm's 7 days). With O(reset=decay)
        the model sets it to 0 itself and refuses any other value.
    type: raw
  offpeak:
    description:
      - "Off-peak pricing: C({factor, open, close, partition, base_partition}). C(factor) (above 0, at most 1, in steps
        of 0.001) is what an off-peak GPU-hour counts against a team's budget; C(open) and C(close) are systemd
        OnCalendar times at which the off-peak partition (C(partition), default C(offpeak)) is opened and closed;
        it has the nodes of C(base_partition) (default: the default partition of O(partitions))."
      - "With it, budgets are counted in billing: each QOS gets C(GrpTRESMins=billing=<GPU-minutes x 1000>), each
        partition of O(partitions) C(TRESBillingWeights=GRES/gpu=1000) and the off-peak partition
        C(GRES/gpu=<factor x 1000>) and C(State=DOWN) until the timer opens it; C(slurm_partitions) is that list."
    type: dict
  partitions:
    description: The slurm_partitions list that O(offpeak) adds billing weights and the off-peak partition to.
    type: list
    elements: dict
  prices:
    description:
      - "Price of one GPU-hour per GPU type (C({h100: 2.5, a100: 1.2}); the key C('') prices GPUs without a type), for
        the cost in the usage reports. A negative price is refused."
    type: dict
  currency:
    description: The currency of O(prices), as the reports print it.
    type: str
    default: EUR
  errors:
    description:
      - C(raise) fails with every problem listed; C(return) returns C({errors, ...}) instead, C(errors) being the
        list of problems (empty when the model is good), so that a role can fail with its own message.
    type: str
    choices: [raise, return]
    default: raise
"""

EXAMPLES = r"""
# group_vars/all.yml
# team_quota_teams:
#   research:
#     gpu_hours: 20000/month
#     max_concurrent: 16
#     priority: high
#     can_preempt: [development]
#     members: [alice, {name: carol, default: true}]
#   development:
#     gpu_hours: 5000/month
#     max_concurrent: 8
#     priority: medium
#     min_runtime_before_preemption: 30m
#     members: [bob, carol]

- name: Hand the slurm.conf keys that quotas need to the slurm role
  ansible.builtin.set_fact:
    slurm_conf_extra: "{{ (team_quota_teams | gpucluster.ops.team_quotas(['a100'], accounting_tres=false)).slurm_conf }}"
    slurm_accounting_tres_extra: "{{ (team_quota_teams | gpucluster.ops.team_quotas(['a100'])).tres }}"

- name: Show the QOS of each team
  ansible.builtin.debug:
    msg: "{{ (team_quota_teams | gpucluster.ops.team_quotas).slurm.qos }}"
"""

RETURN = r"""
_value:
  description: The normalised model and its rendered forms (with O(errors=return), also C(errors)).
  type: dict
  contains:
    teams:
      description: Normalised teams (C(gpu_minutes), C(priority) as a number, C(preempts), C(preempted_by), C(min_runtime_s), ...).
      type: list
      elements: dict
    users:
      description: Each member with C(default_account), C(accounts) and C(associations).
      type: list
      elements: dict
    slurm:
      description: C(qos), C(accounts) and C(users) for the slurm_qos and slurm_account modules.
      type: dict
    tres:
      description: The TRES that the limits use (C(gres/gpu) and C(gres/gpu:<type>) of every cluster GPU type).
      type: list
      elements: str
    slurm_conf:
      description: slurm.conf keys and values the quotas need.
      type: dict
      sample: {AccountingStorageTRES: gres/gpu, AccountingStorageEnforce: "associations,limits,qos,safe"}
    reset:
      description: QOS names per budget period (C(month), C(week), C(day)) for the reset timers.
      type: dict
    kubernetes:
      description: Kubernetes and Kueue objects, one mapping per object.
      type: list
      elements: dict
    warnings:
      description: With O(cluster), what is allowed but worth knowing (budgets that oversubscribe the cluster).
      type: list
      elements: str
    offpeak:
      description: The checked off-peak settings (C(factor), C(billing_per_gpu), C(open), C(close), C(partition),
        C(base_partition)), or null without off-peak pricing.
      type: dict
    slurm_partitions:
      description: With O(offpeak) and O(partitions), the partitions with billing weights and the off-peak one.
      type: list
      elements: dict
    prices:
      description: The checked prices per GPU-hour per GPU type.
      type: dict
    currency:
      description: The currency of the prices.
      type: str
"""

from ansible.errors import AnsibleFilterError
from ansible.utils.display import Display

from ansible_collections.gpucluster.ops.plugins.module_utils._team_quota_model import (
    DEFAULT_AGE_WEIGHT, DEFAULT_FAIRSHARE_WEIGHT, TeamQuotaError, build)


def team_quotas(teams, gpu_types=None, priorities=None, default_priority="medium", qos_weight=10000, reset="timer",
                variable="team_quota_teams", flavor_label="gpucluster.ops/gpu-type", cohort="gpucluster",
                accounting_tres=True, errors="raise", cluster=None, gpu_types_variable="team_quota_gpu_types",
                cluster_name="the cluster", kubernetes_cluster=None, kubernetes_name="the Kubernetes GPU nodes",
                fairshare_weight=DEFAULT_FAIRSHARE_WEIGHT, age_weight=DEFAULT_AGE_WEIGHT, calc_period=None, decay_half_life=None, offpeak=None,
                partitions=None, prices=None, currency="EUR", kubernetes_replicas=None):
    """Return the validated, normalised team model and its Slurm, slurm.conf and Kubernetes forms."""
    if errors not in ("raise", "return"):
        raise AnsibleFilterError("team_quotas: errors is %r: use 'raise' or 'return'" % (errors,))
    try:
        model = build(teams, priorities=priorities, default_priority=default_priority, gpu_types=gpu_types or [],
                      qos_weight=qos_weight, reset=reset, variable=variable, flavor_label=flavor_label, cohort=cohort,
                      accounting_tres=accounting_tres, cluster=cluster, gpu_types_variable=gpu_types_variable,
                      cluster_name=cluster_name, kubernetes_cluster=kubernetes_cluster,
                      kubernetes_name=kubernetes_name, fairshare_weight=fairshare_weight, age_weight=age_weight,
                      calc_period=calc_period, decay_half_life=decay_half_life, offpeak=offpeak,
                      partitions=partitions, prices=prices, currency=currency,
                      kubernetes_replicas=kubernetes_replicas)
    except TeamQuotaError as exc:
        if errors == "return":
            return {"errors": exc.problems}
        raise AnsibleFilterError("team_quotas: %d problem(s): %s" % (len(exc.problems), "; ".join(exc.problems)))
    for warning in model["warnings"]:
        Display().warning("team_quotas: %s" % warning)
    if errors == "return":
        model["errors"] = []
    return model


class FilterModule(object):
    """gpucluster.ops team_quotas filter."""

    def filters(self):
        return {"team_quotas": team_quotas}
