"""Verify node_tuning on a converged container: the GRUB drop-in as grub-mkconfig reads it, the sysctl file, the
tuning unit (which skips itself in a container), the drop-ins loaded by systemd, and the role's notes."""

import json

import pytest

DROPIN = "90-gpucluster-node-tuning.conf"


def cpu_vendor(host):
    out = host.run("grep -m1 ^vendor_id /proc/cpuinfo")
    return out.stdout.split(":")[-1].strip() if out.rc == 0 else ""


def test_grub_dropin_as_grub_mkconfig_sources_it(host):
    dropin = host.file("/etc/default/grub.d/90-gpucluster-node-tuning.cfg")
    assert dropin.mode == 0o644 and dropin.content_string.startswith("#")
    options = "processor.max_cstate=1 intel_idle.max_cstate=1 iommu=pt"
    if cpu_vendor(host) == "GenuineIntel":
        options += " intel_iommu=on"
    options += " pci=realloc"
    cmdline = host.check_output(
        "sh -c 'GRUB_CMDLINE_LINUX=\"quiet splash\"; . %s; printf %%s \"$GRUB_CMDLINE_LINUX\"'" % dropin.path)
    assert cmdline == "quiet splash " + options
    empty = host.check_output("sh -c 'GRUB_CMDLINE_LINUX=; . %s; printf %%s \"$GRUB_CMDLINE_LINUX\"'" % dropin.path)
    assert empty == options


def test_sysctl_file(host):
    conf = host.file("/etc/sysctl.d/91-gpucluster-node-tuning.conf")
    lines = [line for line in conf.content_string.splitlines() if line and not line.startswith("#")]
    assert "vm.zone_reclaim_mode = 0" in lines
    assert "net.core.rmem_max = 268435456" in lines
    assert "net.ipv4.tcp_rmem = 4096 87380 134217728" in lines
    assert "net.core.somaxconn = 4096" in lines  # from node_tuning_sysctl_extra


def test_tuning_unit_enabled_and_refusing_to_run_in_a_container(host):
    assert host.file("/usr/local/sbin/gpucluster-node-tuning").mode == 0o755
    assert host.service("gpucluster-node-tuning").is_enabled
    host.run("systemctl start gpucluster-node-tuning")
    state = host.check_output("systemctl show -p ConditionResult -p ActiveState gpucluster-node-tuning")
    assert "ConditionResult=no" in state and "ActiveState=inactive" in state


@pytest.mark.parametrize("unit", ["slurmd", "munge", "nvidia-persistenced", "ssh"])
def test_dropins_written(host, unit):
    dropin = host.file("/etc/systemd/system/%s.service.d/%s" % (unit, DROPIN))
    assert dropin.exists and dropin.mode == 0o644
    assert "OOMScoreAdjust=-1000" in dropin.content_string
    assert ("LimitMEMLOCK=infinity" in dropin.content_string) == (unit == "slurmd")


def test_oom_protection_loaded_for_a_running_daemon(host):
    assert host.service("ssh").is_running
    assert host.check_output("systemctl show -p OOMScoreAdjust --value ssh") == "-1000"
    assert "/etc/systemd/system/ssh.service.d/" + DROPIN in host.check_output("systemctl show -p DropInPaths --value ssh")


def test_dropin_applies_when_the_unit_arrives(host):
    """slurmd is not installed: its drop-in waits, and loads as soon as a slurmd unit appears."""
    unit = "/etc/systemd/system/slurmd.service"
    host.check_output("printf '[Service]\\nExecStart=/bin/sleep infinity\\n' > %s && systemctl daemon-reload" % unit)
    try:
        values = host.check_output("systemctl show -p OOMScoreAdjust -p LimitMEMLOCK slurmd")
        assert "OOMScoreAdjust=-1000" in values and "LimitMEMLOCK=infinity" in values
    finally:
        host.run("rm -f %s && systemctl daemon-reload" % unit)


def test_the_role_says_what_did_not_apply(host):
    notes = [n for n in json.loads(host.file("/root/gpucluster-notes.json").content_string)
             if n.startswith("node_tuning:")]
    assert any("kernel options" in n and "pci=realloc" in n and "update-grub and a reboot" in n for n in notes), notes
    assert any("CPU governor \"performance\"" in n and "not run: a container" in n for n in notes), notes
    assert any("kernel setting(s) written" in n for n in notes), notes
    assert any("OOMScoreAdjust=-1000" in n and "ssh.service" in n for n in notes), notes
