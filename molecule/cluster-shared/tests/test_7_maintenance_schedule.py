"""The maintenance_schedule role on the controller (the test cluster's admin node): a weekly and a monthly job as
systemd services and timers, verified by systemd, listed with their next run, idempotent, nothing changed by --check,
one lock that keeps two runs from overlapping, the runs' output in the journal, a bad variable refused by name, and
the units of a job no longer in the list removed.

The services run a stand-in for ansible-playbook that records its arguments and sleeps: the maintenance playbooks
themselves are test_6_maintenance.py's. Debian 12 only: the role writes the same units on both releases, and it
needs no Slurm.
"""

import re
import time

import pytest

pytestmark = pytest.mark.release("debian12")

PLAYBOOK = "maintenance_schedule.yml"
BASE = "/var/tmp/gpucluster-maint-test"
STANDIN = BASE + "/ansible-playbook"
RECORD = BASE + "/runs.log"
INVENTORY = BASE + "/inventory.yml"
MONTHLY = BASE + "/maintenance_monthly.yml"
LOCK = BASE + "/maintenance.lock"
UNITS = "/etc/systemd/system/gpucluster-maint-"
CONFIG = "/etc/gpucluster/maintenance"
# Records one line a run, says so on standard output (the journal), and holds the lock a while.
STANDIN_TEXT = """#!/bin/sh
echo "$$ $*" >> %s
echo "stand-in ansible-playbook ran with: $*"
sleep 2
""" % RECORD

WEEKLY = {"name": "weekly", "playbook": "gpucluster.ops.maintenance_weekly", "on_calendar": "Sun *-*-* 03:00",
          "inventory": INVENTORY, "extra_vars": {"maintenance_drain_on_drift": True}, "randomized_delay": "15m",
          "timeout": "4h"}
MONTHLY_JOB = {"name": "monthly", "playbook": MONTHLY, "on_calendar": "Sat *-*-1..7 02:00", "inventory": INVENTORY,
               "check_mode": True}
SETTINGS = {"maintenance_schedule_ansible_playbook": STANDIN, "maintenance_schedule_lock_file": LOCK}


def jobs_vars(*jobs):
    return dict(SETTINGS, maintenance_schedule_jobs=list(jobs))


def recap_changed(out):
    counts = re.findall(r"changed=(\d+)", out.split("PLAY RECAP")[-1])
    assert counts, out
    return sum(int(n) for n in counts)


def unit_state(ctl):
    """Checksums of the role's unit and variables files, and the timers systemd lists."""
    sums = ctl.check_output("md5sum %s* %s/*.json 2>/dev/null || true" % (UNITS, CONFIG))
    return sums, timers(ctl)


def timers(ctl):
    """{timer: its next run, as systemctl list-timers shows it (Sun 2026-12-06 03:07:12 UTC)} for the role's timers."""
    out = ctl.check_output("systemctl list-timers --all --no-legend --no-pager 'gpucluster-maint-*'")
    found = {}
    for line in out.splitlines():
        units = re.findall(r"(gpucluster-maint-\S+\.timer)", line)
        if units:
            found[units[0]] = " ".join(line.split()[:4])
    return found


@pytest.fixture(scope="module")
def standin(ctl):
    """The stand-in ansible-playbook, an inventory and a playbook file for the jobs; all of it, and any unit the
    module left behind, removed at the end."""
    ctl.check_output("mkdir -p %s && printf '%%s' %s > %s && chmod 0755 %s && echo 'all: {}' > %s && echo '[]' > %s"
                     % (BASE, _quote(STANDIN_TEXT), STANDIN, STANDIN, INVENTORY, MONTHLY))
    yield
    ctl.check_output("systemctl stop 'gpucluster-maint-*.timer' 'gpucluster-maint-*.service'; "
                     "rm -rf %s %s* /etc/systemd/system/timers.target.wants/gpucluster-maint-* %s "
                     "/var/lib/gpucluster-maintenance; rmdir --ignore-fail-on-non-empty /etc/gpucluster; "
                     "systemctl daemon-reload; systemctl reset-failed" % (BASE, UNITS, CONFIG))


