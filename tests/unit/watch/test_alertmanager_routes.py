"""roles/fleet_watch's alertmanager.yml: amtool accepts it, and the routes that repeat send as often
as docs/watch.md says, with production's values (the role's defaults) and with the lab's.

Alertmanager sends a firing group again at the first group_interval tick after repeat_interval has
passed since the last send, which it logs once the send is done (prometheus/alertmanager#676): a
repeat equal to the ticks' interval sends every second tick. A heartbeat route of 1m and 1m sent
every 2 minutes, past the lab's dead-man's timeout; the template derives the heartbeat's repeat
from its period (fleet_watch_heartbeat_period_s), one tick less.
"""

from __future__ import annotations

import math
import subprocess

import pytest
import yaml
from rule_tests import PROMTOOL, RENDERINGS, REPO, render, seconds, settings

TEMPLATE = REPO / "roles" / "fleet_watch" / "templates" / "etc" / "prometheus" / "alertmanager.yml.j2"
AMTOOL = PROMTOOL.parent / "amtool"
# What a send takes, from the tick to the log line (a webhook's round trip): well under a tick.
SEND = 2.0
URLS = {"fleet_watch_heartbeat_url": "http://127.0.0.1:9/heartbeat", "vllm_fleet_heal_url": "http://127.0.0.1:5000/alerts",
        "vllm_fleet_heal_token": "secret-token", "vllm_fleet_page_url": "http://127.0.0.1:9/page"}


def rendered(rendering: str, **values) -> str:
    return render(TEMPLATE, {**settings("fleet_watch", rendering), **URLS, **values})


def route(doc: dict, receiver: str) -> dict:
    """A child route with the settings it inherits from the top one."""
    top = doc["route"]
    child = next(r for r in top["routes"] if r["receiver"] == receiver)
    return {key: child.get(key, top.get(key)) for key in ("group_wait", "group_interval", "repeat_interval")}


def period(sends: dict) -> float:
    """Seconds between two sends of a group that keeps firing, unchanged, on a route with these settings."""
    tick, repeat = seconds(sends["group_interval"]), seconds(sends["repeat_interval"])
    return math.ceil((repeat + SEND) / tick) * tick


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_amtool_accepts_it(tmp_path, rendering):
    if not AMTOOL.is_file():
        raise AssertionError(f"amtool is missing at {AMTOOL}: run `make watch-tools` (make unit does it)")
    path = tmp_path / "alertmanager.yml"
    path.write_text(rendered(rendering))
    done = subprocess.run([str(AMTOOL), "check-config", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_the_heartbeat_comes_every_period(rendering):
    expected = settings("fleet_watch", rendering)["fleet_watch_heartbeat_period_s"]
    assert period(route(yaml.safe_load(rendered(rendering)), "fleet-heartbeat")) == expected


def test_productions_routes_are_a_minute_heartbeat_and_a_quarter_hour_heal():
    doc = yaml.safe_load(rendered("production"))
    assert route(doc, "fleet-heartbeat") == {"group_wait": "0s", "group_interval": "10s", "repeat_interval": "50s"}
    assert route(doc, "fleet-heal") == {"group_wait": "10s", "group_interval": "10s", "repeat_interval": "15m"}
    assert route(doc, "fleet-page") == {"group_wait": "10s", "group_interval": "1m", "repeat_interval": "4h"}


def test_a_period_off_the_routes_tick_is_not_kept():
    """Why the role's preflight wants a multiple of the tick: 25 s would send every 20 s."""
    assert period(route(yaml.safe_load(rendered("production", fleet_watch_heartbeat_period_s=25)),
                        "fleet-heartbeat")) == 20


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_the_loop_is_asked_again_within_a_tick_of_its_repeat(rendering):
    heal_repeat = seconds(settings("fleet_watch", rendering)["fleet_watch_heal_repeat_interval"])
    heal = route(yaml.safe_load(rendered(rendering)), "fleet-heal")
    assert heal_repeat < period(heal) <= heal_repeat + seconds(heal["group_interval"])


@pytest.mark.parametrize("rendering", RENDERINGS)
def test_the_dead_mans_timeout_outlasts_two_heartbeats(rendering):
    """The healing loop pages when no heartbeat came for fleet_heal_deadman_timeout: one lost
    heartbeat (a failed POST, a loop restarting) must not page."""
    heartbeat = settings("fleet_watch", rendering)["fleet_watch_heartbeat_period_s"]
    timeout = seconds(settings("fleet_heal", rendering)["fleet_heal_deadman_timeout"])
    assert timeout > 2 * heartbeat, (timeout, heartbeat)
