"""node_tuning: kernel options per CPU, the GRUB drop-in as a shell sources it, the governor/hugepages script against a
sysfs tree, and the systemd validators run on real systemd-analyze where it exists."""

import os
import shutil
import subprocess

import pytest

from .rolerender import DEBIAN13, RoleRender

ARM = dict(DEBIAN13, architecture="aarch64")


def role(facts=None, vendor="GenuineIntel", **overrides):
    probe = {"stdout": "vendor_id\t: %s" % vendor, "rc": 0} if vendor else {"stdout": "", "rc": 1}
    overrides.setdefault("__node_tuning_vendor_probe", probe)
    return RoleRender("node_tuning", "Debian.yml", facts or DEBIAN13, **overrides)


@pytest.mark.parametrize("facts, vendor, overrides, options", [
    (DEBIAN13, "GenuineIntel", {},
     ["processor.max_cstate=1", "intel_idle.max_cstate=1", "iommu=pt", "intel_iommu=on"]),
    (DEBIAN13, "AuthenticAMD", {}, ["processor.max_cstate=1", "intel_idle.max_cstate=1", "iommu=pt"]),
    (DEBIAN13, "GenuineIntel", {"node_tuning_max_cstate": 0},
     ["processor.max_cstate=1", "intel_idle.max_cstate=0", "iommu=pt", "intel_iommu=on"]),
    (DEBIAN13, "AuthenticAMD", {"node_tuning_max_cstate": -1, "node_tuning_iommu": "off"}, ["amd_iommu=off"]),
    (DEBIAN13, "GenuineIntel", {"node_tuning_max_cstate": -1, "node_tuning_iommu": "on"}, ["intel_iommu=on"]),
    (DEBIAN13, "GenuineIntel", {"node_tuning_max_cstate": -1, "node_tuning_iommu": "",
                                "node_tuning_pci_options": ["realloc", "noaer"],
                                "node_tuning_kernel_cmdline_extra": ["numa_balancing=disable"]},
     ["pci=realloc,noaer", "numa_balancing=disable"]),
    (ARM, "", {}, ["iommu.passthrough=1"]),
    (DEBIAN13, "GenuineIntel", {"node_tuning_kernel_cmdline_manage": False, "node_tuning_pci_options": ["realloc"]}, []),
])
def test_kernel_options(facts, vendor, overrides, options):
    assert role(facts, vendor, **overrides).var("__node_tuning_cmdline") == options


def test_missing_options_against_the_running_kernel():
    import base64
    running = base64.b64encode(b"BOOT_IMAGE=/vmlinuz root=/dev/sda1 ro iommu=pt quiet\n").decode()
    r = role(__node_tuning_proc_cmdline={"content": running})
    missing = ["processor.max_cstate=1", "intel_idle.max_cstate=1", "intel_iommu=on"]
    assert r.var("__node_tuning_cmdline_missing") == missing


@pytest.mark.parametrize("before, expected", [
    ("quiet", "quiet processor.max_cstate=1 intel_idle.max_cstate=1 iommu=pt intel_iommu=on pci=realloc"),
    ("", "processor.max_cstate=1 intel_idle.max_cstate=1 iommu=pt intel_iommu=on pci=realloc"),
])
def test_grub_dropin_as_grub_mkconfig_sources_it(tmp_path, before, expected):
    dropin = tmp_path / "90-gpucluster-node-tuning.cfg"
    dropin.write_text(role(node_tuning_pci_options=["realloc"]).template("grub.cfg.j2"))
    assert subprocess.run(["sh", "-n", str(dropin)], check=False).returncode == 0
    out = subprocess.run(["sh", "-c", 'GRUB_CMDLINE_LINUX="$1"; . "$2"; printf %s "$GRUB_CMDLINE_LINUX"', "sh",
                          before, str(dropin)], capture_output=True, text=True, check=True).stdout
    assert out == expected


def test_sysctl_file_merges_the_extra_settings():
    text = role(node_tuning_sysctl_extra={"net.core.somaxconn": 4096, "vm.zone_reclaim_mode": 1,
                                          "kernel.numa_balancing": False}).template("sysctl.conf.j2")
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert "vm.zone_reclaim_mode = 1" in lines and "net.core.somaxconn = 4096" in lines
    assert "kernel.numa_balancing = 0" in lines
    assert "net.ipv4.tcp_rmem = 4096 87380 134217728" in lines


@pytest.mark.parametrize("unit, oom, memlock", [
    ("slurmd.service", True, True), ("ssh.service", True, False), ("rdma-app.service", False, True)])
def test_dropins(unit, oom, memlock):
    r = role(__node_tuning_unit_name=unit, node_tuning_memlock_services=["slurmd", "rdma-app.service"])
    text = r.template("dropin.conf.j2")
    assert text.startswith("#") and "[Service]\n" in text
    assert ("OOMScoreAdjust=-1000\n" in text) == oom
    assert ("LimitMEMLOCK=infinity\n" in text) == memlock


def test_unit_names_get_their_suffix():
    r = role(node_tuning_oom_protected_services=["ssh", "munge.service", "getty@tty1.service"])
    assert r.var("__node_tuning_oom_units") == ["munge.service", "getty@tty1.service", "ssh.service"]
    assert r.var("__node_tuning_dropin_units") == ["getty@tty1.service", "munge.service", "slurmd.service",
                                                   "ssh.service"]


def test_active_units_from_systemctl_show():
    r = role(node_tuning_oom_protected_services=["ssh", "munge"], node_tuning_memlock_services=[],
             __node_tuning_units_state={"stdout_lines": ["inactive", "", "active"]})
    assert r.var("__node_tuning_active_units") == ["ssh.service"]


