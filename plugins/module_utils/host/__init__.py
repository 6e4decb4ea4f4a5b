"""One engine host, read where a module runs on it: the GPU preflight's checks
(gpu_preflight, with its checks by concern in preflight_*) and nvidia-smi's output (nvidia_smi), systemd's unit
properties (systemd), the Ray firewall's rules (ray_firewall), Ray's node table
(ray_cluster, which the power-cut recovery also runs on the host) and the vLLM
server's health (vllm_health)."""
