"""Read ``nvidia-smi`` output: the default table, the CSV query, and the
whole-output failure messages.

Pure logic, no AnsibleModule: :func:`probe` runs the commands through the
``run`` that the ``gpu_preflight_info`` module hands it and reads their text. Tested over real captured output in
``tests/fixtures/nvidia-smi/`` (see its ``INDEX.md`` for the traps).

The module runs two commands:

* ``nvidia-smi`` (the table), for the driver version and the CUDA version the
  driver supports (its header is the only place that shows it: ``cuda_version``
  is not a query field), and to classify failures;
* ``nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used,driver_version,compute_cap --format=csv,nounits``
  (:data:`QUERY_ARGS`), for the full GPU names (the table truncates them) and
  the memory. It keeps the header so columns are mapped by name, never by
  position; the parser accepts units and no header too.

Unified memory (GB10 / DGX Spark, Jetson): the CSV prints ``[N/A]`` for
``memory.*`` and the table prints ``Not Supported``. That is read as
``memory_total_mib=None`` with ``unified_memory=True``, never as 0. Jetson's
table also prints ``N/A`` where the Bus-Id goes: that row is a GPU all the
same, with ``bus_id=None``.

Hostile output (a wrapper script, a broken driver, a terminal's noise) never
raises anything but :class:`NvidiaSmiError`: figures are ASCII digits of a
length nvidia-smi prints (``\\d`` and ``int()`` accept Arabic-Indic digits,
``isdigit()`` superscripts, ``int()`` refuses 4,300 digits), a CSV field past
the csv module's limit is unreadable output, and every pattern runs in linear
time on a line of any length.
"""
from __future__ import annotations

import csv
import re
from dataclasses import asdict, dataclass, field, replace

QUERY_FIELDS = ("index", "name", "uuid", "memory.total", "memory.used", "driver_version", "compute_cap")
QUERY_ARGS = ["--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,nounits"]

# What nvidia-smi prints for a value it cannot read. GB10 prints "[N/A]" in CSV
# and "Not Supported" in the table; "[Not Supported]" was only ever seen in
# third-party fixtures and is accepted defensively.
_NOT_AVAILABLE = {"n/a", "[n/a]", "not supported", "[not supported]", "[unknown error]", ""}
_MEMORY_FIELDS = ("memory.total", "memory.used", "memory.free")
# A GPU index as nvidia-smi prints it (a few ASCII digits).
_INDEX = re.compile(r"[0-9]{1,6}")
# What a failure line quotes in a message at most.
_MESSAGE_CHARS = 300
_KNOWN_COLUMNS = {"index", "name", "uuid", "pci.bus_id", "compute_cap", "driver_version", *_MEMORY_FIELDS}
_UNIT_FACTORS_MIB = {"kib": 1 / 1024, "mib": 1, "gib": 1024}


class NvidiaSmiError(Exception):
    """``nvidia-smi`` output that could not be read."""


class NvidiaSmiFailure(NvidiaSmiError):
    """``nvidia-smi`` ran but reported that it cannot see the GPUs.

    ``kind`` is one of :data:`FAILURES`' names; ``hint`` says what to do.
    """

    def __init__(self, kind: str, message: str, hint: str):
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.hint = hint


# (kind, pattern, hint). Whole-output messages; checked before any parsing,
# because "No devices were found" is output too (a "non-empty means GPUs" test
# is wrong). Order matters: the specific NVML failures come before the generic.
FAILURES = (
    (
        "driver_not_loaded",
        re.compile(r"couldn't communicate with the NVIDIA driver", re.I),
        "The NVIDIA kernel driver is not loaded. Install the driver (on DGX OS: the nvidia "
        "driver packages from the DGX repository), reboot if it was just installed, and read "
        "`dmesg | grep -i nvidia` (Secure Boot can refuse an unsigned module).",
    ),
    (
        "driver_library_mismatch",
        re.compile(r"Driver/library version mismatch", re.I),
        "The loaded kernel module and the user-space NVML library differ, usually after an "
        "unattended upgrade of the NVIDIA packages. Reboot the host, then hold the driver "
        "packages (apt-mark hold) so it does not recur.",
    ),
    (
        "no_devices",
        # [ \t]*, not \s*: \s spans newlines, and on a run of blank lines each of
        # them would rescan all that follow (quadratic).
        re.compile(r"^[ \t]*No devices were found", re.I | re.M),
        "The driver loaded but sees no GPU. Check `lspci | grep -i nvidia`, that the GPU is not "
        "bound to vfio or passed to a VM, and inside a container that the GPU is passed in "
        "(--gpus / CDI).",
    ),
    (
        "nvml_unknown_error",
        re.compile(r"Failed to initialize NVML: Unknown Error", re.I),
        "Typical inside a container whose device access was reset (for example by a systemd "
        "daemon-reload on the host): restart the container. On the host itself, reboot.",
    ),
    (
        "nvml_init_failed",
        re.compile(r"Failed to initialize NVML", re.I),
        "NVML could not start; run nvidia-smi on the host and follow its message, then reboot "
        "if the driver was just changed.",
    ),
    (
        "invalid_query",
        re.compile(r'Field "[^"]*" is not a valid field to query', re.I),
        "This driver's nvidia-smi does not know a queried field; the table is used instead.",
    ),
)