def test_running_sysctl_values_from_one_sysctl_call():
    r = role(__node_tuning_sysctl_current={"stdout_lines": ["vm.zone_reclaim_mode = 0",
                                                            "net.ipv4.tcp_rmem = 4096\t131072\t6291456"]})
    running = {"vm.zone_reclaim_mode": "0", "net.ipv4.tcp_rmem": "4096\t131072\t6291456"}
    assert r.var("__node_tuning_sysctl_running") == running


# --- the governor and hugepages script, run against a sysfs tree ---------------------------------------------------

def sysfs(tmp_path, governors, offered="performance powersave", thp="always [madvise] never"):
    root = tmp_path / "sys"
    for number, governor in enumerate(governors):
        cpufreq = root / "devices" / "system" / "cpu" / ("cpu%d" % number) / "cpufreq"
        cpufreq.mkdir(parents=True)
        (cpufreq / "scaling_governor").write_text(governor + "\n")
        (cpufreq / "scaling_available_governors").write_text(offered + "\n")
    if thp is not None:
        (root / "kernel" / "mm" / "transparent_hugepage").mkdir(parents=True)
        (root / "kernel" / "mm" / "transparent_hugepage" / "enabled").write_text(thp + "\n")
    return root


def script(tmp_path, **overrides):
    path = tmp_path / "gpucluster-node-tuning"
    path.write_text(role(**overrides).template("gpucluster-node-tuning.sh.j2"))
    path.chmod(0o755)
    return path


def run(path, root, mode):
    return subprocess.run([str(path), mode], capture_output=True, text=True, check=False,
                          env=dict(os.environ, GPUCLUSTER_SYSFS=str(root)))


def governors(root):
    return [p.read_text().strip() for p in sorted(root.glob("devices/system/cpu/cpu*/cpufreq/scaling_governor"))]


def test_script_checks_then_applies(tmp_path):
    root = sysfs(tmp_path, ["powersave", "performance", "powersave"], thp="[always] madvise never")
    path = script(tmp_path)
    assert path.read_text().startswith("#!/bin/sh\n#")
    check = run(path, root, "check")
    assert check.returncode == 1
    assert "cpu0/cpufreq/scaling_governor: powersave (wanted: performance)" in check.stdout
    assert "cpu1/" not in check.stdout
    assert "transparent_hugepage/enabled: always (wanted: madvise)" in check.stdout
    assert governors(root) == ["powersave", "performance", "powersave"]  # check changes nothing
    apply = run(path, root, "apply")
    assert apply.returncode == 0, apply.stderr
    assert governors(root) == ["performance"] * 3
    assert (root / "kernel/mm/transparent_hugepage/enabled").read_text() == "madvise\n"


def test_script_is_quiet_when_all_is_as_wanted(tmp_path):
    root = sysfs(tmp_path, ["performance"] * 2)
    check = run(script(tmp_path), root, "check")
    assert (check.returncode, check.stdout) == (0, "")


def test_script_refuses_a_governor_the_driver_does_not_offer(tmp_path):
    root = sysfs(tmp_path, ["powersave"], offered="powersave")
    apply = run(script(tmp_path), root, "apply")
    assert apply.returncode == 2
    assert "governor performance is not offered by this CPU's cpufreq driver (offered: powersave)" in apply.stderr
    assert governors(root) == ["powersave"]


def test_script_without_cpufreq_or_hugepages_has_nothing_to_do(tmp_path):
    root = sysfs(tmp_path, [], thp=None)
    check = run(script(tmp_path), root, "check")
    assert check.returncode == 0
    assert "CPU governor not applicable" in check.stdout and "setting not applicable" in check.stdout


def test_script_with_empty_settings_leaves_everything(tmp_path):
    root = sysfs(tmp_path, ["powersave"], thp="[always] madvise never")
    path = script(tmp_path, node_tuning_cpu_governor="", node_tuning_transparent_hugepages="")
    assert run(path, root, "check").returncode == 0
    assert run(path, root, "apply").returncode == 0
    assert governors(root) == ["powersave"]
    assert run(path, root, "bogus").returncode == 64


# --- the validators the role hands to the template module, on this machine's systemd-analyze ----------------------

needs_systemd_analyze = pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="systemd-analyze is not here")


def validate(command, path):
    import shlex
    return subprocess.run(shlex.split(command % path), capture_output=True, text=True, check=False)


@needs_systemd_analyze
def test_unit_validator_accepts_the_unit_and_rejects_a_bad_one(tmp_path):
    command = role().var("__node_tuning_unit_validate")
    unit = tmp_path / "tmpXYZ"  # the template module's temporary file has no .service suffix
    unit.write_text(role(__node_tuning_script="/bin/true").template("gpucluster-node-tuning.service.j2"))
    good = validate(command, unit)
    assert good.returncode == 0, good.stderr
    unit.write_text(unit.read_text().replace("RemainAfterExit=yes", "RemainAfterExits=yes"))
    bad = validate(command, unit)
    assert bad.returncode == 1 and "RemainAfterExits" in bad.stderr


@needs_systemd_analyze
@pytest.mark.parametrize("value, ok", [(-1000, True), (-5000, False)])
def test_dropin_validator(tmp_path, value, ok):
    r = role(__node_tuning_unit_name="slurmd.service", node_tuning_oom_score_adjust=value)
    dropin = tmp_path / "tmpABC"
    dropin.write_text(r.template("dropin.conf.j2"))
    result = validate(r.var("__node_tuning_dropin_validate"), dropin)
    assert (result.returncode == 0) == ok, result.stderr
    if not ok:
        assert "OOM score adjust value out of range" in result.stderr
