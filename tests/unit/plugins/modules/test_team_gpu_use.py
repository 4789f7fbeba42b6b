"""team_gpu_use's main() through the module harness against a Prometheus query API on loopback: the teams' held,
busy and idle GPU-hours (the model of gpu-job usage --team, tested in test_gpu_use.py), the same in check mode, a
partial window a warning, and every way Prometheus can fail the task a failure naming it."""

import fake_prometheus
import pytest

from ansible_collections.gpucluster.ops.plugins.modules import team_gpu_use
from ansible_collections.gpucluster.ops.tests.unit.plugins.module_harness import run_module


class _Prometheus(object):
    """Answers: development's 3 GPUs idle for an hour; Slurm known for ``known`` of 60 steps."""
    known = "60"
    queries = []

    @classmethod
    def answer(cls, _path, params):
        query = params["query"][0]
        cls.queries.append(query)
        result = []
        if "account_gpus_allocated" in query or "account_gpus_idle" in query:
            result = [{"metric": {"account": "development"}, "value": [0, "180"]}]
        if query.startswith("count_over_time((gpucluster:slurm_jobs_known"):
            result = [{"metric": {}, "value": [0, cls.known]}]
        if query.startswith("count_over_time(vector(1)"):
            result = [{"metric": {}, "value": [0, "60"]}]
        return 200, fake_prometheus.vector(result)


@pytest.fixture(name="url")
def _url():
    _Prometheus.queries, _Prometheus.known = [], "60"
    with fake_prometheus.serving(_Prometheus.answer) as url:
        yield url


@pytest.mark.parametrize("check", [False, True], ids=["run", "check-mode"])
def test_the_teams_held_and_idle_gpu_hours(url, check):
    result = run_module(team_gpu_use, {"prometheus_url": url, "teams": ["development", "research"],
                                       "since": "2026-12-01"}, check=check)
    assert not result["failed"] and not result["changed"], result
    assert result["gpu_use"]["teams"]["development"]["idle_gpu_hours"] == 3.0
    assert result["gpu_use"]["teams"]["research"]["allocated_gpu_hours"] == 0.0
    assert result["gpu_use"]["coverage"] == 1.0 and result["gpu_use"]["complete"] and "warnings" not in result
    assert result["lines"][0].startswith("GPUs held by Slurm jobs from 2026-12-01 00:00:00 to ")
    assert not [q for q in _Prometheus.queries if "user=" in q]   # an administrator's report: every user's jobs
    assert all('account=~`development|research`' in q for q in _Prometheus.queries if "account" in q)


def test_a_partial_window_is_a_warning(url):
    _Prometheus.known = "30"
    result = run_module(team_gpu_use, {"prometheus_url": url, "since": "2026-12-01T08:00"})
    assert result["gpu_use"]["coverage"] == 0.5
    assert result["warnings"] == ["the GPU use is partial: Prometheus knew Slurm's jobs for 50% of the window"]


@pytest.mark.parametrize("args,message", [
    ({"since": "yesterday"}, "since is 'yesterday'"),
    ({"since": "2999-01-01"}, "that is not before now"),
    ({"prometheus_url": "http://127.0.0.1:9"}, "cannot reach Prometheus at http://127.0.0.1:9"),
])
def test_failures_name_what_failed(url, args, message):
    result = run_module(team_gpu_use, dict({"prometheus_url": url}, **args))
    assert result["failed"] and result["msg"].startswith("GPU use unknown: ") and message in result["msg"], result