@dataclass
class Gpu:
    """One physical GPU. Memory in MiB; ``None`` when not queried or not reported."""

    index: int
    name: str | None = None
    uuid: str | None = None
    bus_id: str | None = None
    memory_total_mib: int | None = None
    memory_used_mib: int | None = None
    compute_cap: str | None = None
    mig_mode: str | None = None
    unified_memory: bool = False
    # Other queried CSV columns, as printed (None for N/A), e.g. pci.device_id.
    extra: dict = field(default_factory=dict)


@dataclass
class SmiReport:
    """What one ``nvidia-smi`` output says. ``source`` is ``table`` or ``csv``."""

    source: str
    gpus: list = field(default_factory=list)
    driver_version: str | None = None
    cuda_version: str | None = None

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    @property
    def unified_memory(self) -> bool:
        return any(g.unified_memory for g in self.gpus)

    def as_dict(self) -> dict:
        return {
            "gpus": [asdict(g) for g in self.gpus],
            "gpu_count": self.gpu_count,
            "driver_version": self.driver_version,
            "cuda_version": self.cuda_version,
            "unified_memory": self.unified_memory,
        }


def classify_failure(text: str) -> NvidiaSmiFailure | None:
    """The failure ``text`` reports, or None when it reports none. Never raises."""
    if not isinstance(text, str):
        return None
    for kind, pattern, hint in FAILURES:
        match = pattern.search(text)
        if match:
            line = next((ln.strip() for ln in text.splitlines() if pattern.search(ln)), match.group(0).strip())
            return NvidiaSmiFailure(kind, line[:_MESSAGE_CHARS], hint)
    return None


def _raise_on_failure(text: str) -> None:
    failure = classify_failure(text)
    if failure is not None:
        raise failure


