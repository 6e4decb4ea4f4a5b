"""The watch on the lab (roles/fleet_watch, docs/watch.md), after the site and the serving
modes left the engine healthy and the watch running: Prometheus on lab3 scraping the head's
/metrics, the canary and node-exporter, with the toolkit's rules.

No playbook runs here: site.yml installed the watch (test_site.py), and fleet_watch's molecule
verify (test_molecule.py) checked its targets and rules and that only the heartbeat fires. This
file reads what Prometheus recorded meanwhile: every dashboard panel's query returns data.
"""
from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request

from labtools import REPO

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
