"""Decisions across the fleet, taken on the controller through the filters:
one engine's diagnosis (diagnosis), the rolling restart's plan and report
(restart_plan) and schedules (schedule), a hub model's folder and a failed
download (hub_model), the ansible-playbook commands the advice prints
(commands), the engine record built from the inventory (record), vLLM's
ExecStart= argv (exec_start), and an upgrade's golden replay (golden) and
versioned installs side by side (installs)."""
