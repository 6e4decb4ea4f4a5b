"""A CpuCommunicator that never uses shared memory across hosts.

The CPU communicator takes its shared-memory path when every rank agrees on
one group name, which it derives from the distributed init method. Under Ray
every rank gets the same init method, so ranks on two hosts agree too, and
the shared-memory segment then cannot be opened on the second host
("open shm in SHMManager failed. errno: 2"). Ranks on different hosts must
fall back to torch.distributed (gloo over TCP), as vLLM's own multi-node mp
mode does. Test-lab use only.
"""
import socket

import torch
from vllm.distributed.device_communicators.cpu_communicator import CpuCommunicator


def _host_identity() -> str:
    try:
        with open("/etc/machine-id", encoding="ascii") as fh:
            return fh.read().strip() or socket.gethostname()
    except OSError:
        return socket.gethostname()


class CrossHostCpuCommunicator(CpuCommunicator):
    def _all_group_ranks_share_shm_group_name(self) -> bool:
        # Collective: every rank of the group runs this same sequence.
        hosts = [""] * self.world_size
        torch.distributed.all_gather_object(hosts, _host_identity(), group=self.device_group)
        same_name = super()._all_group_ranks_share_shm_group_name()
        return same_name and len(set(hosts)) == 1
