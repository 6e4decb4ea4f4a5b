# Lab targets, included from the Makefile (`include lab/lab.mk`). See lab/README.md.
# All of them need root. Built artefacts are reused; `lab-down` keeps them.
LAB_SH := lab/lab.sh

.PHONY: lab-deps lab-build lab-up lab-down lab-status lab-test lab-clean

lab-deps: ## Lab: apt-get install what the lab needs (only what is missing)
	$(LAB_SH) deps

lab-build: ## Lab: base image, apt repo, wheelhouse, ssh key, tiny model (reused when current)
	$(LAB_SH) build

lab-up: lab-build ## Lab: start hosts lab1..lab3 and wait for sshd
	$(LAB_SH) up

lab-down: ## Lab: remove hosts, mounts, netns, bridge, cgroups (keeps built artefacts)
	$(LAB_SH) down

lab-status: ## Lab: artefacts, hosts, active faults
	$(LAB_SH) status

lab-test: $(STAMP) lab-up ## Lab: integration tests against the running lab
	VLLM_FLEET_LAB=1 $(BIN)/python -m pytest -q $(LAB_TESTS)

lab-clean: ## Lab: down, then remove built artefacts except the downloads
	$(LAB_SH) clean
