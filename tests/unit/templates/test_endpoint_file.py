"""The consumers' endpoint file (roles/serving_endpoint's endpoint.env.j2) configures the
official openai client from the file alone, as an application would load it into its
environment: with the endpoint's key, and on a keyless site with vLLM's placeholder, where the
client would otherwise refuse to start ("Missing credentials")."""
from __future__ import annotations

from pathlib import Path

import jinja2
import openai
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = ROOT / "roles" / "serving_endpoint" / "templates" / "etc" / "vllm-fleet" / "endpoint.env.j2"
DEFAULTS = ROOT / "roles" / "vllm_fleet_defaults" / "defaults" / "main.yml"
URL = "http://192.0.2.11:8000/v1"


def render(api_key: str) -> str:
    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.filters["comment"] = lambda text: f"# {text}"
    keyless = yaml.safe_load(DEFAULTS.read_text())["vllm_fleet_keyless_api_key"]
    return env.from_string(TEMPLATE.read_text()).render(
        ansible_managed="Ansible managed", serving_endpoint_mode="direct",
        __serving_endpoint_urls={"direct": URL}, __serving_endpoint_model="model",
        serving_endpoint_api_key=api_key, vllm_fleet_keyless_api_key=keyless)


def environment(text: str) -> dict[str, str]:
    """The file as `set -a; . endpoint.env` or systemd's EnvironmentFile= loads it."""
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def client_from(env: dict[str, str], monkeypatch) -> openai.OpenAI:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_ORG_ID", "OPENAI_PROJECT_ID"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return openai.OpenAI()


def test_a_keyed_endpoint_gives_the_client_its_key(monkeypatch):
    env = environment(render("sk-site-key"))
    client = client_from(env, monkeypatch)
    assert client.api_key == "sk-site-key" and str(client.base_url) == URL + "/"
    assert env["OPENAI_MODEL"] == "model" and env["VLLM_FLEET_MODE"] == "direct"


def test_a_keyless_endpoint_names_vllms_placeholder_and_the_client_starts(monkeypatch):
    env = environment(render(""))
    assert env["OPENAI_API_KEY"] == "EMPTY"
    client = client_from(env, monkeypatch)
    assert client.api_key == "EMPTY" and str(client.base_url) == URL + "/"


def test_without_the_placeholder_the_official_client_refuses_to_start(monkeypatch):
    """Why the file names one: the failure a keyless site's applications met before."""
    env = {k: v for k, v in environment(render("")).items() if k != "OPENAI_API_KEY"}
    with pytest.raises(openai.OpenAIError, match="api_key"):
        client_from(env, monkeypatch)
