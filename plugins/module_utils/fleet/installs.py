# Copyright: vllm-fleet contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Versioned installs side by side: each install's folder name, and which
folders an upgrade keeps.

An upgrade installs the candidate (vLLM, Ray and torch pins, or the model)
next to the running install, each in a folder of its own, so that a rollback
is a restart onto the old folder. This module holds the pure part:

- ``install_id``: ``<package>-<version>-<10 hex>``, the hash over the package,
  the version and the normalised pins, so that the same pins always name the
  same folder and any pin change a new one;
- ``install_step``: what provisioning does with the stable path the units
  run from (a link to the running install): move a real folder aside, point
  it at the wanted install, and whether that would restart a serving engine;
- ``running_model``: the model a serving unit runs, from systemd's view of
  its ExecStart, so that provisioning sees a model change as it sees a
  version change;
- ``prune_plan``: which folders stay (the running install, the candidate, the
  ``keep`` newest others as rollback targets) and which go, with the bytes
  each side takes; ``prune_installs`` the same over a host's folder listing
  and du's sizes.

Standard library only, besides the shared message quoting; nothing here raises but ``InstallsError``.
"""
from __future__ import annotations

import hashlib
import json
import re
import typing as t

from ansible.module_utils.shared.numeric import brief

# PEP 503/508: a project name, and its normal form.
PACKAGE = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?")
MAX_PACKAGE = 100
# A PEP 440 version as a folder may hold it (local versions too: 0.32.0+cpu).
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9.+!_-]*")
MAX_VERSION = 64
HASH_CHARS = 10
# What install_id returns, and so the only folders prune_plan may remove.
INSTALL_ID = re.compile(r"[a-z0-9](?:[a-z0-9-]*[a-z0-9])?-[A-Za-z0-9][A-Za-z0-9.+!_-]*-[0-9a-f]{%d}" % HASH_CHARS)
MAX_ID = MAX_PACKAGE + MAX_VERSION + HASH_CHARS + 2
# A lock file is some kB; a pin list of thousands is no install's.
MAX_REQUIREMENTS = 1 << 20
MAX_PINS = 10000
MAX_KEEP = 20
MAX_INSTALLS = 1000
MAX_BYTES = 2 ** 63
# systemd's ExecStart property of one command: the argv of a vLLM unit is some kB.
MAX_EXEC_START = 1 << 20
_SEPARATORS = re.compile(r"[-_.]+")
# pip's comment: a '#' at a line's start or after whitespace ('#egg=' in a URL is none).
_COMMENT = re.compile(r"(?:^|\s)#.*")
_PIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class InstallsError(ValueError):
    """A package, version, pin list or folder listing that cannot be used; the message says what to check."""


def normal_name(name: str) -> str:
    """A project name's PEP 503 form: lower case, each run of '-', '_' and '.' one '-'."""
    return _SEPARATORS.sub("-", name).lower()


def _checked(package: t.Any, version: t.Any) -> tuple[str, str]:
    if not isinstance(package, str) or len(package) > MAX_PACKAGE or not PACKAGE.fullmatch(package) \
            or ".." in package:
        raise InstallsError("the package %s is no project name: letters, digits, '-', '_' and '.', starting and"
                            " ending with a letter or digit, at most %d characters" % (brief(package), MAX_PACKAGE))
    if not isinstance(version, str) or len(version) > MAX_VERSION or not VERSION.fullmatch(version) \
            or ".." in version:
        raise InstallsError("the version %s of %s is no version: letters, digits, '.', '+', '!', '_' and '-',"
                            " starting with a letter or digit, no '..', at most %d characters (e.g. 0.32.0+cpu)"
                            % (brief(version), package, MAX_VERSION))
    return normal_name(package), version


def normal_pins(requirements: str | t.Sequence[str]) -> list[str]:
    """The pins of a lock file's text or a list of ``name==version`` lines,
    normalised: continuations joined, comments and blank lines dropped,
    whitespace removed, each name in its PEP 503 form, sorted, each once."""
    texts = [requirements] if isinstance(requirements, str) else requirements
    if not isinstance(texts, (list, tuple)) or len(texts) > MAX_PINS or not all(isinstance(r, str) for r in texts):
        raise InstallsError("the requirements must be a lock file's text or a list of at most %d 'name==version'"
                            " strings, got %s" % (MAX_PINS, brief(requirements)))
    size = sum(len(text) for text in texts)
    if size > MAX_REQUIREMENTS:
        raise InstallsError("the requirements are %d characters, over %d: pass the lock file's pins"
                            % (size, MAX_REQUIREMENTS))
    pins = set()
    for text in texts:
        for line in re.sub(r"\\\r?\n", " ", text).splitlines():
            pin = "".join(_COMMENT.sub("", line).split())
            name = _PIN_NAME.match(pin)
            if name:  # an option line ('--hash=', '-e') stays as written, less its whitespace
                pin = normal_name(name.group(0)) + pin[name.end():]
            if pin:
                pins.add(pin)
    return sorted(pins)