def _available(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in _NOT_AVAILABLE


# Driver 580.126.09, CUDA 13.0, 595.84; a part of seven digits is no version.
_VERSION = re.compile(r"[0-9]{1,6}(?:\.[0-9]{1,6}){1,3}")
# Memory in MiB, KiB or GiB: twelve digits are an exbibyte in MiB.
_MEMORY = re.compile(r"([0-9]{1,12}(?:\.[0-9]{1,6})?)[ \t]*([KMG]iB)?", re.I | re.ASCII)


def _version(value: str | None) -> str | None:
    """A dotted version (two to four parts, ASCII digits), or None for N/A or anything else."""
    if not _available(value):
        return None
    match = _VERSION.fullmatch(value.strip())
    return match.group(0) if match else None


def _mib(value: str, unit: str | None = None) -> int:
    """``46068 MiB`` or ``46068`` (with the header's unit) as MiB; NvidiaSmiError otherwise."""
    match = _MEMORY.fullmatch(value.strip())
    if not match:
        raise NvidiaSmiError(f"cannot read the memory value {value[:_MESSAGE_CHARS]!r}")
    factor = _UNIT_FACTORS_MIB.get((match.group(2) or unit or "MiB").lower())
    if factor is None:
        raise NvidiaSmiError(f"cannot read the memory value {value[:_MESSAGE_CHARS]!r}: unknown unit "
                             f"{(unit or '')[:_MESSAGE_CHARS]!r}")
    return int(round(float(match.group(1)) * factor))


# ---- CSV -------------------------------------------------------------------

_HEADER_CELL = re.compile(r"[a-z][a-z0-9_.]*(?: \[([^\]]+)\])?")


def _is_header(cells: list) -> bool:
    return bool(cells) and all(_HEADER_CELL.fullmatch(c.strip()) for c in cells)


def parse_csv(text: str, columns=None) -> SmiReport:
    """Read ``nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]``.

    Columns come from the header when there is one; header-less output needs
    ``columns``, the query's field order. Rows become GPUs in order; ``index``
    is taken from its column when queried (the row's position when it is not
    an index). Raises :class:`NvidiaSmiError` only.
    """
    text = text if isinstance(text, str) else ""
    _raise_on_failure(text)
    try:
        rows = [r for r in csv.reader(text.splitlines(), skipinitialspace=True) if any(c.strip() for c in r)]
    except csv.Error as exc:  # a field past the csv module's 128 KiB limit
        raise NvidiaSmiError(f"nvidia-smi's CSV output is unreadable: {exc}") from None
    if not rows:
        raise NvidiaSmiError("nvidia-smi printed no CSV rows")
    units = {}
    if _is_header(rows[0]):
        names = []
        for cell in rows[0]:
            match = _HEADER_CELL.fullmatch(cell.strip())
            name = cell.strip().split(" ", 1)[0]
            names.append(name)
            if match.group(1):
                units[name] = match.group(1)
        rows = rows[1:]
    elif columns:
        names = [str(c).strip() for c in columns]
    else:
        raise NvidiaSmiError(
            "the CSV output has no header; pass the query's column order (columns=...)"
        )
    gpus = []
    driver = None
    for number, row in enumerate(rows):
        if len(row) != len(names):
            raise NvidiaSmiError(
                f"CSV row {number + 1} has {len(row)} values for {len(names)} columns: "
                f"{', '.join(row)[:_MESSAGE_CHARS]}"
            )
        values = {n: v.strip() for n, v in zip(names, row)}
        gpus.append(_gpu_from_csv(number, values, units))
        driver = driver or _version(values.get("driver_version"))
    return SmiReport(source="csv", gpus=gpus, driver_version=driver)


def _csv_bus_id(value):
    """A CSV cell's PCI address, or None for N/A or anything that is none."""
    value = value.strip() if value is not None else None
    return value if value and re.fullmatch(_PCI_ADDRESS, value) else None


def _gpu_from_csv(number: int, values: dict, units: dict) -> Gpu:
    def text(key):
        value = values.get(key)
        return value if _available(value) else None

    def mib(key):
        value = values.get(key)
        return _mib(value, units.get(key)) if _available(value) else None

    # Unified memory: memory was queried and nvidia-smi cannot report it.
    queried = [k for k in _MEMORY_FIELDS if k in values]
    unified = bool(queried) and not any(_available(values[k]) for k in queried)
    index = text("index")
    return Gpu(
        index=int(index) if index is not None and _INDEX.fullmatch(index) else number,
        name=text("name"),
        uuid=text("uuid"),
        bus_id=_csv_bus_id(text("pci.bus_id")),
        memory_total_mib=mib("memory.total"),
        memory_used_mib=mib("memory.used"),
        compute_cap=text("compute_cap"),
        unified_memory=unified,
        extra={k: text(k) for k in values if k not in _KNOWN_COLUMNS},
    )


# ---- the default table -----------------------------------------------------

# R610+ renamed "Driver Version" to "KMD Version" and "CUDA Version" to
# "CUDA UMD Version". Values can read "N/A" (Jetson) and have two parts (595.84).
_DRIVER = re.compile(r"(?:Driver|KMD) Version:[ \t]*(\S+)")
_CUDA = re.compile(r"CUDA(?: UMD)? Version:[ \t]*(\S+)")
_PERSISTENCE = ("On", "Off", "N/A")
# A PCI address, or N/A on an integrated GPU (Jetson Orin prints "| N/A   N/A |"
# for Bus-Id and Disp.A), each followed by the white space before Disp.A.
_PCI_ADDRESS = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]"
_BUS_ID = re.compile(r"(?:%s|N/A)\s" % _PCI_ADDRESS)
# Bounded ASCII figures, each starting a digit run: linear on a run of digits.
_MEMORY_CELL = re.compile(r"(?<![0-9])([0-9]{1,9})[ \t]*MiB[ \t]*/[ \t]*([0-9]{1,9})[ \t]*MiB")
_BORDER = re.compile(r"^[|+][-=+|]+$")
_SECTION_END = re.compile(r"^\|?\s*(MIG devices:|Processes:)")


def _cells(line: str) -> list:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _gpu_line(line: str):
    """``(index, name, bus_id)`` of a GPU block's first line, or None.

    The line is ``| index  name  persistence | bus-id ...``; the name may be
    truncated with "..." and holds spaces. The Bus-Id cell anchors it (MIG and
    process rows have none): a PCI address, or ``N/A`` on an integrated GPU,
    whose ``bus_id`` is then None. Read by splitting the cells, not by one pattern
    (a lazy name between runs of white space backtracks cubically on a line
    of spaces).
    """
    if not line.startswith("|"):
        return None
    cells = line.split("|", 3)
    if len(cells) < 3:
        return None
    words = cells[1].split()
    if len(words) < 3 or words[-1] not in _PERSISTENCE or not _INDEX.fullmatch(words[0]):
        return None
    bus = _BUS_ID.match(cells[2].lstrip())
    if not bus:
        return None
    first = cells[1].strip()
    name = first[len(words[0]):len(first) - len(words[-1])].strip()
    bus_id = bus.group(0)[:-1]
    return int(words[0]), name, bus_id if _available(bus_id) else None


