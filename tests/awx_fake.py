"""A fake AWX API v2 server on 127.0.0.1 for tests/unit/test_awx_restart.py.

It mimics only what awx.awx 24.6.1's credential, project, inventory,
inventory_source, job_template and schedule modules and its controller_api
lookup ask of AWX (read in the collection's module_utils/controller_api.py,
the six modules and the lookup), checked by that test, and no more:

* ``/api/v2/<kind>/``: GET lists, filtered by any field (``name=``,
  ``organization=``, get_one's ``or__id=``/``or__name=``), paged by
  ``page_size``/``page``; POST creates (id, ``url``, ``related``).
* ``/api/v2/<kind>/<id>/``: GET, PATCH, DELETE (204).
* ``<job template>/survey_spec/``: GET ({} when none), POST, DELETE.
* ``<job template>/credentials/``: GET the list, POST ``{id}`` to associate
  and ``{id, disassociate: true}`` to take one away; as AWX, it refuses a
  second credential of one type (and vault id) on a template: "Cannot
  assign multiple Machine credentials." (400).
* Each project POST or PATCH starts an update that is already "successful"
  (``/api/v2/project_updates/<id>/``), for the project module's ``wait``.
* ``<template>/schedules/``: GET. ``/api/v2/unified_job_templates/``:
  projects, inventory sources and job templates (GET only), which share one
  id sequence as in AWX.

Seeded: organization "Default" (1), credential types "Machine" (1) and
"Vault" (2), no execution environments. Every answer carries
``X-API-Product-Name: AWX`` and ``X-API-Product-Version: 24.6.1``; every
request needs ``Authorization: Bearer <token>`` (401 otherwise). A survey
spec is checked as AWX checks it; credential secrets are answered as
``$encrypted$``, and a credential carries its type's namespace as ``kind``
(``ssh`` for Machine), as AWX does. Unlike AWX, fields are stored as sent:
AWX turns a null char field (the inventory module sends ``kind: null``)
into "", so that module PATCHes on every run against a real AWX, reporting
no change, where here it sends nothing. Requests are recorded in
``requests``, objects kept in ``objects[kind]`` (lists), sub-resources in
``related[(kind, id, name)]``.
"""
from __future__ import annotations

import http.server
import json
import threading
from urllib.parse import parse_qs, urlencode, urlsplit

PRODUCT = {"X-API-Product-Name": "AWX", "X-API-Product-Version": "24.6.1"}
API = "/api/v2/"
# Kinds that are unified job templates: one id sequence, one combined list.
UJT = ("projects", "inventory_sources", "job_templates")
# The sub-resources each kind's ``related`` names; of those, the many-to-many
# relations that take {id} / {id, disassociate} are ASSOCIATIONS.
RELATED = {"job_templates": ("survey_spec", "credentials", "schedules"), "projects": ("schedules",),
           "inventory_sources": ("schedules",)}
ASSOCIATIONS = ("credentials",)
# Foreign keys a POST or PATCH may name, and the kind each must exist in.
REFS = {"organization": "organizations", "credential_type": "credential_types", "project": "projects",
        "source_project": "projects", "inventory": "inventories", "credential": "credentials",
        "execution_environment": "execution_environments", "default_environment": "execution_environments",
        "unified_job_template": "unified_job_templates"}
SECRET_INPUTS = {"password", "ssh_key_data", "ssh_key_unlock", "become_password", "vault_password"}
# What AWX answers for fields a module reads but never sends.
DEFAULTS = {"projects": {"scm_revision": "", "status": "successful"}}


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True


