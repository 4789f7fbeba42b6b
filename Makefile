# gpucluster.ops developer entry points. `make help` lists them.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

VENV ?= .venv
PYTHON ?= python3
COLL_LINK := .cache/collections/ansible_collections/gpucluster/ops
# Empty: every scenario, longest first (scripts/molecule.sh orders them by molecule/budget.yml).
SCENARIOS ?=
LAB_INVENTORY ?= inventories/lab
# The second controller the tests run (meta/runtime.yml: ansible-core 2.19 to 2.21): ansible-core 2.21 on Debian 13's
# Python 3.13, in a chroot that make platform builds once per machine (scripts/controller.sh, controllers/).
CONTROLLER ?= 2.21
# The scenarios whose converge and verify run on that controller (scenario=version); the others run on the host's
# .venv (ansible-core 2.19).
MOLECULE_CONTROLLERS ?= cluster-deb13=$(CONTROLLER)
export MOLECULE_CONTROLLERS
CLUSTER ?= deb13
TESTS ?=

export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/.cache/collections
export ANSIBLE_INJECT_FACT_VARS := False
export ANSIBLE_FORCE_COLOR ?= false
export PY_COLORS ?= 0

.PHONY: help setup platform lint yamllint ansible-lint docs-lint role-docs sanity unit integration kubernetes fast docs molecule cluster cluster-test cluster-down time-report time-table test \
	lab lab-tour lab-down build build-check lock clean

help: ## List the targets
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-13s %s\n", $$1, $$2}'

setup: $(VENV)/.installed $(COLL_LINK) ## Virtualenv with the pinned tools; link the checkout as gpucluster.ops

$(VENV)/.installed: requirements.txt constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements.txt
	touch $@

$(COLL_LINK):
	mkdir -p $(dir $(COLL_LINK))
	ln -sfn ../../../.. $(COLL_LINK)

platform: ## Docker engine and the machine's apt package cache running, Debian 12/13 systemd images, the ansible-core 2.21 controller and the Kubernetes tests' control plane built (root)
	scripts/ensure-docker.sh
	scripts/ensure-apt-cache.sh
	scripts/build-images.sh
	scripts/controller.sh build $(CONTROLLER)
	scripts/ensure-k8s.sh >/dev/null

yamllint: setup
	yamllint -s .

ansible-lint: setup
	ansible-lint --profile production

lint: yamllint ansible-lint docs-lint ## yamllint, ansible-lint (production profile), role READMEs, links, changelog fragments

# The role READMEs' variable tables against the argument specs, the links of README.md, docs/ and the role READMEs
# (nothing fetched), the changelog fragments.
docs-lint: setup
	scripts/role-readme.py --check
	scripts/check-links.py
	antsibull-changelog lint

role-docs: setup ## Rewrite the role READMEs' variable tables from meta/argument_specs.yml
	scripts/role-readme.py

sanity: setup ## ansible-test sanity in a temporary ansible_collections/gpucluster/ops tree, on ansible-core 2.19 and 2.21
	scripts/sanity.sh
	scripts/controller.sh run $(CONTROLLER) scripts/sanity.sh

# One pytest worker per CPU (pytest-xdist): the unit tests are CPU-bound and independent (88 playbook-running tests:
# 127 s in one process, 81 s in two on this project's 2-core machine).
# The tests that load the collection's plugins (tests/unit/plugins, and ansible-doc over every plugin) run again on the
# 2.21 controller; the rest of the suite once, on the host's 2.19.
UNIT_ON_CONTROLLER := tests/unit/plugins tests/unit/test_plugin_docs.py tests/unit/test_public_ansible_api.py

unit: setup ## Unit and property tests (pytest, one worker per CPU); the plugin tests again on ansible-core 2.21
	scripts/pytest.sh tests/unit -n auto
	scripts/controller.sh run $(CONTROLLER) scripts/pytest.sh $(UNIT_ON_CONTROLLER) -n auto

integration: setup ## Tests on this machine's kernel in network namespaces of their own (root; skip otherwise)
	scripts/pytest.sh tests/integration -p no:cacheprovider

kubernetes: setup ## The Kubernetes roles against a real API server on loopback (tests/kubernetes; scripts/ensure-k8s.sh builds it)
	scripts/pytest.sh tests/kubernetes -p no:cacheprovider

fast: setup ## The edit loop: yamllint, playbook syntax, unit tests (about a minute)
	yamllint -s .
	scripts/syntax-check.sh
	scripts/pytest.sh tests/unit -q -x -n auto

molecule: setup platform ## Every molecule scenario (SCENARIOS="a b" for some), then the time report
	scripts/molecule.sh $(SCENARIOS)

cluster: setup platform ## Build the shared test cluster and keep it (CLUSTER=deb13 or deb12), for the edit loop
	scripts/cluster.sh up $(CLUSTER)

cluster-test: setup ## Rerun the kept cluster's test modules (TESTS="test_3_health_drain" for some)
	scripts/cluster.sh test $(CLUSTER) $(TESTS)

cluster-down: setup ## Remove the kept test cluster
	scripts/cluster.sh down $(CLUSTER)

time-report: setup ## The last molecule run's times against molecule/budget.yml again
	scripts/time-report.py

time-table: setup ## Write README's time table from the last run (scripts/time-report.py --readme)
	scripts/time-report.py --readme

# When this make started (expanded once, as the Makefile is read): make test's clock starts here, so that its time
# includes the setup and platform it runs first.
MAKE_START := $(shell date +%s)

# What make test checks beside the molecule scenarios (scripts/make-test.sh: the scenarios start first, these run
# at a lower CPU priority in the CPU the scenarios leave idle; it times both for the time report).
CHECKS := lint sanity unit integration kubernetes build-check docs

test: setup platform ## Everything CI runs: every molecule scenario, and beside them lint, sanity, unit, integration, build and docs checks
	@MAKE_TEST_START_EPOCH=$(MAKE_START) SCENARIOS="$(SCENARIOS)" scripts/make-test.sh "$(MAKE)" $(CHECKS)

docs: setup ## HTML docs of every module, filter, callback and role (antsibull-docs, warnings are errors) into .cache/docs
	scripts/docs.sh

build: setup ## Build the collection tarball into build/
	mkdir -p build
	ansible-galaxy collection build --force --output-path build .

build-check: setup ## Build, check the tarball's contents, install it and use it by FQCN
	scripts/check-build.sh

lab: setup platform ## Bring up the lab cluster in containers, run playbooks/site.yml on it, check its outcome
	ansible-playbook -i $(LAB_INVENTORY) lab/up.yml
	ansible-playbook -i $(LAB_INVENTORY) playbooks/site.yml
	ansible-playbook -i $(LAB_INVENTORY) lab/after.yml

lab-tour: setup ## On a built lab: the researcher's and the operator's steps of docs/lab.md, their results asserted
	ansible-playbook -i $(LAB_INVENTORY) lab/tour.yml

lab-down: setup ## Remove the lab's containers and network
	ansible-playbook -i $(LAB_INVENTORY) lab/down.yml

lock: ## Regenerate constraints.txt from a fresh resolve of requirements.txt
	rm -rf .cache/lock-venv && $(PYTHON) -m venv .cache/lock-venv
	.cache/lock-venv/bin/pip install -q $$(grep -vE '^(-c|#|$$)' requirements.txt)
	.cache/lock-venv/bin/pip freeze | grep -v '^-e' > constraints.txt

clean: ## Remove build outputs and the tests' AnsiballZ cache (not the venv or images)
	rm -rf build tests/output .pytest_cache .hypothesis .cache/ansiballz