def comparable_pins(requirements: str | t.Sequence[str]) -> list[str]:
    """``normal_pins`` in lower case, versions too: the form ``pip_list_pins``
    gives a venv's contents in (pip lists versions in lower case), so that a
    wanted pin is in a venv exactly when this list holds it."""
    return sorted({pin.lower() for pin in normal_pins(requirements)})


def lock_version_problem(requirements: str | t.Sequence[str], package: t.Any, version: t.Any,
                         lock_file: str = "the lock file") -> str:
    """Why a lock file cannot install ``package`` at ``version``: it pins another version, or
    none of the package; '' when it pins exactly that one. The version asked is the version
    that runs: a lock pinning 0.32.0 under vllm_install_version 0.31.0 would install 0.32.0
    in an install named 0.31.0."""
    package, version = _checked(package, version)
    name = normal_name(package)
    pinned = sorted(pin.split("==", 1)[1] for pin in normal_pins(requirements)
                    if pin.split("==", 1)[0] == name and "==" in pin)
    if pinned == [version]:
        return ""
    what = ("pins %s==%s" % (package, " and ==".join(pinned))) if pinned else ("pins no %s" % package)
    return ("%s %s, but vllm_install_version asks for %s: name the lock file made for %s "
            "(vllm_install_lock_file), or ask for the version the lock pins" % (lock_file, what, version, version))


def pip_list_pins(pip_list: t.Any) -> list[str]:
    """What a venv holds, as ``comparable_pins``: from the text of ``pip list
    --format=json`` ('' or None: an empty or missing venv)."""
    if pip_list is None or (isinstance(pip_list, str) and not pip_list.strip()):
        return []
    if not isinstance(pip_list, str) or len(pip_list) > MAX_REQUIREMENTS:
        raise InstallsError("pip list's output must be JSON text of at most %d characters, got %s"
                            % (MAX_REQUIREMENTS, brief(pip_list)))
    try:
        listed = json.loads(pip_list)
    except ValueError as exc:
        raise InstallsError("pip list's output is no JSON (%s): %s" % (exc, brief(pip_list))) from None
    if not isinstance(listed, list) or not all(
            isinstance(d, dict) and isinstance(d.get("name"), str) and isinstance(d.get("version"), str)
            for d in listed):
        raise InstallsError("pip list's output must be a list of {name, version}, got %s" % brief(listed))
    return comparable_pins(["%s==%s" % (d["name"], d["version"]) for d in listed])


def install_id(package: str, version: str, requirements: str | t.Sequence[str]) -> str:
    """The folder name of one install: ``<package>-<version>-<10 hex of sha256>``."""
    name, version = _checked(package, version)
    pins = normal_pins(requirements)
    digest = hashlib.sha256(json.dumps([name, version, pins]).encode("utf-8")).hexdigest()
    return "%s-%s-%s" % (name, version, digest[:HASH_CHARS])


def _valid_id(value: t.Any, what: str) -> str:
    if not isinstance(value, str) or len(value) > MAX_ID or not INSTALL_ID.fullmatch(value) or ".." in value:
        raise InstallsError("%s %s is no install id: <package>-<version>-<%d hex>, as install_id() names a folder"
                            % (what, brief(value), HASH_CHARS))
    return value


def _listing(installs: t.Any) -> dict[str, dict]:
    """``installs`` by id, each checked: what the installs folder holds."""
    if not isinstance(installs, (list, tuple)) or len(installs) > MAX_INSTALLS:
        raise InstallsError("installs must be a list of {id, bytes, mtime} objects (the installs folder's"
                            " entries), got %s" % brief(installs))
    by_id: dict[str, dict] = {}
    for i, item in enumerate(installs):
        if not isinstance(item, dict) or not {"id", "bytes", "mtime"} <= set(item):
            raise InstallsError("installs[%d] must be an object with id, bytes and mtime, got %s" % (i, brief(item)))
        key = _valid_id(item["id"], "installs[%d]'s id" % i)
        if key in by_id:
            raise InstallsError("installs names %s twice: list each folder once" % brief(key))
        size, mtime = item["bytes"], item["mtime"]
        if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size < MAX_BYTES:
            raise InstallsError("install %s's bytes is %s: a size is a whole number of bytes from 0 to 2**63 - 1"
                                % (key, brief(size)))
        # Compared, not float()ed: an int past float's range would raise OverflowError; nan fails both.
        if isinstance(mtime, bool) or not isinstance(mtime, (int, float)) or not -1e12 < mtime < 1e12:
            raise InstallsError("install %s's mtime is %s: a modification time is finite seconds since the epoch"
                                " (under 1e12)"
                                % (key, brief(mtime)))
        by_id[key] = {"id": key, "bytes": size, "mtime": float(mtime)}
    return by_id


