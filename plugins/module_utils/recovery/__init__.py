"""Bring an engine back after a power cut: the logic of vllm-fleet-recover.

Stdlib only, Python 3.11: roles/engine_recovery copies this package and
host/ray_cluster.py (the Ray probe's parser) to each engine host, at the same
paths below /usr/local/lib/vllm-fleet/ as here below plugins/module_utils/
(its vars/main.yml lists them), where the role's thin runner calls
host_io.main. The playbooks never import it. The files import each other
relatively, so the same text runs under ``ansible.module_utils`` and on the
host without Ansible.

* config.py: recover.json (Config) and recover-state.json (State, summary);
* decide.py: every decision, pure (decide);
* loop.py: observe, decide, act, record (Recovery), over a Host;
* host_io.py: the real host (HostIO) and the entry point (main).

Two triggers, both tied to a boot (docs/provisioning.md, "After a power cut"):

* ``boot``: vllm-fleet-recover.service, once per boot of an engine host. The
  head waits (bounded) for every peer's host to answer, starts the Ray head,
  waits until every node joined, starts vLLM and waits for /health 200; a
  worker waits for the head's rendezvous port (Ray's GCS, or vLLM's master
  port under mp) and starts its unit, then stays until the head serves.
* ``check``: vllm-fleet-recover-check.timer, every 30 s. On the head it acts
  only when /health read 503 twice in a row and a peer's Ray node is one that
  joined after vLLM started (a node id not among those the check recorded
  while the engine served): that node's host booted. On a worker it starts
  the worker's unit only while the head holds its join barrier (the head's
  rendezvous port answers, its API port does not: vLLM is not running there).
  A crashed rank, a killed Ray worker or a wedged engine meet none of these.

Every decision is decide.decide: what was seen in, one action and a
one-line reason out. Nothing here acts while a playbook's lease is live, and
nothing acts without the engine-wanted marker.
"""
