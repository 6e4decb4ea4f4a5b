"""roles/fleet_watch's alertmanager.yml: amtool accepts it, and the routes that repeat send as often
as docs/watch.md says.

Alertmanager sends a firing group again at the first group_interval tick after repeat_interval has
passed since the last send, which it logs once the send is done (prometheus/alertmanager#676): a
repeat equal to the ticks' interval sends every second tick. A heartbeat route of 1m and 1m sent
every 2 minutes, past the lab's 90-s dead-man's timeout.
"""

from __future__ import annotations

import json
import math
import re
import subprocess

import jinja2
import pytest
import yaml
from rule_tests import PROMTOOL, REPO

TEMPLATE = REPO / "roles" / "fleet_watch" / "templates" / "etc" / "prometheus" / "alertmanager.yml.j2"
AMTOOL = PROMTOOL.parent / "amtool"
# What a send takes, from the tick to the log line (a webhook's round trip): well under a tick.
SEND = 2.0


def seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+)([smh])", text))


def rendered(heal_repeat: str) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["comment"] = lambda text: f"# {text}"
    env.filters["to_json"] = json.dumps
    return env.from_string(TEMPLATE.read_text()).render(
        ansible_managed="Ansible managed", fleet_watch_heal_repeat_interval=heal_repeat,
        fleet_watch_heartbeat_url="http://127.0.0.1:9/heartbeat", vllm_fleet_heal_url="http://127.0.0.1:5000/alerts",
        vllm_fleet_heal_token="secret-token", vllm_fleet_page_url="http://127.0.0.1:9/page")


def route(doc: dict, receiver: str) -> dict:
    """A child route with the settings it inherits from the top one."""
    top = doc["route"]
    child = next(r for r in top["routes"] if r["receiver"] == receiver)
    return {key: child.get(key, top.get(key)) for key in ("group_interval", "repeat_interval")}


def period(settings: dict) -> float:
    """Seconds between two sends of a group that keeps firing, unchanged."""
    tick, repeat = seconds(settings["group_interval"]), seconds(settings["repeat_interval"])
    return math.ceil((repeat + SEND) / tick) * tick


@pytest.mark.parametrize("heal_repeat", ["15m", "1m"])
def test_amtool_accepts_it(tmp_path, heal_repeat):
    if not AMTOOL.is_file():
        raise AssertionError(f"amtool is missing at {AMTOOL}: run `make watch-tools` (make unit does it)")
    path = tmp_path / "alertmanager.yml"
    path.write_text(rendered(heal_repeat))
    done = subprocess.run([str(AMTOOL), "check-config", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_heartbeat_comes_every_minute():
    assert period(route(yaml.safe_load(rendered("15m")), "fleet-heartbeat")) == 60


@pytest.mark.parametrize("heal_repeat", ["15m", "1m"])
def test_the_loop_is_asked_again_within_a_tick_of_its_repeat(heal_repeat):
    settings = route(yaml.safe_load(rendered(heal_repeat)), "fleet-heal")
    assert seconds(heal_repeat) < period(settings) <= seconds(heal_repeat) + 10
