"""The watch on the lab (roles/fleet_watch, docs/watch.md), after the site and the serving
modes left the engine healthy and the watch running: Prometheus on lab3 scraping the head's
/metrics, the canary and node-exporter, with the toolkit's rules.

No playbook runs here: site.yml installed the watch (test_site.py), and fleet_watch's molecule
verify (test_molecule.py) checked its targets and rules and that only the heartbeat fires. This
file reads what Prometheus recorded meanwhile: every dashboard panel's query returns data, and,
proof 4 of the healing loop (quiet), since the engine's last start no alert fired.
"""
from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request

from labtools import REPO, on_host

PROMETHEUS = "http://10.200.0.13:9090/api/v1"
DASHBOARD = REPO / "roles" / "fleet_watch" / "files" / "grafana" / "vllm-fleet.json"


def query(path: str, **params) -> dict:
    with urllib.request.urlopen(f"{PROMETHEUS}/{path}?{urllib.parse.urlencode(params)}", timeout=30) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]


def test_every_dashboard_panel_returns_data():
    end = time.time()
    empty = []
    for panel in json.loads(DASHBOARD.read_text())["panels"]:
        for target in panel["targets"]:
            data = query("query_range", query=target["expr"], start=end - 600, end=end, step=15)
            if not data["result"]:
                empty.append(f"{panel['title']}: {target['expr']}")
    assert empty == [], f"panels with no data on the lab: {empty}"


def test_no_alert_fired_while_the_engine_stayed_healthy():
    """Proof 4 (quiet): from a minute after the engine's last start to now (the serving modes'
    cutovers under the session client's load, the molecule scenarios after it), no alert but
    the heartbeat fired, not even for one evaluation. The faults these tests make on purpose
    (a wedge for a cutover's few seconds, a gate killed) are shorter than any rule's window."""
    started = float(on_host("lab1", "systemctl show -p ActiveEnterTimestampMonotonic --value vllm.service"))
    uptime = float(on_host("lab1", "cut -d' ' -f1 /proc/uptime"))
    window = int(uptime - started / 1e6 - 60)
    assert window >= 120, f"the engine started only {window + 60} s ago: too short a window to call quiet"
    firing = 'ALERTS{alertstate="firing",alertname!="FleetWatchHeartbeat"}'
    fired = query("query", query=f"max_over_time({firing}[{window}s])")["result"]
    print(f"proof 4: no alert fired over the {window} s from a minute after the engine's last start")
    assert [r["metric"] for r in fired] == [], "alerts fired on a healthy engine"
    assert query("query", query='ALERTS{alertname="FleetWatchHeartbeat",alertstate="firing"}')["result"], \
        "the heartbeat does not fire: the rules are not evaluated"