def _quote(text):
    return "'" + text.replace("'", "'\"'\"'") + "'"


# The units and variables a job "old" of an earlier run left, its timer enabled and started: the jobs of the list
# do not name it, so the role takes them away.
STALE = """set -e
mkdir -p {config} && echo '{{}}' > {config}/old.json
printf '[Service]\\nType=oneshot\\nExecStart=/bin/true\\n' > {units}old.service
printf '[Timer]\\nOnCalendar=daily\\n[Install]\\nWantedBy=timers.target\\n' > {units}old.timer
systemctl daemon-reload && systemctl enable --now gpucluster-maint-old.timer
""".format(config=CONFIG, units=UNITS)


@pytest.fixture(scope="module")
def applied(scenario, ctl, standin, tmp_path_factory):
    ctl.check_output(STALE)
    assert "gpucluster-maint-old.timer" in timers(ctl)
    rc, out = scenario.playbook(tmp_path_factory.mktemp("schedule"), PLAYBOOK,
                                extra_vars=jobs_vars(WEEKLY, MONTHLY_JOB))
    assert rc == 0, out
    return out


def test_a_job_no_longer_in_the_list_loses_its_units(ctl, applied):
    units = ctl.check_output("ls /etc/systemd/system | grep '^gpucluster-maint-' || true").split()
    assert units == ["gpucluster-maint-%s.%s" % (job, kind) for job in ("monthly", "weekly")
                     for kind in ("service", "timer")], (units, applied)
    assert ctl.check_output("ls -A %s" % CONFIG).split() == ["weekly.json"], applied
    assert "gpucluster-maint-old.timer" not in timers(ctl)


def test_the_units_verify_and_the_timers_are_listed_with_their_next_run(ctl, applied):
    names = ["%s%s.%s" % (UNITS, job, kind) for job in ("weekly", "monthly") for kind in ("service", "timer")]
    verify = ctl.run("systemd-analyze verify %s" % " ".join(names))
    assert verify.rc == 0 and "gpucluster-maint" not in verify.stderr, verify.stderr
    listed = timers(ctl)
    assert sorted(listed) == ["gpucluster-maint-monthly.timer", "gpucluster-maint-weekly.timer"], listed
    # a next run at a real time: Sunday for the weekly, a Saturday for the monthly
    assert listed["gpucluster-maint-weekly.timer"].startswith("Sun "), listed
    assert listed["gpucluster-maint-monthly.timer"].startswith("Sat "), listed
    for job in ("weekly", "monthly"):
        assert ctl.check_output("systemctl is-enabled gpucluster-maint-%s.timer" % job) == "enabled"
    weekly = ctl.check_output("cat %sweekly.service" % UNITS)
    assert "Type=oneshot" in weekly and "SyslogIdentifier=gpucluster-maint-weekly" in weekly, weekly
    assert '"-e" "@%s/weekly.json" "gpucluster.ops.maintenance_weekly"' % CONFIG in weekly, weekly
    assert "TimeoutStartSec=4h" in weekly and "--check" not in weekly, weekly
    assert '"--check" "%s"' % MONTHLY in ctl.check_output("cat %smonthly.service" % UNITS)
    assert "Persistent=true" in ctl.check_output("cat %sweekly.timer" % UNITS)
    assert '"maintenance_drain_on_drift": true' in ctl.check_output("cat %s/weekly.json" % CONFIG)


def test_a_second_run_changes_nothing(scenario, ctl, applied, tmp_path):
    before = unit_state(ctl)
    rc, out = scenario.playbook(tmp_path, PLAYBOOK, extra_vars=jobs_vars(WEEKLY, MONTHLY_JOB))
    assert rc == 0, out
    assert recap_changed(out) == 0, out
    assert unit_state(ctl) == before