def prune_plan(installs: t.Sequence[dict], current: str, candidate: str | None = None,
               keep: int = 2) -> dict:
    """Which install folders stay and which go.

    ``current`` (the running install, which must be listed) and ``candidate``
    (the one being installed, listed or not yet) always stay; of the others,
    the ``keep`` newest by mtime stay as rollback targets (ties: by id), and
    the rest go. Returns ``{keep, remove, bytes_kept, bytes_freed, reason}``,
    ``reason`` saying for each listed id why."""
    by_id = _listing(installs)
    _valid_id(current, "current")
    if current not in by_id:
        raise InstallsError("current %s is not among the %d listed installs: list the installs folder again, and"
                            " check that the running engine's install is the one named" % (current, len(by_id)))
    if candidate is not None:
        _valid_id(candidate, "candidate")
    if isinstance(keep, bool) or not isinstance(keep, int) or not 0 <= keep <= MAX_KEEP:
        raise InstallsError("keep must be a whole number of rollback targets from 0 to %d, got %s"
                            % (MAX_KEEP, brief(keep)))
    reason = {current: "the running install"}
    if candidate in by_id and candidate != current:
        reason[candidate] = "the candidate"
    pinned = list(reason)
    others = sorted((i for i in by_id.values() if i["id"] not in reason), key=lambda i: (-i["mtime"], i["id"]))
    kept = [i["id"] for i in others[:keep]]
    removed = [i["id"] for i in others[keep:]]
    for n, key in enumerate(kept, 1):
        reason[key] = "rollback target %d of %d (newest first)" % (n, keep)
    for key in removed:
        reason[key] = "older than the %d newest rollback targets: frees %d bytes" % (keep, by_id[key]["bytes"])
    stays = pinned + kept
    return {"keep": stays, "remove": removed, "bytes_kept": sum(by_id[k]["bytes"] for k in stays),
            "bytes_freed": sum(by_id[k]["bytes"] for k in removed), "reason": reason}


def install_step(stable: str, wanted_id: str, link: t.Any, serving: bool, legacy_id: str | None = None,
                 legacy_matches: bool = False, restart_serving: bool = False) -> dict:
    """What provisioning does with the stable path the engine's units run from.

    ``stable`` is that path (``vllm_install_venv``, /opt/vllm); the installs
    live beside it in ``<stable>-installs/<id>``. ``link`` is what is at the
    stable path now: ``None`` (nothing), ``""`` (a real folder: the layout
    before versioned installs) or the link's target. ``legacy_id`` names that
    real folder's own install (``install_id`` over its pip list) and
    ``legacy_matches`` says whether it holds every wanted pin.

    Returns ``{target, current, adopt_to, switch, restart, refuse}``:
    ``target`` the wanted install's folder; ``current`` the install the stable
    path reaches now (``""`` when none); ``adopt_to`` where a real folder moves
    (its own install's folder; ``""`` when none moves); ``switch`` whether the
    link then points somewhere new; ``restart`` whether a serving engine would
    then run another install; ``refuse`` whether provisioning must stop before
    any change, because it would restart a serving engine undrained and
    that outage was not accepted."""
    if not isinstance(stable, str) or not stable.startswith("/") or stable.rstrip("/") == "" \
            or "\0" in stable or len(stable) > 4096:
        raise InstallsError("the stable path %s must be an absolute folder path other than /" % brief(stable))
    stable = stable.rstrip("/")
    installs = stable + "-installs"
    target = "%s/%s" % (installs, _valid_id(wanted_id, "the wanted install"))
    if link is None:
        current, adopt_to = "", ""
    elif link == "":
        if legacy_matches:
            adopt_to = target
        elif legacy_id is None:
            raise InstallsError("%s is a real folder: its own install id (legacy_id) is needed to move it aside"
                                % stable)
        else:
            adopt_to = "%s/%s" % (installs, _valid_id(legacy_id, "the real folder's install"))
        current = adopt_to
    elif isinstance(link, str) and link.startswith("/"):
        current, adopt_to = link.rstrip("/"), ""
    else:
        raise InstallsError("%s is a link to %s: the installs' links are absolute; point it at the running install"
                            " under %s/ by hand, then run again" % (stable, brief(link), installs))
    switch = current != target or bool(adopt_to)
    # Moving a real folder that holds the wanted pins changes no file the engine reads.
    restart = bool(serving) and current != target
    return {"target": target, "current": current, "adopt_to": adopt_to, "switch": switch, "restart": restart,
            "refuse": restart and not restart_serving}


