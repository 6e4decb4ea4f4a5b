"""The lab's hosts only: keep the bytecode Python compiles for modules it imports from a zip
file (every Ansible module run imports ansible.module_utils from its payload's zip and
compiles it again: about half of a module's 0.25 s). Keyed by the interpreter's magic
number and the source's SHA-256; any failure falls back to compiling. Installed by
lab/lib/hosts.sh at each host start; see lab/README.md."""
import hashlib
import importlib.util
import marshal
import os
import zipimport

_DIR = "/var/cache/lab-zipimport"
_compile = zipimport._compile_source


def _cached(pathname, source):
    key = hashlib.sha256(importlib.util.MAGIC_NUMBER + source).hexdigest()
    path = os.path.join(_DIR, key)
    try:
        with open(path, "rb") as fh:
            return marshal.loads(fh.read())
    except (OSError, ValueError, EOFError, TypeError):
        pass
    code = _compile(pathname, source)
    try:
        os.makedirs(_DIR, mode=0o755, exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "wb") as fh:
            fh.write(marshal.dumps(code))
        os.replace(tmp, path)
    except OSError:
        pass
    return code


zipimport._compile_source = _cached
