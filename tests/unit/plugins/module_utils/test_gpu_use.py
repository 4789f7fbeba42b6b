"""_gpu_use: the busy/idle report of the teams' held GPUs from Prometheus's recorded series (gpu-job usage --team and
the team_gpu_use module). The queries are checked for what they ask; the answers of a fake Prometheus on loopback
for what the report makes of them, including every way the answer can fail (unknown, never "no use")."""

import time

import fake_prometheus
import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _gpu_use

NOW = 1_800_000_000
HOUR = 3600


def answers(by_query):
    """A query function answering each of queries()'s names from ``by_query`` ({name: [(labels, value)]})."""
    asked = {}

    def query(url, expr, when):
        name = next(n for n, e in asked["queries"].items() if e == expr)
        return [{"metric": labels, "value": [when, str(value)]} for labels, value in by_query.get(name, [])]

    def bind(accounts, since, now, step, top=5):
        asked["queries"] = _gpu_use.queries(accounts, since, now, step, top)
        return asked["queries"]
    return query, bind


def test_the_queries_sum_the_recorded_series_over_the_window_at_the_step_while_slurm_was_known():
    found = _gpu_use.queries(["research", "dev.team"], NOW - 2 * HOUR, NOW, 60, top=3)
    known = "on() (gpucluster:slurm_jobs_known == 1)"
    assert found["account_allocated"] == (
        "sum by (account) (sum_over_time((gpucluster:account_gpus_allocated{account=~`research|dev\\.team`} and %s)"
        "[7200s:60s]))" % known)
    assert found["account_busy"].startswith("sum by (account) (sum_over_time((gpucluster:account_gpus_busy{")
    assert found["account_idle"].startswith("sum by (account) (sum_over_time((gpucluster:account_gpus_idle{")
    assert found["job_idle"].startswith("topk(3, sum by (jobid, account, user) (sum_over_time((gpucluster:job_gpus_idle{")
    # the allocated GPU-hours of the top jobs only, not of every job of the month
    assert found["job_allocated"].endswith(" and on(jobid) " + found["job_idle"])
    assert found["unmapped"] == "sum(sum_over_time((sum(slurm_job_gpus_unmapped) and %s)[7200s:60s]))" % known
    assert found["known"] == "count_over_time((gpucluster:slurm_jobs_known == 1)[7200s:60s])"
    assert found["steps"] == "count_over_time(vector(1)[7200s:60s])"
    assert "{" not in _gpu_use.queries([], NOW - HOUR, NOW, 60)["account_busy"]
    # a user's own jobs only (gpu-job usage --team)
    mine = _gpu_use.queries(["research"], NOW - HOUR, NOW, 60, user="alice")
    assert "gpucluster:job_gpus_idle{account=~`research`,user=`alice`}" in mine["job_idle"]
    assert "gpucluster:account_gpus_idle{account=~`research`}" in mine["account_idle"]


@pytest.mark.parametrize("accounts,since,step,message", [
    (["research"], NOW - 30, 60, "shorter than one step"),
    (["research"], NOW - HOUR, 0, "at least 1 s"),
    (['x"}) or vector(1'], NOW - HOUR, 60, "not one Slurm accepts"),
    (["research`} or vector(1) #"], NOW - HOUR, 60, "not one Slurm accepts"),
])
def test_bad_windows_and_names_are_refused_before_prometheus_is_asked(accounts, since, step, message):
    with pytest.raises(_gpu_use.GpuUseError, match=message):
        _gpu_use.queries(accounts, since, NOW, step)