def test_check_mode_says_what_it_would_change_and_changes_nothing(scenario, ctl, applied, tmp_path):
    before = unit_state(ctl)
    moved = dict(WEEKLY, on_calendar="Mon *-*-* 04:00")
    new = {"name": "extra", "playbook": MONTHLY, "on_calendar": "daily", "inventory": INVENTORY}
    rc, out = scenario.playbook(tmp_path, PLAYBOOK, extra_vars=jobs_vars(moved, new), args=["--check", "--diff"])
    assert rc == 0, out
    assert recap_changed(out) > 0, out
    assert "+OnCalendar=Mon *-*-* 04:00" in out and "gpucluster-maint-extra.timer" in out, out
    # the monthly job, out of the list: its timer would be stopped and its units removed
    stopped = out.split("Stop and disable the timers of jobs no longer wanted")[1].split("TASK")[0]
    assert "changed: [%s] => (item=gpucluster-maint-monthly.timer)" % scenario.controller in stopped, out
    removed = out.split("Remove the units of jobs no longer wanted")[1].split("TASK")[0]
    for kind in ("service", "timer"):
        assert "(item=gpucluster-maint-monthly.%s)" % kind in removed, out
    assert unit_state(ctl) == before


def test_the_lock_lets_one_run_of_two_at_once_and_the_journal_holds_both(ctl, applied):
    ctl.check_output("rm -f %s" % RECORD)
    since = ctl.check_output("date +%s")
    ctl.check_output("systemctl start --no-block gpucluster-maint-weekly.service gpucluster-maint-monthly.service")
    services = ["gpucluster-maint-%s.service" % job for job in ("weekly", "monthly")]
    deadline = time.monotonic() + 20
    states = {}
    while time.monotonic() < deadline:
        time.sleep(0.5)
        states = {s: ctl.check_output("systemctl show -p ActiveState -p ExecMainStatus %s" % s) for s in services}
        if all("ActiveState=activ" not in state for state in states.values()):
            break
    statuses = {s: re.search(r"ExecMainStatus=(\d+)", states[s]).group(1) for s in services}
    # exactly one ran (and recorded itself), the other found the lock held and stopped with 75
    assert sorted(statuses.values()) == ["0", "75"], states
    runs = ctl.check_output("cat %s" % RECORD).splitlines()
    assert len(runs) == 1, runs
    ran = [s for s in services if statuses[s] == "0"][0]
    refused = [s for s in services if s != ran][0]
    ran_job, refused_job = (s[len("gpucluster-maint-"):-len(".service")] for s in (ran, refused))
    # each job's reports in its own directory (health_sweep_report_root), then its variables and playbook
    reports = "-e health_sweep_report_root=/var/lib/gpucluster-maintenance/%s/reports" % ran_job
    expected = {"weekly": "-i %s %s -e @%s/weekly.json gpucluster.ops.maintenance_weekly" % (INVENTORY, reports, CONFIG),
                "monthly": "-i %s %s --check %s" % (INVENTORY, reports, MONTHLY)}[ran_job]
    assert runs[0].split(" ", 1)[1] == expected, runs

    def journal(job):
        return ctl.check_output("journalctl --no-pager -o cat --since @%s -t gpucluster-maint-%s" % (since, job))
    assert "stand-in ansible-playbook ran with: %s" % expected in journal(ran_job)
    assert "not run: another gpucluster maintenance run holds the lock %s" % LOCK in journal(refused_job)
    ctl.check_output("systemctl reset-failed %s" % refused)


def test_a_bad_calendar_event_fails_naming_the_variable_and_changes_nothing(scenario, ctl, applied, tmp_path):
    before = unit_state(ctl)
    rc, out = scenario.playbook(tmp_path, PLAYBOOK,
                                extra_vars=jobs_vars(dict(WEEKLY, on_calendar="every tuesday"), MONTHLY_JOB))
    assert rc != 0, out
    assert "maintenance_schedule_jobs[0].on_calendar is 'every tuesday'" in out, out
    assert unit_state(ctl) == before