def running_model(exec_start: t.Any) -> str:
    """The model a vLLM unit serves, read from systemd's ``ExecStart``
    property (``systemctl show``: ``{ path=... ; argv[]=/opt/vllm/bin/vllm
    serve /srv/models/m --host ... ; ... }``): the text after ``serve`` up to
    the first flag. ``""`` when it names none (no unit, another command);
    never raises. A model path holding `` --`` or `` ; `` reads short, and
    so differs from the wanted one: that is a refusal to read, not a wrong
    restart."""
    if not isinstance(exec_start, str) or len(exec_start) > MAX_EXEC_START:
        return ""
    start = exec_start.find("argv[]=")
    if start < 0:
        return ""
    argv = exec_start[start + len("argv[]="):]
    end = argv.find(" ; ")
    argv = argv if end < 0 else argv[:end]
    serve = argv.find(" serve ")
    if serve < 0:
        return ""
    rest = argv[serve + len(" serve "):]
    stop = rest.find(" --")
    return (rest if stop < 0 else rest[:stop]).strip()


MAX_DU = 1 << 20


def prune_installs(found: t.Any, du_text: t.Any, current: str, before: str | None = None,
                   keep: int = 2) -> dict:
    """``prune_plan`` over what the host's installs folder holds.

    ``found`` is the find module's ``files`` for that folder (each with a
    ``path`` and an ``mtime``), ``du_text`` the output of ``du --summarize
    --block-size=1`` over the same paths. Entries not named as installs are
    left out: they are never removed. ``before`` is the install the engine ran
    before this run (kept whatever its age: it may run until the restart);
    ``current`` the one the stable path now names, counted with 0 bytes when
    it does not exist yet (check mode on a new host)."""
    if not isinstance(du_text, str) or len(du_text) > MAX_DU:
        raise InstallsError("the installs' sizes must be du's output, at most %d characters, got %s"
                            % (MAX_DU, brief(du_text)))
    sizes = {}
    for line in du_text.splitlines():
        size, sep, path = line.partition("\t")
        if not sep or not size.isdigit() or len(size) > 19:
            raise InstallsError("du printed %s, not '<bytes>\\t<path>': run du --summarize --block-size=1"
                                % brief(line))
        sizes[path] = int(size)
    if not isinstance(found, (list, tuple)) or len(found) > MAX_INSTALLS:
        raise InstallsError("the installs folder's entries must be a list of at most %d {path, mtime} objects,"
                            " got %s" % (MAX_INSTALLS, brief(found)))
    listing = []
    for i, item in enumerate(found):
        if not isinstance(item, dict) or not isinstance(item.get("path"), str):
            raise InstallsError("entry %d of the installs folder has no path: %s" % (i, brief(item)))
        name = item["path"].rstrip("/").rpartition("/")[2]
        if len(name) > MAX_ID or not INSTALL_ID.fullmatch(name):
            continue
        if item["path"] not in sizes:
            raise InstallsError("du gave no size for %s: measure every listed install" % brief(item["path"]))
        listing.append({"id": name, "bytes": sizes[item["path"]], "mtime": item.get("mtime")})
    if isinstance(current, str) and current not in {entry["id"] for entry in listing}:
        listing.append({"id": current, "bytes": 0, "mtime": max([0.0] + [e["mtime"] for e in listing
                                                                     if isinstance(e["mtime"], (int, float))])})
    plan = prune_plan(listing, current, before, keep)
    if before in plan["reason"] and before != current:
        # prune_plan's "candidate" is, here, the install the switch replaced.
        plan["reason"][before] = "the install it replaced (it may run until the engine restarts)"
    size = {entry["id"]: entry["bytes"] for entry in listing}
    # One line an install, for the operator: what it is, why it stays or goes, its disk.
    plan["lines"] = ["%s: %s (%.2f GiB)" % (key, plan["reason"][key], size[key] / 2 ** 30)
                     for key in plan["keep"] + plan["remove"]]
    return plan
