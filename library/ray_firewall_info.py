#!/usr/bin/python
# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Work out what the Ray firewall admits and resets on this host."""
from __future__ import annotations

DOCUMENTATION = r"""
---
module: ray_firewall_info
short_description: Work out the ports and peers of an engine host's Ray firewall
description:
  - Reads the kernel's ephemeral port range on the host (C(/proc/sys/net/ipv4/ip_local_port_range))
    and returns what the ray_cluster role's nftables table admits and resets.
  - >-
    Ray binds its GCS, raylet, agents and workers on every address, on the GCS and client ports,
    the worker range and random ports from the ephemeral range. New connections to those from
    anything but the engine's hosts and loopback are reset; every other port is left alone.
options:
  peers:
    description: The engine's host addresses (IPv4 or IPv6).
    type: list
    elements: str
    required: true
  ray_port:
    description: Ray's GCS port (C(ray_cluster_port)).
    type: int
    required: true
  worker_ports:
    description: Ray's worker range, C([min, max]).
    type: list
    elements: int
    required: true
  open_ports:
    description: Ports that stay reachable from anywhere even inside those ranges (vLLM's API, ssh, the operator's own).
    type: list
    elements: int
    default: []
  engine_ports:
    description:
      - The engine's other ports, reset like Ray's for anything but its hosts (the mp backend's master port, where
        torch's store listens on every address).
    type: list
    elements: int
    default: []
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
author:
  - vllm-fleet developers
"""

EXAMPLES = r"""
- name: Work out the Ray firewall
  ray_firewall_info:
    peers: [10.0.0.11, 10.0.0.12]
    ray_port: 6379
    worker_ports: [20100, 20999]
    open_ports: [22, 8000]
  register: firewall
"""

RETURN = r"""
peers4:
  description: The engine's IPv4 addresses, admitted to every port.
  type: list
  elements: str
  returned: success
peers6:
  description: The engine's IPv6 addresses, admitted to every port.
  type: list
  elements: str
  returned: success
reset:
  description: nftables set elements (C(6379), C(20100-20999)) whose new connections from anyone else are reset.
  type: list
  elements: str
  returned: success
open:
  description: Ports cut out of RV(reset).
  type: list
  elements: str
  returned: success
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.host.ray_firewall import FirewallError, rules

RANGE_FILE = "/proc/sys/net/ipv4/ip_local_port_range"


def main():
    module = AnsibleModule(
        argument_spec=dict(
            peers=dict(type="list", elements="str", required=True),
            ray_port=dict(type="int", required=True),
            worker_ports=dict(type="list", elements="int", required=True),
            open_ports=dict(type="list", elements="int", default=[]),
            engine_ports=dict(type="list", elements="int", default=[]),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        with open(RANGE_FILE, encoding="ascii", errors="replace") as fh:
            ephemeral = fh.read(64)
    except OSError as exc:
        module.fail_json(msg=f"cannot read {RANGE_FILE}: {exc}")
    try:
        result = rules(p["peers"], p["ray_port"], p["worker_ports"], ephemeral, p["open_ports"], p["engine_ports"])
    except FirewallError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
