"""plugins/module_utils/host/gpu_throttle.py on real `nvidia-smi -q` output
(tests/fixtures/gpu-field/nvidia-smi/, each file's first line names its public source): the
active clock-event reasons, their counters and the temperatures, GB10's T.Limit margin
included; then hostile input: GpuStateError only, linear time."""
from __future__ import annotations

from pathlib import Path

import pytest
from ansible.module_utils.host import gpu_throttle as g
from hostile import MIB, any_text, assert_linear, mutated, raises_only
from hypothesis import given
from hypothesis import strategies as st

SMI = Path(__file__).resolve().parents[3] / "fixtures" / "gpu-field" / "nvidia-smi"


def capture(name: str) -> str:
    (path,) = SMI.glob(name + "*")
    return path.read_text()


def test_gb10_at_81_c_with_no_reason_active_is_not_throttled():
    (gpu,) = g.read(capture("01_gb10"))
    assert (gpu.bus_id, gpu.performance_state, gpu.active) == ("0000000F:01:00.0", "P0", [])
    # GB10's T.Limit is a margin: 13 degrees left before the slowdown, not a limit of 13 C.
    assert (gpu.temp_c, gpu.t_limit_margin_c, gpu.slowdown_temp_c) == (81, 13, None)
    assert gpu.counters_us["SW Thermal Slowdown"] == 903158  # it throttled before, not now
    assert g.throttled([gpu]) is None


def test_an_active_power_cap_is_a_throttle_naming_the_reason_and_the_heat():
    gpus = g.read(capture("02_rtx"))
    assert gpus[0].active == ["SW Power Cap"]
    assert g.throttled(gpus) == "GPU 00000000:0B:00.0: SW Power Cap active at 77 C (slowdown at 97 C)"


def test_counters_without_temperatures():
    (gpu,) = g.read(capture("03_rtxpro6000"))
    assert (gpu.performance_state, gpu.counters_us["SW Power Capping"], gpu.temp_c) == ("P8", 1202176, None)


def test_the_old_label_with_na_subreasons():
    """Before driver 530 the section is "Clocks Throttle Reasons"; the capture is an excerpt of
    one GPU's block, so its GPU line is put back first."""
    text = capture("04_old_label").split("\n", 1)[1]
    (gpu,) = g.read("GPU 00000000:01:00.0\n" + text)
    assert (gpu.performance_state, gpu.active) == ("P8", [])


def test_gb10_with_its_thermal_slowdown_active():
    """No capture of a GB10 with a reason active was found (tests/fixtures/gpu-field/README.md):
    the GB10 capture with its SW Thermal Slowdown line set Active, the shape the 530+ drivers
    print for any GPU (02's SW Power Cap)."""
    text = capture("01_gb10").replace("        SW Thermal Slowdown               : Not Active",
                                      "        SW Thermal Slowdown               : Active")
    gpus = g.read(text)
    assert g.throttled(gpus) == ("GPU 0000000F:01:00.0: SW Thermal Slowdown active at 81 C, "
                                 "13 C below its slowdown point")


@pytest.mark.parametrize("reason", ["Idle", "Applications Clocks Setting", "Display Clock Setting", "Sync Boost"])
def test_settings_are_no_throttle(reason):
    text = ("GPU 00000000:01:00.0\n    Clocks Event Reasons\n"
            f"        {reason:<34}: Active\n    Temperature\n        GPU Current Temp : 50 C\n")
    (gpu,) = g.read(text)
    assert gpu.active == [reason] and g.throttled([gpu]) is None


def test_a_key_after_the_section_is_not_a_reason():
    text = ("GPU 00000000:01:00.0\n    Clocks Event Reasons\n        SW Power Cap : Not Active\n"
            "    Persistence Mode : Active\n")
    assert g.read(text)[0].active == []


@pytest.mark.parametrize("text, words", [
    ("", "no GPU"), ("No devices were found\n", "no GPU"),
    (capture("05_gb10"), "no GPU"),  # the CSV query is another reading (host/nvidia_smi.py)
    (None, "str or bytes"), (3, "str or bytes"),
])
def test_no_gpu_or_not_text_is_the_documented_error(text, words):
    with pytest.raises(g.GpuStateError, match=words):
        g.read(text)


# --- hostile input -----------------------------------------------------------------------------

REAL_LINES = [line for name in ("01_gb10", "02_rtx", "03_rtxpro6000") for line in capture(name).splitlines()
              if not line.startswith("# ")]


def _checked(text) -> None:
    gpus = raises_only(g.GpuStateError, g.read, text)
    if gpus is not None:
        why = g.throttled(gpus)
        assert why is None or why.startswith("GPU ")
        for gpu in gpus:
            assert all(r in why for r in gpu.active if r in g.THROTTLES) if why else True


@given(any_text())
def test_any_text(text):
    _checked(text)


@given(st.binary(max_size=2000))
def test_any_bytes(raw):
    _checked(raw)


@given(mutated(REAL_LINES))
def test_real_lines_mutated(text):
    _checked(text)


def test_reading_is_linear():
    block = capture("02_rtx").split("\n", 1)[1]
    assert_linear(g.read, lambda size: block * (size // len(block)), small=MIB // 4, factor=8)
    assert_linear(lambda t: raises_only(g.GpuStateError, g.read, t),
                  lambda size: "GPU 00000000:01:00.0\n" + "a: " * size, small=MIB // 4, factor=8)