class FakeAWX:
    """``with FakeAWX() as awx: awx.url``; ``awx.token`` is the only token it takes."""

    def __init__(self, token: str = "t0ken-for-the-fake"):
        self.token = token
        self.requests = []      # dicts: method, path, query (parse_qs), body (JSON or None)
        self.objects = {k: [] for k in ("organizations", "credential_types", "credentials", "projects",
                                        "project_updates", "inventories", "inventory_sources", "job_templates",
                                        "schedules", "execution_environments")}
        self.related = {}       # (kind, id, name) -> survey spec dict, or list of associated ids
        self._ids = {}
        self.lock = threading.Lock()
        self._create("organizations", {"name": "Default"})
        self._create("credential_types", {"name": "Machine", "kind": "ssh", "namespace": "ssh"})
        self._create("credential_types", {"name": "Vault", "kind": "vault", "namespace": "vault"})
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)

    def __enter__(self) -> FakeAWX:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def writes(self, since: int = 0) -> list:
        """The POST, PATCH and DELETE requests from index ``since`` on."""
        return [r for r in self.requests[since:] if r["method"] != "GET"]

    def one(self, kind: str, **fields) -> dict:
        """The single stored object of ``kind`` with these field values."""
        found = [o for o in self._list(kind) if all(o.get(k) == v for k, v in fields.items())]
        assert len(found) == 1, (kind, fields, found)
        return found[0]

    # --- the store ---------------------------------------------------------------

    def _list(self, kind: str) -> list:
        return [o for k in UJT for o in self.objects[k]] if kind == "unified_job_templates" else self.objects[kind]

    def _find(self, kind: str, id_):
        if kind not in self.objects and kind != "unified_job_templates":
            return None
        return next((o for o in self._list(kind) if str(o["id"]) == str(id_)), None)

    def _create(self, kind: str, body: dict) -> dict:
        seq = "unified_job_templates" if kind in UJT else kind
        self._ids[seq] = self._ids.get(seq, 0) + 1
        url = "%s%s/%d/" % (API, kind, self._ids[seq])
        obj = dict(DEFAULTS.get(kind, {}), id=self._ids[seq], type={"inventories": "inventory"}.get(kind, kind[:-1]),
                   url=url, related={r: url + r + "/" for r in RELATED.get(kind, ())}, summary_fields={})
        obj.update(body)
        self.objects[kind].append(obj)
        return obj

    def _update_project(self, project: dict) -> dict:
        """Start a project update that has already succeeded; AWX answers with it as current_update."""
        update = self._create("project_updates", {"name": project["name"], "project": project["id"],
                                                  "status": "successful", "failed": False,
                                                  "finished": "2026-01-01T00:00:00Z", "scm_revision": "f4ce"})
        project.update(scm_revision="f4ce", status="successful")
        project["related"].update(last_update=update["url"])
        summary = project["summary_fields"]
        summary["last_update"] = {"id": update["id"], "status": "successful", "failed": False}
        return dict(project, summary_fields=dict(summary, current_update=summary["last_update"]))

    def _shown(self, obj: dict) -> dict:
        if "inputs" not in obj:
            return obj
        kind = (self._find("credential_types", obj.get("credential_type")) or {}).get("namespace")
        return dict(obj, kind=kind,
                    inputs={k: "$encrypted$" if k in SECRET_INPUTS and v else v for k, v in obj["inputs"].items()})

    def _same_type(self, ids: list, credential: dict):
        """The name of the type an associated credential shares with ``credential`` (AWX's unique_hash:
        the type, and the vault id for a vault credential), or None."""
        def key(c):
            return c.get("credential_type"), (c.get("inputs") or {}).get("vault_id")
        same = any(key(self._find("credentials", i) or {}) == key(credential) for i in ids)
        return (self._find("credential_types", credential.get("credential_type")) or {}).get("name") if same else None

    def _bad_refs(self, body: dict):
        for field, kind in REFS.items():
            if body.get(field) is not None and self._find(kind, body[field]) is None:
                return {field: ['Invalid pk "%s" - object does not exist.' % body[field]]}
        return None

    # --- HTTP -------------------------------------------------------------------

    def _handler(self):
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                fake._serve(self, "GET")

            def do_POST(self):
                fake._serve(self, "POST")

            def do_PATCH(self):
                fake._serve(self, "PATCH")

            def do_DELETE(self):
                fake._serve(self, "DELETE")

            def log_message(self, *args):
                pass

        return Handler

    def _answer(self, h, status: int, body=None) -> None:
        raw = b"" if body is None else json.dumps(body).encode()
        h.send_response(status)
        for name, value in PRODUCT.items():
            h.send_header(name, value)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(raw)))
        h.end_headers()
        h.wfile.write(raw)

    def _serve(self, h, method: str) -> None:
        url = urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        body = json.loads(raw) if raw else None
        query = parse_qs(url.query)
        with self.lock:
            self.requests.append({"method": method, "path": url.path, "query": query, "body": body})
            if h.headers.get("Authorization") != "Bearer " + self.token:
                return self._answer(h, 401, {"detail": "Authentication credentials were not provided."})
            parts = url.path[len(API):].strip("/").split("/") if url.path.startswith(API) else []
            if not parts or parts[0] not in self.objects and parts[0] != "unified_job_templates":
                return self._answer(h, 404, {"detail": "Not found."})
            status, answer = self._route(method, parts, query, body or {})
            return self._answer(h, status, answer)

    def _route(self, method: str, parts: list, query: dict, body: dict):
        kind = parts[0]
        if kind == "unified_job_templates" and method != "GET":
            return 405, {"detail": 'Method "%s" not allowed.' % method}
        if len(parts) == 1 and method == "GET":
            return 200, self._page(kind, self._list(kind), query)
        if len(parts) == 1 and method == "POST" and kind != "unified_job_templates":
            problem = self._bad_refs(body)
            if problem:
                return 400, problem
            obj = self._create(kind, body)
            return 201, self._update_project(obj) if kind == "projects" else self._shown(obj)
        obj = self._find(kind, parts[1]) if len(parts) > 1 else None
        if obj is None:
            return (404, {"detail": "Not found."}) if len(parts) > 1 else (405, {"detail": "Method not allowed."})
        if len(parts) == 2:
            if method == "GET":
                return 200, self._shown(obj)
            if method == "PATCH":
                problem = self._bad_refs(body)
                if problem:
                    return 400, problem
                obj.update(body)
                return 200, self._update_project(obj) if kind == "projects" else self._shown(obj)
            if method == "DELETE":
                self.objects[kind].remove(obj)
                if kind in UJT:  # AWX deletes a template's schedules with it
                    self.objects["schedules"] = [s for s in self.objects["schedules"]
                                                 if s.get("unified_job_template") != obj["id"]]
                return 204, None
        sub = parts[2] if len(parts) == 3 and parts[2] in RELATED.get(kind, ()) else None
        if sub == "survey_spec":
            key = (kind, obj["id"], sub)
            if method == "GET":
                return 200, self.related.get(key, {})
            if method == "POST":
                problem = _survey_problem(body)
                if problem:
                    return 400, {"error": problem}
                self.related[key] = body
            else:
                self.related.pop(key, None)
            return 200, None
        if sub == "schedules" and method == "GET":
            mine = [s for s in self.objects[sub] if s.get("unified_job_template") == obj["id"]]
            return 200, self._page(sub, mine, query)
        if sub in ASSOCIATIONS:
            ids = self.related.setdefault((kind, obj["id"], sub), [])
            if method == "GET":
                return 200, self._page(sub, [self._find(sub, i) or {"id": i} for i in ids], query)
            if method == "POST" and isinstance(body.get("id"), int):
                if body.get("disassociate"):
                    ids[:] = [i for i in ids if i != body["id"]]
                elif self._find(sub, body["id"]) is None:
                    return 400, {"msg": "Related object %s not found." % body["id"]}
                elif body["id"] not in ids and self._same_type(ids, self._find(sub, body["id"])):
                    return 400, {"error": "Cannot assign multiple %s credentials."
                                 % self._same_type(ids, self._find(sub, body["id"]))}
                elif body["id"] not in ids:
                    ids.append(body["id"])
                return 204, None
        return 405, {"detail": 'Method "%s" not allowed.' % method}

    def _page(self, kind: str, items: list, query: dict) -> dict:
        """AWX's list answer: AND of plain filters, OR of ``or__`` filters, then one page."""
        def same(obj, field, value):
            return str(obj.get(field)).lower() == value.lower() if isinstance(obj.get(field), bool) \
                else str(obj.get(field)) == value
        plain = {k: v[-1] for k, v in query.items() if k not in ("page", "page_size", "order_by")}
        ors = {k[4:]: v for k, v in plain.items() if k.startswith("or__")}
        ands = {k: v for k, v in plain.items() if not k.startswith("or__")}
        found = [o for o in items if all(same(o, k, v) for k, v in ands.items())
                 and (not ors or any(same(o, k, v) for k, v in ors.items()))]
        size, page = int(query.get("page_size", ["25"])[-1]), int(query.get("page", ["1"])[-1])
        after = "%s%s/?%s" % (API, kind, urlencode(dict(plain, page=page + 1, page_size=size)))
        return {"count": len(found), "results": [self._shown(o) for o in found[size * (page - 1):size * page]],
                "previous": None, "next": after if len(found) > size * page else None}


def _survey_problem(spec: dict):
    """What AWX's survey_spec POST refuses (a subset of JobTemplateSurveySpec._validate_spec_data)."""
    for field, typ in (("name", str), ("description", str), ("spec", list)):
        if not isinstance(spec.get(field), typ):
            return "Field '%s' is missing from survey spec." % field
    if not spec["spec"]:
        return "'spec' doesn't contain any items."
    variables = [q.get("variable") for q in spec["spec"]]
    if len(set(variables)) != len(variables):
        return "'variable' duplicated in survey spec."
    for idx, q in enumerate(spec["spec"]):
        for field in ("type", "question_name", "variable", "required"):
            if field not in q:
                return "'%s' missing from survey question %d." % (field, idx)
        if q["type"] in ("multiplechoice", "multiselect"):
            if "choices" not in q:
                return "Survey question %d of type %s must specify choices." % (idx, q["type"])
            choices = q["choices"].splitlines() if isinstance(q["choices"], str) else q["choices"]
            if q.get("default", "") not in ("", *choices):
                return "Default choice must be answered from the choices listed."
    return None