def test_one_busy_and_one_idle_team_with_the_top_idle_job():
    # research: 2 GPUs busy for 2 h (240 GPU-minutes); development: 3 GPUs idle for 1 h (180), one job
    query, bind = answers({
        "account_allocated": [({"account": "research"}, 240), ({"account": "development"}, 180)],
        "account_busy": [({"account": "research"}, 240), ({"account": "development"}, 0)],
        "account_idle": [({"account": "research"}, 0), ({"account": "development"}, 180)],
        "job_idle": [({"jobid": "77", "account": "development", "user": "bob"}, 180)],
        "job_allocated": [({"jobid": "77", "account": "development", "user": "bob"}, 180),
                          ({"jobid": "76", "account": "research", "user": "alice"}, 240)],
        "known": [({}, 120)], "steps": [({}, 120)], "unmapped": []})
    asked = bind(["research", "development"], NOW - 2 * HOUR, NOW, 60)
    report = _gpu_use.gpu_use(dict((n, query("", e, NOW)) for n, e in asked.items()), ["research", "development"],
                              NOW - 2 * HOUR, NOW, 60)
    assert report["teams"] == {
        "research": {"allocated_gpu_hours": 4.0, "busy_gpu_hours": 4.0, "idle_gpu_hours": 0.0,
                     "unmeasured_gpu_hours": 0.0, "idle_share": 0.0},
        "development": {"allocated_gpu_hours": 3.0, "busy_gpu_hours": 0.0, "idle_gpu_hours": 3.0,
                        "unmeasured_gpu_hours": 0.0, "idle_share": 1.0}}
    assert report["top_idle_jobs"] == [{"jobid": "77", "team": "development", "user": "bob", "idle_gpu_hours": 3.0,
                                        "allocated_gpu_hours": 3.0, "idle_share": 1.0}]
    assert report["coverage"] == 1.0 and report["complete"] and report["unmapped_gpu_hours"] == 0
    lines = _gpu_use.render_lines(report, 10)
    assert lines[0] == ("GPUs held by Slurm jobs from %s to %s, busy at >= 10%% utilisation (Prometheus, every 60 s)"
                        % (time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(NOW - 2 * HOUR)),
                           time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(NOW))))
    assert lines[3].split() == ["development", "3.00", "0.00", "3.00", "100.0", "0.00"]
    assert lines[4].split() == ["research", "4.00", "4.00", "0.00", "0.0", "0.00"]
    assert "  job 77 of bob (development): 3.00 idle of 3.00 GPU-hours held" in lines
    assert not [line for line in lines if line.startswith(("partial", "unmeasured"))]


def test_a_team_with_no_jobs_is_zero_held_and_no_share_and_gpus_without_dcgm_are_unmeasured():
    query, bind = answers({"account_allocated": [({"account": "research"}, 60)],
                           "account_busy": [({"account": "research"}, 20)],
                           "account_idle": [({"account": "research"}, 10)], "known": [({}, 60)],
                           "steps": [({}, 60)], "unmapped": []})
    asked = bind(["research", "quiet"], NOW - HOUR, NOW, 60)
    report = _gpu_use.gpu_use(dict((n, query("", e, NOW)) for n, e in asked.items()), ["research", "quiet"],
                              NOW - HOUR, NOW, 60)
    assert report["teams"]["quiet"] == {"allocated_gpu_hours": 0.0, "busy_gpu_hours": 0.0, "idle_gpu_hours": 0.0,
                                        "unmeasured_gpu_hours": 0.0, "idle_share": None}
    assert report["teams"]["research"]["unmeasured_gpu_hours"] == 0.5
    lines = _gpu_use.render_lines(report, 10)
    assert lines[-1].startswith("unmeasured: GPUs held while DCGM gave no utilisation")


def _report(by_query, accounts=("research",), since=NOW - HOUR, step=60):
    query, bind = answers(by_query)
    asked = bind(list(accounts), since, NOW, step)
    return _gpu_use.gpu_use(dict((n, query("", e, NOW)) for n, e in asked.items()), list(accounts), since, NOW, step)


def test_a_window_slurm_was_not_known_for_is_partial_not_idle():
    report = _report({"known": [({}, 30)], "steps": [({}, 61)]})
    assert report["coverage"] == 0.4918 and not report["complete"]
    assert "partial: Prometheus knew Slurm's jobs for 49% of this time" in "\n".join(_gpu_use.render_lines(report, 10))
    report = _report({"steps": [({}, 61)]})
    assert report["coverage"] == 0.0 and not report["complete"]
    assert "for 0.0% of this time" in "\n".join(_gpu_use.render_lines(report, 10))


def test_one_step_missing_of_a_month_is_partial_never_shown_as_all():
    report = _report({"known": [({}, 44639)], "steps": [({}, 44640)]}, since=NOW - 31 * 24 * HOUR)
    assert report["coverage"] == 0.9999 and not report["complete"]
    assert "for 99% of this time" in "\n".join(_gpu_use.render_lines(report, 10))


