"""Render a role's templates and variables the way Ansible does, with made-up facts, for unit tests."""

import os

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROLES = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "roles"))


def trust(value):
    """Role files as Ansible loads them: their strings are trusted templates."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {k: trust(v) for k, v in value.items()}
    if isinstance(value, list):
        return [trust(v) for v in value]
    return value


def _load(path):
    with open(path) as handle:
        return yaml.safe_load(handle) or {}


class RoleRender(object):
    """Variables of a role (defaults, vars/main.yml, one OS vars file) plus facts and overrides."""

    def __init__(self, role, os_vars, facts, **overrides):
        variables = {}
        variables.update(_load(os.path.join(ROLES, role, "defaults", "main.yml")))
        variables.update(_load(os.path.join(ROLES, role, "vars", "main.yml")))
        if os_vars:
            variables.update(_load(os.path.join(ROLES, role, "vars", os_vars)))
        variables = trust(variables)
        variables.update(overrides)
        variables["ansible_facts"] = facts
        variables["ansible_managed"] = "Ansible managed"
        variables.setdefault("inventory_hostname", "gpu01")
        self.role = role
        self.templar = Templar(loader=DataLoader(), variables=variables)

    def var(self, name):
        return self.templar.template(trust_as_template("{{ %s }}" % name))

    def template(self, name):
        with open(os.path.join(ROLES, self.role, "templates", name)) as handle:
            return self.templar.template(trust_as_template(handle.read()))


UBUNTU_2204 = {"distribution": "Ubuntu", "distribution_version": "22.04", "distribution_major_version": "22",
               "distribution_release": "jammy", "os_family": "Debian", "architecture": "x86_64", "kernel": "5.15.0-1"}
UBUNTU_2404 = dict(UBUNTU_2204, distribution_version="24.04", distribution_major_version="24",
                   distribution_release="noble", kernel="6.8.0-31-generic")
RHEL9 = {"distribution": "RedHat", "distribution_version": "9.4", "distribution_major_version": "9",
         "distribution_release": "Plow", "os_family": "RedHat", "architecture": "x86_64",
         "kernel": "5.14.0-427.el9.x86_64"}
ROCKY8_ARM = dict(RHEL9, distribution="Rocky", distribution_version="8.10", distribution_major_version="8",
                  architecture="aarch64")
DEBIAN13 = {"distribution": "Debian", "distribution_version": "13.1", "distribution_major_version": "13",
            "distribution_release": "trixie", "os_family": "Debian", "architecture": "x86_64", "kernel": "6.12.0-1-amd64"}
