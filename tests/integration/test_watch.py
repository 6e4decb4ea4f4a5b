"""The watch on the lab (roles/fleet_watch, docs/watch.md), after the site and the serving
modes left the engine healthy and the watch running: Prometheus on lab3 scraping the head's
/metrics, the canary and node-exporter, with the toolkit's rules.

No playbook runs here: site.yml installed the watch (test_site.py), and fleet_watch's molecule
verify (test_molecule.py) checked its targets and rules. This file reads what Prometheus
recorded meanwhile: every dashboard panel's query returns data, and since the engine's last
start (end of test_site.py: the cutovers under load, the scenarios' checks) no alert fired.
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
    cutovers under load, every molecule verify), no alert but the heartbeat fired, not even
    for one evaluation."""
    started = float(on_host("lab1", "systemctl show -p ActiveEnterTimestampMonotonic --value vllm.service"))
    uptime = float(on_host("lab1", "cut -d' ' -f1 /proc/uptime"))
    since_start = uptime - started / 1e6
    window = int(since_start - 60)
    assert window >= 300, f"the engine started only {since_start:.0f} s ago: nothing to prove quiet over"
    firing = 'ALERTS{alertstate="firing",alertname!="FleetWatchHeartbeat"}'
    data = query("query", query=f"max_over_time({firing}[{window}s])")
    fired = [r["metric"] for r in data["result"]]
    print(f"quiet: no alert fired over the {window} s since the engine's last start (+60 s)")
    assert fired == [], f"alerts fired on a healthy engine: {fired}"
    heartbeat = query("query", query='ALERTS{alertname="FleetWatchHeartbeat",alertstate="firing"}')["result"]
    assert heartbeat, "the heartbeat does not fire: the rules are not evaluated"