def test_gpus_the_collector_could_not_map_make_the_report_partial():
    report = _report({"known": [({}, 60)], "steps": [({}, 60)], "unmapped": [({}, 120)]})
    assert report["coverage"] == 1.0 and not report["complete"] and report["unmapped_gpu_hours"] == 2.0
    lines = _gpu_use.render_lines(report, 10)
    assert "partial: 2.00 GPU-hours were held on GPUs the Slurm collector could not map" in "\n".join(lines)
    assert not [line for line in lines if "knew Slurm's jobs for" in line]


def test_a_default_window_starts_at_the_oldest_data_prometheus_keeps():
    asked = []

    def query(url, expr, when):
        asked.append(expr)
        if expr == "min(prometheus_tsdb_lowest_timestamp_seconds)":
            return [{"metric": {}, "value": [when, "%d" % (NOW - 3 * HOUR)]}]
        if expr.startswith("count_over_time"):
            return [{"metric": {}, "value": [when, "180"]}]
        return []
    report = _gpu_use.read("http://prometheus", ["research"], NOW - 30 * 24 * HOUR, NOW, 60, within_history=True,
                           query=query)
    assert report["since"] == NOW - 3 * HOUR + 1 and report["history_from"] == report["since"]
    assert report["complete"] and "[10799s:60s]" in asked[1]
    assert _gpu_use.render_lines(report, 10)[1].startswith("(from the oldest data Prometheus keeps")
    # a window the person chose is theirs: partial where Prometheus has nothing, never moved
    asked[:] = []
    report = _gpu_use.read("http://prometheus", ["research"], NOW - 30 * 24 * HOUR, NOW, 60, query=query)
    assert report["history_from"] is None and report["since"] == NOW - 30 * 24 * HOUR
    assert "prometheus_tsdb_lowest_timestamp_seconds" not in " ".join(asked)


class FakePrometheus(object):
    """Answers /api/v1/query with ``reply`` (status, body); records the queries and the paths asked."""
    reply = (200, b"")
    seen = []
    paths = []

    @classmethod
    def answer(cls, path, params):
        cls.seen.append(params)
        cls.paths.append(path)
        return cls.reply


@pytest.fixture(name="prometheus")
def _prometheus():
    FakePrometheus.seen = []
    with fake_prometheus.serving(FakePrometheus.answer) as url:
        yield url


def test_the_http_query_asks_at_the_reports_time_and_reads_the_vector(prometheus):
    FakePrometheus.reply = (200, fake_prometheus.vector([{"metric": {"account": "research"}, "value": [NOW, "12"]}]))
    assert _gpu_use.prometheus_query(prometheus + "/", "up", NOW) == [
        {"metric": {"account": "research"}, "value": [NOW, "12"]}]
    assert FakePrometheus.seen == [{"query": ["up"], "time": [str(NOW)]}]


@pytest.mark.parametrize("reply,message", [
    ((400, b'{"status":"error","error":"parse error"}'), "answered 400: .*parse error"),
    ((200, b"<html>"), "not JSON"),
    ((200, b'{"status":"error","error":"too many samples"}'), "refused the query: too many samples"),
    ((200, b'{"status":"success","data":{"resultType":"matrix","result":[]}}'), "a matrix, not a vector"),
])
def test_every_failed_answer_is_an_error_naming_prometheus(prometheus, reply, message):
    FakePrometheus.reply = reply
    with pytest.raises(_gpu_use.GpuUseError, match=message):
        _gpu_use.prometheus_query(prometheus, "up", NOW)


def test_no_prometheus_and_one_that_does_not_answer_are_errors():
    with pytest.raises(_gpu_use.GpuUseError, match="no Prometheus URL"):
        _gpu_use.read("", ["research"], NOW - HOUR, NOW, 60)
    with pytest.raises(_gpu_use.GpuUseError, match="cannot reach Prometheus at http://127.0.0.1:9"):
        _gpu_use.read("http://127.0.0.1:9", ["research"], NOW - HOUR, NOW, 60)
    with pytest.raises(_gpu_use.GpuUseError, match="the Prometheus URL 'prometheus:9090' is not http://HOST"):
        _gpu_use.read("prometheus:9090", ["research"], NOW - HOUR, NOW, 60)


def test_a_prometheus_under_a_path_is_asked_under_it(prometheus):
    FakePrometheus.reply = (200, fake_prometheus.vector([]))
    FakePrometheus.paths = []
    assert _gpu_use.prometheus_query(prometheus + "/prometheus/", "up", NOW) == []
    assert FakePrometheus.paths == ["/prometheus/api/v1/query"]
