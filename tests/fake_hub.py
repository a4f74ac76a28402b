"""A loopback fake of the Hugging Face Hub: the endpoints ``huggingface_hub``'s ``whoami``,
``create_repo`` and ``upload_folder`` call when Xet is off (``HF_HUB_DISABLE_XET=1``).

Point the client at it with ``HF_ENDPOINT=fake.root``. Served as huggingface_hub (read from its
2.4 source: ``hf_api.py``, ``_commit_api.py``, ``lfs.py``) sends them:

- ``GET /api/agent-harnesses``: an empty registry (huggingface_hub 2.x fetches it at most once a
  day for its user-agent, best effort; ``TELEMETRY`` names this path).
- ``GET /api/whoami-v2``: the account of the bearer token (``tokens``: token -> role, e.g.
  ``write`` or ``read``); 401 for any other token or none.
- ``POST /api/repos/create``: ``{name, organization, type, visibility|private}``; 409 when the
  repo exists (``create_repo(exist_ok=True)`` takes that as success).
- ``POST /api/validate-yaml``: the README's front matter parsed as YAML (PyYAML); it must be a
  mapping whose ``configs`` entries each have a ``config_name`` and ``data_files``, else 400
  with ``errors``.
- ``POST /api/{type}s/{repo}/preupload/{revision}``: each file's upload mode: ``lfs`` for a name
  ending in one of ``lfs_suffixes`` (as a .gitattributes pattern makes it) or from
  ``lfs_threshold`` bytes up, else ``regular`` (the real Hub decides by size and .gitattributes).
- ``POST /{prefix}{repo}.git/info/lfs/objects/batch``: basic-transfer actions (upload, verify)
  for objects not stored yet; ``PUT /lfs-upload/{oid}`` stores a body whose SHA-256 is its oid;
  ``POST /lfs-verify`` checks it arrived.
- ``POST /api/{type}s/{repo}/commit/{revision}``: the NDJSON commit (header, ``file`` base64,
  ``lfsFile`` by oid, deletions); an ``lfsFile`` whose object was never uploaded is refused.

Writes need a token with the ``write`` role. ``fail`` maps an endpoint's name (``commit``, ...)
to an HTTP status it answers with instead, for a test of a failed upload. Every request is
logged in ``requests`` as ``(method, path, authorised)``; a request to any other path gets 404
and is kept in ``unknown``.
Repos live in ``repos``: ``(type, repo_id) -> {"private", "files": {path: bytes}, "commits"}``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from urllib.parse import unquote, urlsplit

from fake_server import JSONHandler, LoopbackFake, serve_until_killed

USER = "fake-user"


class HubHandler(JSONHandler):
    def body(self) -> bytes:
        """The request body, sent with a Content-Length or chunked."""
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        return self.body_bytes()

    def token_role(self) -> str | None:
        auth = self.headers.get("Authorization") or ""
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
        return self.fake.tokens.get(token) if token else None

    def route(self, method: str) -> None:
        path = unquote(urlsplit(self.path).path)
        role = self.token_role()
        self.fake.log(method, path, role is not None)
        body = self.body() if method in ("POST", "PUT") else b""
        for pattern, name in self.fake.routes:
            m = re.fullmatch(pattern, f"{method} {path}")
            if m and name in self.fake.fail:
                return self.json(self.fake.fail[name], {"error": f"fake hub: {name} fails"})
            if m:
                return getattr(self, name)(role, body, *m.groups())
        self.fake.unknown.append((method, path))
        self.json(404, {"error": f"fake hub: no route for {method} {path}"})

    def do_GET(self) -> None:
        self.route("GET")

    def do_POST(self) -> None:
        self.route("POST")

    def do_PUT(self) -> None:
        self.route("PUT")

    # ------------------------------------------------------------------ endpoints

    def refuse(self, role: str | None) -> bool:
        """401 without a known token, 403 with a read-only one; True when refused."""
        if role is None:
            self.json(401, {"error": "Invalid credentials in Authorization header"})
            return True
        if role != "write":
            self.json(403, {"error": "You don't have the rights to write with this token"})
            return True
        return False

    def harnesses(self, role, body) -> None:
        self.json(200, {"standardEnvVars": [], "harnesses": {}})

    def whoami(self, role, body) -> None:
        if role is None:
            return self.json(401, {"error": "Invalid credentials in Authorization header"})
        self.json(200, {"type": "user", "name": USER, "orgs": [],
                        "auth": {"type": "access_token", "accessToken": {"displayName": "fake", "role": role}}})

    def create_repo(self, role, body) -> None:
        if self.refuse(role):
            return
        payload = json.loads(body or b"{}")
        kind = payload.get("type") or "model"
        repo_id = f"{payload.get('organization') or USER}/{payload['name']}"
        prefix = "" if kind == "model" else f"{kind}s/"
        url = f"{self.fake.root}/{prefix}{repo_id}"
        with self.fake.lock:
            if (kind, repo_id) in self.fake.repos:
                return self.json(409, {"error": "You already created this repo", "url": url})
            private = payload.get("private", payload.get("visibility") == "private")
            self.fake.repos[(kind, repo_id)] = {"private": bool(private), "files": {}, "commits": []}
        self.json(200, {"url": url, "name": repo_id})

    def validate_yaml(self, role, body) -> None:
        import yaml

        content = json.loads(body or b"{}").get("content", "")
        errors = []
        if content.startswith("---\n"):
            head = content[4:].split("\n---\n", 1)
            try:
                meta = yaml.safe_load(head[0]) if len(head) == 2 else None
            except yaml.YAMLError as exc:
                meta, errors = None, [f"YAML: {exc}"]
            if len(head) != 2:
                errors.append("front matter has no closing ---")
            elif not errors and not isinstance(meta, dict):
                errors.append("front matter is not a mapping")
            elif not errors:
                for c in meta.get("configs") or []:
                    if not isinstance(c, dict) or not c.get("config_name") or not c.get("data_files"):
                        errors.append(f"config entry without config_name or data_files: {c!r}")
        if errors:
            return self.json(400, {"errors": [{"message": e} for e in errors], "warnings": []})
        self.json(200, {"errors": [], "warnings": []})

    def repo(self, kind: str, repo_id: str) -> dict | None:
        repo = self.fake.repos.get((kind.rstrip("s"), repo_id))
        if repo is None:
            self.json(404, {"error": "Repository not found"}, headers={"X-Error-Code": "RepoNotFound"})
        return repo

    def preupload(self, role, body, kind, repo_id, revision) -> None:
        if self.refuse(role) or self.repo(kind, repo_id) is None:
            return
        files = json.loads(body)["files"]
        self.json(200, {"files": [{"path": f["path"], "shouldIgnore": False, "oid": None,
                                   "uploadMode": "lfs" if f["size"] >= self.fake.lfs_threshold
                                   or f["path"].endswith(self.fake.lfs_suffixes) else "regular"}
                                  for f in files]})

    def lfs_batch(self, role, body, prefix, repo_id) -> None:
        if self.refuse(role) or self.repo(prefix or "model", repo_id) is None:
            return
        payload = json.loads(body)
        objects = []
        for obj in payload["objects"]:
            out = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
            if obj["oid"] not in self.fake.lfs:
                out["actions"] = {"upload": {"href": f"{self.fake.root}/lfs-upload/{obj['oid']}"},
                                  "verify": {"href": f"{self.fake.root}/lfs-verify"}}
            objects.append(out)
        self.json(200, {"transfer": "basic", "objects": objects})

    def lfs_upload(self, role, body, oid) -> None:
        if hashlib.sha256(body).hexdigest() != oid:
            return self.json(400, {"error": "the body's SHA-256 is not the oid"})
        with self.fake.lock:
            self.fake.lfs[oid] = body
        self.send(200, b"", content_type="text/plain")

    def lfs_verify(self, role, body) -> None:
        payload = json.loads(body)
        stored = self.fake.lfs.get(payload["oid"])
        if stored is None or len(stored) != payload["size"]:
            return self.json(404, {"error": "object not uploaded"})
        self.json(200, {"success": True})

    def commit(self, role, body, kind, repo_id, revision) -> None:
        if self.refuse(role):
            return
        repo = self.repo(kind, repo_id)
        if repo is None:
            return
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        header = next((x["value"] for x in lines if x["key"] == "header"), {})
        files, deleted = {}, []
        for item in lines:
            value = item["value"]
            if item["key"] == "file":
                files[value["path"]] = base64.b64decode(value["content"])
            elif item["key"] == "lfsFile":
                if value["oid"] not in self.fake.lfs:
                    return self.json(422, {"error": f"LFS object of {value['path']} was not uploaded"})
                files[value["path"]] = self.fake.lfs[value["oid"]]
            elif item["key"] in ("deletedFile", "deletedFolder"):
                deleted.append(value["path"])
        oid = hashlib.sha1(body).hexdigest()
        with self.fake.lock:
            for path in deleted:
                repo["files"].pop(path, None)
            repo["files"].update(files)
            repo["commits"].append({"oid": oid, "summary": header.get("summary"), "revision": revision,
                                    "lfs_files": sorted(x["value"]["path"] for x in lines if x["key"] == "lfsFile"),
                                    "files": sorted(files)})
        self.json(200, {"success": True, "commitOid": oid,
                        "commitUrl": f"{self.fake.root}/{kind}/{repo_id}/commit/{oid}"})


REPO = r"([\w.-]+/[\w.-]+)"
#: What huggingface_hub asks for its own telemetry, not for the task at hand.
TELEMETRY = "/api/agent-harnesses"


class FakeHub(LoopbackFake):
    """The fake Hub (module docstring); ``tokens`` maps a token to its role."""

    handler = HubHandler
    routes = [
        (r"GET /api/agent-harnesses", "harnesses"),
        (r"GET /api/whoami-v2", "whoami"),
        (r"POST /api/repos/create", "create_repo"),
        (r"POST /api/validate-yaml", "validate_yaml"),
        (rf"POST /api/(models|datasets|spaces)/{REPO}/preupload/([^/]+)", "preupload"),
        (rf"POST /(datasets|spaces)?/?{REPO}\.git/info/lfs/objects/batch", "lfs_batch"),
        (r"PUT /lfs-upload/([0-9a-f]{64})", "lfs_upload"),
        (r"POST /lfs-verify", "lfs_verify"),
        (rf"POST /api/(models|datasets|spaces)/{REPO}/commit/([^/]+)", "commit"),
    ]

    def __init__(self, tokens: dict[str, str] | None = None, lfs_threshold: int = 10 * 1024 * 1024,
                 lfs_suffixes: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.lock = threading.Lock()
        self.tokens = dict(tokens or {})
        self.lfs_threshold = lfs_threshold
        self.lfs_suffixes = tuple(lfs_suffixes)
        self.reset()

    def reset(self) -> None:
        self.requests: list[tuple[str, str, bool]] = []
        self.unknown: list[tuple[str, str]] = []
        self.repos: dict[tuple[str, str], dict] = {}
        self.lfs: dict[str, bytes] = {}
        self.fail: dict[str, int] = {}

    def calls(self) -> list[tuple[str, str, bool]]:
        """The requests, without huggingface_hub's own telemetry (:data:`TELEMETRY`)."""
        with self.lock:
            return [r for r in self.requests if r[1] != TELEMETRY]

    def log(self, method: str, path: str, authorised: bool) -> None:
        with self.lock:
            self.requests.append((method, path, authorised))

    @property
    def url(self) -> str:
        return self.root


if __name__ == "__main__":
    serve_until_killed(FakeHub(tokens={"hf_fake_write": "write", "hf_fake_read": "read"}).start())
