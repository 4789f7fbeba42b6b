# -*- coding: utf-8 -*-
# Copyright: gpucluster.ops contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Issue 12, "never OK when unsure": the driver's Fatal/Nonfatal word (NVLink Xids 144-150), Xid 154's recovery
action, driver and GSP failures without an Xid line, and the Xid catalogue's consistency with NVIDIA's."""

import calendar
import os

import pytest

from ansible_collections.gpucluster.ops.plugins.module_utils import _health_checks as hc
from ansible_collections.gpucluster.ops.plugins.module_utils import _kernlog
from ansible_collections.gpucluster.ops.plugins.module_utils import _xid_catalog as xc
from ansible_collections.gpucluster.ops.plugins.module_utils._kernlog import parse_kernel_log

from parser_testlib import fixture
from test_health_checks import BUS, CONFIG, healthy

REFERENCE = calendar.timegm((2025, 11, 3, 12, 0, 0))
NOW = calendar.timegm((2025, 11, 3, 11, 0, 0))
NVLINK5 = {144: "SAW_MVB", 145: "RLW_REMAP", 146: "TLW_RX/TLW_RX_PIPE0", 147: "TREX", 148: "NVLPW_CTRL/NVLPW",
           149: "NETIR_LINK_EVT/NETIR_LINK_DOWN", 150: "MSE_WATCHDOG"}
BODY = "NVRM: Xid (PCI:0000:18:00): %d, %s %s XC0 i0 Link 02 (0x00000001 0x00000002 0x00000000 0x00000000)"
# (prefix, epoch it stands for or None, uptime or None) for every stamp style the parser reads
STAMPS = [
    ("[ 5123.406112] ", None, 5123.406112),
    ("[Mon Nov  3 10:00:01 2025] ", calendar.timegm((2025, 11, 3, 10, 0, 1)), None),
    ("2025-11-03T10:00:01,250000+00:00 ", calendar.timegm((2025, 11, 3, 10, 0, 1)) + 0.25, None),
    ("kern  :err   : 2025-11-03T10:00:01,250000+00:00 ", calendar.timegm((2025, 11, 3, 10, 0, 1)) + 0.25, None),
    ("Nov  3 10:00:01 gpu-node-07 kernel: ", calendar.timegm((2025, 11, 3, 10, 0, 1)), None),
    ("Nov  3 10:00:01 gpu-node-07 kernel: [ 5123.406112] ", calendar.timegm((2025, 11, 3, 10, 0, 1)), 5123.406112),
    ("2025-11-03T10:00:01+0000 gpu-node-07 kernel: ", calendar.timegm((2025, 11, 3, 10, 0, 1)), None),
    ("Nov 03 10:00:01.250000 gpu-node-07 kernel: ", calendar.timegm((2025, 11, 3, 10, 0, 1)) + 0.25, None),
    ("[ 5123.406112] gpu-node-07 kernel: ", None, 5123.406112),
    ("1762164001.250000 gpu-node-07 kernel: ", calendar.timegm((2025, 11, 3, 10, 0, 1)) + 0.25, None),
]
STAMP_IDS = ["dmesg", "dmesg-T", "dmesg-iso", "dmesg-decode", "syslog", "syslog-uptime", "short-iso", "short-precise",
             "short-monotonic", "short-unix"]


def parse(text, **kwargs):
    kwargs.setdefault("utc_offset_s", 0)
    kwargs.setdefault("reference_epoch", REFERENCE)
    return parse_kernel_log(text, **kwargs)


def snapshot(text, **kwargs):
    snap = healthy()
    snap["kernel"] = parse(text, **kwargs)
    snap["now"] = NOW
    snap["xid_catalog"] = _kernlog.XID_CATALOG
    return snap


def findings(snap, config=None, check=None):
    found = hc.run_checks(snap, config or CONFIG, level="quick")
    return [(f["code"], f["severity"], f["target"]) for f in found if check is None or f["check"] == check]


# ---------------------------------------------------------------- parser: the driver's Fatal/Nonfatal word


@pytest.mark.parametrize("code", sorted(NVLINK5))
@pytest.mark.parametrize("word, fatal", [("Fatal", True), ("Nonfatal", False), ("Non-fatal", False),
                                         ("NONFATAL", False), ("fatal", True)])
def test_nvlink5_severity_word(code, word, fatal):
    (event,) = parse(BODY % (code, NVLINK5[code], word) + "\n")["events"]
    assert (event["kind"], event["code"], event["fatal"], event["bus_id"]) == ("xid", code, fatal, "00000000:18:00.0")
    assert event["message"].startswith(NVLINK5[code] + " " + word + " XC0")


@pytest.mark.parametrize("prefix, epoch, uptime", STAMPS, ids=STAMP_IDS)
@pytest.mark.parametrize("word, fatal", [("Fatal", True), ("Nonfatal", False)])
def test_nvlink5_severity_in_every_log_format(prefix, epoch, uptime, word, fatal):
    (event,) = parse(prefix + BODY % (145, "RLW_SRC_TRACK", word) + "\n")["events"]
    assert (event["code"], event["fatal"], event["uptime_s"]) == (145, fatal, uptime)
    assert event["epoch"] == (pytest.approx(epoch) if epoch is not None else None)


@pytest.mark.parametrize("message", [
    "NVLink: fatal error detected on link 7(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)",  # Xid 74: text, not the field
    "Graphics SM Warp Exception on (GPC 1, TPC 3, SM 0): Out Of Range Address",
    "SAW_MVB XC0 i0 Link 02 (0x00000001 0x00000002)",  # V1-style line without the word
    "Ch 00000003 caused by previous Xid 145",
    "Fatality of something",
])
def test_lines_without_the_severity_field_say_neither(message):
    (event,) = parse("NVRM: Xid (PCI:0000:18:00): 74, pid=1, name=x, %s\n" % message)["events"]
    assert event["fatal"] is None


def test_nvlink5_fixture_fatal_and_nonfatal():
    result = parse(fixture("kernlog", "dmesg_iso_nvlink5_fatal_nonfatal.log"))
    nvlink = [(e["code"], e["fatal"]) for e in result["events"] if e["code"] in NVLINK5 and e["bus_id"] == BUS[0]]
    assert nvlink == [(code, fatal) for code in sorted(NVLINK5) for fatal in (False, True)]
    assert [e["epoch"] for e in result["events"]][:2] == [calendar.timegm((2025, 11, 3, 10, 0, 1)) + 0.1,
                                                          calendar.timegm((2025, 11, 3, 10, 0, 1)) + 0.2]
    assert result["unreadable"] == []


# ---------------------------------------------------------------- parser: driver and GSP failures without an Xid


@pytest.mark.parametrize("body, kind, bus, device", [
    ("NVRM: GPU1 _kgspIsHeartbeatTimedOut: Heartbeat timed out, currentTimeMs 5731 heartbeat 503 diff 5228 timeout 5200",
     "gsp_timeout", None, "GPU1"),
    ("NVRM: _kgspRpcRecvPoll: GSP RM heartbeat timed out", "gsp_timeout", None, None),
    ("NVRM: GPU0 _kgspRpcRecvPoll: LibOS heartbeat timed out", "gsp_timeout", None, "GPU0"),
    ("NVRM: _kgspRpcRecvPoll: GSP RM / LibOS heartbeat timed out", "gsp_timeout", None, None),
    ("NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:9b:00 (printing 1 of every 30).  The GPU likely "
     "needs to be reset.", "gsp_timeout", "00000000:9B:00.0", None),
    ("NVRM: _kgspLogRpcTimeout: ********************************* GSP Timeout **********************************",
     "gsp_timeout", None, None),
    ("NVRM: GPU3 _kgspRpcRecvPoll: ================ GSP core unresponsive ===============", "gsp_timeout", None, "GPU3"),
    ("NVRM: _kgspRpcRecvPoll: Timeout waiting for RPC from GSP! Expected function 76 (GSP_RM_CONTROL).",
     "gsp_timeout", None, None),
    ("NVRM: GPU2 sanity check failed 0xf waiting for RPC response from GSP. Expected function 76 (GSP_RM_CONTROL) "
     "sequence 12 (0x0 0x0).", "gsp_timeout", None, "GPU2"),
    ("NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0xffff:1863)", "driver_init_failed", "00000000:01:00.0", None),
    ("NVRM: GPU 0000:01:00.0: rm_init_adapter failed, device minor number 0", "driver_init_failed",
     "00000000:01:00.0", None),
    ("NVRM: RmInitAdapter failed! (0x27:0x38:1193)", "driver_init_failed", None, None),
    ("NVRM: rm_init_adapter(0) failed", "driver_init_failed", None, None),
    ("NVRM: RmInitAdapter: Cannot initialize GSP firmware RM", "driver_init_failed", None, None),
    ("NVRM: _kgspBootGspRm: unexpected WPR2 already up, cannot proceed with booting GSP", "driver_init_failed",
     None, None),
    ("NVRM: GPU 0000:9a:00.0: GPU has fallen off the bus.", "gpu_lost", "00000000:9A:00.0", None),
    ("NVRM: GPU at PCI:0000:03:00: GPU has fallen off the bus.", "gpu_lost", "00000000:03:00.0", None),
])
@pytest.mark.parametrize("prefix, epoch, uptime", STAMPS, ids=STAMP_IDS)
def test_driver_failures_without_xid(body, kind, bus, device, prefix, epoch, uptime):
    (event,) = parse(prefix + body + "\n")["events"]
    assert (event["kind"], event["bus_id"], event["device"], event["code"]) == (kind, bus, device, None)
    assert event["epoch"] == (pytest.approx(epoch) if epoch is not None else None) and event["uptime_s"] == uptime
    assert event["message"] == body[len("NVRM: "):] and event["raw"] == prefix + body


@pytest.mark.parametrize("body", [
    "NVRM: GPU4 GSP RPC buffer contains function 103 (GSP_RM_ALLOC) and data 0x0000000000002081 0x0000000000000004.",
    "NVRM: GPU4 RPC history (CPU -> GSP):",
    "NVRM: GPU at PCI:0000:9b:00: GPU-509665ad-b600-ac93-3616-d754b23d636d",
    "NVRM: (the GPU is likely in a bad state and may need to be reset)",
    "NVRM: loading NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build",
    "NVRM: GPU0 _kgspIsHeartbeatTimedOut: Heartbeat not timed out, currentTimeMs 1 heartbeat 1",
    "audit: GSP heartbeat timed out",  # not the NVIDIA driver
])
def test_other_driver_lines_are_no_events(body):
    assert parse("[ 1.0] " + body + "\n")["events"] == []


def test_driver_failure_events_respect_since_epoch():
    text = fixture("kernlog", "journal_short_precise_gsp_heartbeat.log")
    kinds = [e["kind"] for e in parse(text)["events"]]
    assert kinds == ["gsp_timeout"] * 4
    late = parse(text, since_epoch=calendar.timegm((2025, 11, 3, 10, 5, 30)))["events"]
    assert [(e["kind"], e["bus_id"]) for e in late] == [("gsp_timeout", "00000000:2A:00.0")]


def test_xid_continuation_stops_at_driver_failure_line():
    text = ("[ 1.0] NVRM: Xid (PCI:0000:3d:00): 31, pid=5150, name=worker, Ch 00000007, intr 00000000.\n"
            "[ 1.0] NVRM: GPU 0000:3d:00.0: RmInitAdapter failed! (0x62:0x40:2028)\n")
    xid, init = parse(text)["events"]
    assert (xid["kind"], init["kind"]) == ("xid", "driver_init_failed") and "RmInitAdapter" not in xid["message"]


# ---------------------------------------------------------------- checks: Fatal/Nonfatal


def test_nonfatal_nvlink5_alone_is_a_warning_not_a_drain():
    snap = snapshot("\n".join(BODY.replace("0000:18:00", "0000:2a:00") % (code, NVLINK5[code], "Nonfatal")
                              for code in sorted(NVLINK5)) + "\n", year=2025)
    for event in snap["kernel"]["events"]:
        event["epoch"] = NOW - 60
    assert findings(snap) == [("GPU-XID-WARNING", "warning", "gpu1")] * 7
    assert hc.exit_code(hc.run_checks(snap, CONFIG)) == 1
    found = hc.run_checks(snap, CONFIG)
    assert all("(Nonfatal)" in f["message"] and "no reset needed" in f["action"] for f in found)


def test_fatal_and_nonfatal_of_one_code_on_one_gpu_are_not_merged():
    snap = snapshot(fixture("kernlog", "dmesg_iso_nvlink5_fatal_nonfatal.log"))
    found = [f for f in hc.run_checks(snap, CONFIG) if f["check"] == "xid"]
    gpu0 = sorted((int(f["message"].split()[2]), f["severity"]) for f in found if f["target"] == "gpu0")
    assert gpu0 == sorted([(code, "error") for code in NVLINK5] + [(code, "warning") for code in NVLINK5] +
                          [(154, "error")])
    gpu1 = sorted((f["code"], f["severity"], f["message"].split()[2]) for f in found if f["target"] == "gpu1")
    # Nonfatal 145 twice (one finding), Nonfatal 149, and the application's Xid 45 that followed
    assert gpu1 == [("GPU-XID-APP", "warning", "45"), ("GPU-XID-WARNING", "warning", "145"),
                    ("GPU-XID-WARNING", "warning", "149")]
    assert [f["message"][:22] for f in found if f["target"] == "gpu1" and "145" in f["message"][:10]] == \
        ["2 XID 145 (Nonfatal) e"]
    assert hc.worst(found) == "error"


def test_operator_error_codes_override_nonfatal_and_warning_codes_override_fatal():
    text = BODY % (145, "RLW_REMAP", "Nonfatal") + "\n" + BODY % (149, "NETIR_LINK_EVT", "Fatal") + "\n"
    snap = snapshot(text)
    config = dict(CONFIG, xid={"error_codes": [145], "warning_codes": [149]})
    assert sorted(findings(snap, config, check="xid")) == [("GPU-XID-ERROR", "error", "gpu0"),
                                                           ("GPU-XID-WARNING", "warning", "gpu0")]
    assert sorted(findings(snap, check="xid")) == [("GPU-XID-ERROR", "error", "gpu0"),
                                                   ("GPU-XID-WARNING", "warning", "gpu0")]
    assert findings(snap, dict(CONFIG, xid={"ignore": [145, 149]}), check="xid") == []


def test_nvlink5_without_the_word_keeps_the_catalogue_error():
    snap = snapshot("NVRM: Xid (PCI:0000:18:00): 149, NETIR XC0 i0 Link 00 (0x00000018 0x00000000)\n")
    assert findings(snap, check="xid") == [("GPU-XID-ERROR", "error", "gpu0")]


def test_nonfatal_word_on_another_xid_is_a_warning_and_fatal_an_error():
    snap = snapshot("NVRM: Xid (PCI:0000:18:00): 13, Nonfatal, Graphics Exception\n"
                    "NVRM: Xid (PCI:0000:2a:00): 43, Fatal, GPU stopped processing\n")
    found = hc.run_checks(snap, CONFIG)
    assert sorted((f["code"], f["severity"], f["target"]) for f in found) == [
        ("GPU-XID-APP", "warning", "gpu0"), ("GPU-XID-ERROR", "error", "gpu1")]
    assert "fatal" in [f for f in found if f["target"] == "gpu1"][0]["action"]


@pytest.mark.parametrize("action, severity, code", [
    ("0x1 (GPU Reset Required)", "error", "GPU-RECOVERY-ACTION"),
    ("0x2 (Node Reboot Required)", "error", "GPU-RECOVERY-ACTION"),
    ("0x3 (Drain P2P)", "error", "GPU-RECOVERY-ACTION"),
    ("0x4 (Drain and Reset)", "error", "GPU-RECOVERY-ACTION"),
    ("0x5 (Recover IMEX Domain)", "error", "GPU-RECOVERY-ACTION"),
    ("0x0 (None)", "info", "GPU-RECOVERY-ACTION"),
])
def test_xid154_severity_follows_the_recovery_action(action, severity, code):
    line = "NVRM: Xid (PCI:0000:18:00): 154, GPU recovery action changed from 0x4 (Drain and Reset) to %s\n" % action
    found = [f for f in hc.run_checks(snapshot(line), CONFIG) if f["check"] == "xid"]
    assert [(f["code"], f["severity"], f["target"]) for f in found] == [(code, severity, "gpu0")]
    assert action.split("(")[1].rstrip(")") in found[0]["message"]


def test_xid154_in_an_unknown_format_keeps_the_catalogue_warning():
    found = findings(snapshot("NVRM: Xid (PCI:0000:18:00): 154, something new\n"), check="xid")
    assert found == [("GPU-XID-WARNING", "warning", "gpu0")]


# ---------------------------------------------------------------- checks: driver and GSP failures without an Xid


def test_gsp_heartbeat_without_xid_is_an_error_on_the_named_gpu():
    snap = snapshot(fixture("kernlog", "journal_short_precise_gsp_heartbeat.log"), year=2025)
    assert findings(snap, check="driver_log") == [("GPU-GSP-TIMEOUT", "error", "gpu1")]
    (found,) = [f for f in hc.run_checks(snap, CONFIG) if f["check"] == "driver_log"]
    assert "reset" in found["action"] and "GSP" in found["message"]


def test_gsp_line_without_a_bus_id_targets_the_node():
    snap = snapshot("[Mon Nov  3 10:00:01 2025] NVRM: GPU1 _kgspRpcRecvPoll: GSP RM heartbeat timed out\n")
    (found,) = [f for f in hc.run_checks(snap, CONFIG) if f["check"] == "driver_log"]
    assert (found["code"], found["severity"], found["target"]) == ("GPU-GSP-TIMEOUT", "error", "node")
    assert "driver instance GPU1" in found["message"]


def test_rminitadapter_failed_is_an_error():
    snap = snapshot(fixture("kernlog", "syslog_rminitadapter_failed.log"), year=2025)
    assert findings(snap, check="driver_log") == [("GPU-DRIVER-INIT-FAILED", "error", "gpu3")]
    (found,) = [f for f in hc.run_checks(snap, CONFIG) if f["check"] == "driver_log"]
    assert found["message"].startswith("2 kernel log line(s) without an Xid") and "rm_init_adapter failed" in found["message"]


def test_fallen_off_the_bus_without_xid79():
    snap = snapshot(fixture("kernlog", "dmesg_ctime_fallen_off_bus_no_xid.log"))
    assert findings(snap, check="driver_log") == [("GPU-DRIVER-INIT-FAILED", "error", "gpu4"),
                                                  ("GPU-FALLEN-OFF-BUS", "error", "gpu4")]


def test_bus_id_unknown_to_nvidia_smi_is_the_target():
    snap = snapshot("NVRM: GPU 0000:c1:00.0: RmInitAdapter failed! (0x62:0x40:2028)\n")
    assert findings(snap, check="driver_log") == [("GPU-DRIVER-INIT-FAILED", "error", "00000000:C1:00.0")]


@pytest.mark.parametrize("xid, driver_line", [
    ("NVRM: Xid (PCI:0000:2a:00): 119, pid=1, name=x, Timeout after 6s of waiting for RPC response from GPU1 GSP!",
     "NVRM: Rate limiting GSP RPC error prints for GPU at PCI:0000:2a:00 (printing 1 of every 30)."),
    ("NVRM: Xid (PCI:0000:2a:00): 120, pid=1, name=x, GSP task exception",
     "NVRM: GPU1 _kgspRpcRecvPoll: GSP RM heartbeat timed out"),
    ("NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.",
     "NVRM: GPU 0000:2a:00.0: GPU has fallen off the bus."),
    ("NVRM: Xid (PCI:0000:2a:00): 143, pid=1, name=x, GPU initialization failure",
     "NVRM: GPU 0000:2a:00.0: RmInitAdapter failed! (0x62:0x40:2028)"),
])
def test_a_failure_that_an_xid_line_reports_is_left_to_check_xid(xid, driver_line):
    snap = snapshot(xid + "\n" + driver_line + "\n")
    assert findings(snap, check="driver_log") == []
    assert [f[1] for f in findings(snap, check="xid")] == ["error"]
    # an Xid on ignore does not bring the driver line back: the Xid line is there
    assert findings(snap, dict(CONFIG, xid={"ignore": [119, 120, 79, 143]}), check="driver_log") == []


def test_an_xid_of_another_gpu_does_not_hide_a_failure():
    snap = snapshot("NVRM: Xid (PCI:0000:18:00): 79, pid=1, name=x, GPU has fallen off the bus.\n"
                    "NVRM: GPU 0000:2a:00.0: GPU has fallen off the bus.\n")
    assert findings(snap, check="driver_log") == [("GPU-FALLEN-OFF-BUS", "error", "gpu1")]


def test_driver_failures_respect_the_xid_window():
    snap = snapshot(fixture("kernlog", "syslog_rminitadapter_failed.log"), year=2025)
    snap["now"] = calendar.timegm((2025, 11, 5, 10, 0, 0))  # two days later: outside the default 24 h
    assert findings(snap, check="driver_log") == []
    assert findings(snap, dict(CONFIG, xid={"window_s": 3 * 86400}), check="driver_log") == [
        ("GPU-DRIVER-INIT-FAILED", "error", "gpu3")]
    snap["kernel"] = parse("[ 20.402914] NVRM: GPU 0000:5d:00.0: RmInitAdapter failed! (0x62:0x40:2028)\n")
    assert findings(snap, check="driver_log") == [("GPU-DRIVER-INIT-FAILED", "error", "gpu3")]  # no epoch: kept


def test_driver_log_check_is_registered_at_quick():
    assert ("driver_log", "quick", hc.check_driver_log) in hc.CHECKS
    assert hc.check_driver_log({}, CONFIG) == []


# ---------------------------------------------------------------- catalogue consistency


def test_catalogue_cites_its_source():
    assert xc.CATALOG_SOURCE["url"] == "https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html"
    assert xc.CATALOG_SOURCE["drivers"] == "R570-R590"
    with open(xc.__file__) as handle:
        head = handle.read(3000)
    assert xc.CATALOG_SOURCE["url"] in head and "R570 to R590" in head


def test_every_code_has_a_severity_an_action_and_a_resolution_or_a_reason():
    for code, entry in xc.XID_CATALOG.items():
        assert entry["severity"] in ("warning", "error") and entry["action"].endswith("."), code
        assert entry["class"] in ("application", "hardware", "driver", "nvlink", "memory"), code
        assert entry["resolution"] is None or entry["resolution"] in xc.RESOLUTION_SEVERITY, code
    # codes the catalogue gives no bucket: 162-172 (new in it) and the driver header's 173
    assert {c for c, e in xc.XID_CATALOG.items() if e["resolution"] is None} == set(range(162, 174))


def test_nvidia_resolution_maps_to_our_severity():
    for code, entry in xc.XID_CATALOG.items():
        if entry["resolution"] is None:
            continue
        expected = xc.RESOLUTION_SEVERITY[entry["resolution"]]
        if code in xc.STRICTER_THAN_NVIDIA:
            assert (expected, entry["severity"]) == ("warning", "error"), code
        else:
            assert entry["severity"] == expected, (code, entry["resolution"])
    assert {xc.RESOLUTION_SEVERITY[b] for b in ("RESET_GPU", "RESTART_BM", "WORKFLOW_NVLINK_ERR",
                                                "WORKFLOW_NVLINK5_ERR", "CONTACT_SUPPORT")} == {"error"}
    assert {xc.RESOLUTION_SEVERITY[b] for b in ("RESTART_APP", "IGNORE", "XID_154")} == {"warning"}


def test_nvlink5_and_driver_events_facts():
    for code in xc.NVLINK5_CODES:
        assert (xc.XID_CATALOG[code]["resolution"], xc.XID_CATALOG[code]["severity"]) == ("WORKFLOW_NVLINK5_ERR", "error")
    assert set(xc.DRIVER_EVENTS) == set(hc.DRIVER_LOG_CODES)
    for kind, facts in xc.DRIVER_EVENTS.items():
        assert facts["severity"] == "error" and facts["action"].endswith(".")
        assert all(code in xc.XID_CATALOG for code in facts["xids"]), kind


def test_health_checks_constants_derive_from_the_catalogue():
    assert hc.XID_ERROR_CODES == {c for c, e in xc.XID_CATALOG.items() if e["severity"] == "error"}
    assert hc.XID_APPLICATION_CODES == {c for c, e in xc.XID_CATALOG.items() if e["class"] == "application"}
    assert {13, 31, 43} <= hc.XID_APPLICATION_CODES and {48, 79, 95, 119, 144, 150} <= hc.XID_ERROR_CODES
    assert _kernlog.XID_CATALOG is xc.XID_CATALOG and _kernlog.xid_info is xc.xid_info


def test_recovery_action_parser():
    assert xc.recovery_action("GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)") == \
        ("Node Reboot Required", "error")
    assert xc.recovery_action("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)") == \
        ("None", "info")
    assert xc.recovery_action("something else") == (None, None) and xc.recovery_action(None) == (None, None)


def test_fixtures_are_synthetic_and_ours():
    # the fixtures of this file are written for the project, in the formats of the real captures
    here = os.path.join(os.path.dirname(__file__), "..", "..", "fixtures", "kernlog")
    for name in ("dmesg_iso_nvlink5_fatal_nonfatal.log", "journal_short_precise_gsp_heartbeat.log",
                 "syslog_rminitadapter_failed.log", "dmesg_ctime_fallen_off_bus_no_xid.log"):
        assert os.path.isfile(os.path.join(here, name))