def parse_table(text: str) -> SmiReport:
    """Read the default ``nvidia-smi`` table.

    Counts only complete GPU blocks (a first line with a Bus-Id and the line
    with the memory cell) above the ``MIG devices:`` and ``Processes:``
    tables, so MIG rows (which also read ``N MiB / M MiB``) are not GPUs.
    Raises :class:`NvidiaSmiError` only.
    """
    text = text if isinstance(text, str) else ""
    _raise_on_failure(text)
    lines = text.splitlines()
    header = next((line for line in lines if _DRIVER.search(line)), None)
    if header is None and not any(_gpu_line(line) for line in lines):
        raise NvidiaSmiError("this is not nvidia-smi's table: no driver version and no GPU row")
    driver = _version(_DRIVER.search(header).group(1)) if header else None
    cuda_match = _CUDA.search(header) if header else None
    cuda = _version(cuda_match.group(1)) if cuda_match else None
    gpus = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if _SECTION_END.match(line.strip()):
            break
        first = _gpu_line(line)
        if not first or i + 1 >= len(lines):
            i += 1
            continue
        second = _cells(lines[i + 1])
        if len(second) < 3:
            i += 1
            continue
        memory = second[1]
        used = total = None
        match = _MEMORY_CELL.search(memory)
        if match:
            used, total = int(match.group(1)), int(match.group(2))
        elif _available(memory):
            raise NvidiaSmiError(f"cannot read the memory cell {memory[:_MESSAGE_CHARS]!r} of GPU {first[0]}")
        mig = None
        third_line = lines[i + 2].strip() if i + 2 < len(lines) else ""
        if third_line.startswith("|") and not _gpu_line(third_line) and not _BORDER.match(third_line):
            third = _cells(third_line)
            if len(third) >= 3 and _available(third[-1]):
                mig = third[-1]
        gpus.append(
            Gpu(
                index=first[0],
                name=first[1],
                bus_id=first[2],
                memory_total_mib=total,
                memory_used_mib=used,
                mig_mode=mig,
                unified_memory=match is None,
            )
        )
        i += 2
    return SmiReport(source="table", gpus=gpus, driver_version=driver, cuda_version=cuda)


def merge(table: SmiReport, query: SmiReport | None) -> SmiReport:
    """Combine the table (versions, MIG mode, Bus-Id) with the CSV query
    (full names, UUIDs, compute capability, memory), matched by GPU index.

    Without a query, or when it disagrees on the GPU count, the table wins.
    """
    if query is None or query.gpu_count != table.gpu_count:
        return table
    by_index = {g.index: g for g in table.gpus}
    gpus = []
    for position, gpu in enumerate(query.gpus):
        row = by_index.get(gpu.index, table.gpus[position])
        unified = gpu.unified_memory or row.unified_memory

        def memory(key, gpu=gpu, row=row, unified=unified):
            if unified:
                return None
            value = getattr(gpu, key)
            return value if value is not None else getattr(row, key)

        gpus.append(
            replace(
                gpu,
                name=gpu.name or row.name,
                bus_id=gpu.bus_id or row.bus_id,
                memory_total_mib=memory("memory_total_mib"),
                memory_used_mib=memory("memory_used_mib"),
                mig_mode=row.mig_mode,
                unified_memory=unified,
            )
        )
    return SmiReport(
        source="table+csv",
        gpus=gpus,
        driver_version=table.driver_version or query.driver_version,
        cuda_version=table.cuda_version,
    )


def probe(smi: str, run, warn) -> tuple:
    """Run nvidia-smi at ``smi``: its table, then its CSV query for names and memory.
    ``run(argv)`` returns (rc, stdout, stderr); ``warn(text)`` reports a query that fell
    back to the table. Returns (report, None), or (None, the NvidiaSmiError that stopped it)."""
    rc, out, err = run([smi])
    failure = classify_failure(f"{out}\n{err}")
    if failure is not None:
        return None, failure
    if rc != 0:
        tail = " | ".join((err or out).strip().splitlines()[-2:])
        return None, NvidiaSmiError(f"nvidia-smi exited {rc}: {tail}")
    try:
        table = parse_table(out)
    except NvidiaSmiError as exc:
        return None, exc
    rc, out, err = run([smi] + QUERY_ARGS)
    query = None
    if rc == 0:
        try:
            query = parse_csv(out)
        except NvidiaSmiError as exc:
            warn(f"nvidia-smi's CSV query was unreadable ({exc}); GPU names and memory come from the table")
    else:
        why = classify_failure(f"{out}\n{err}")
        warn(f"nvidia-smi's CSV query failed ({why or (err or out).strip()[:200]});"
             " GPU names and memory come from the table")
    return merge(table, query), None
