"""The API server as cw's pod-side helpers reach it: the server keeper (``cw_keeper.py``), the
pipeline keeper (``cw_pipeline.py``) and the evaluation watcher (``cw_eval_watch.py``).

Shipped beside them in the same ConfigMap (key ``cw_pod_api.py``), and imported from their own
folder, so it stays one file with no cw imports (standard library only). Each call carries the
pod's ServiceAccount token, read again every time (the kubelet rotates it). The server, CA and
namespace come from the standard in-cluster places; ``<PREFIX>_API``, ``<PREFIX>_TOKEN_FILE``,
``<PREFIX>_CA_FILE`` and ``<PREFIX>_NAMESPACE`` override them (tests run the helpers as local
processes against a real API server).
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
#: ``--once`` found the work not done yet.
NOT_YET = 3


def read_text(path: str) -> str:
    """The whole of a small text file."""
    with open(path, encoding="utf-8") as fh:
        return fh.read()


class PodApi:
    """JSON calls to the API server with the pod's own identity.

    Args:
        environ: The process environment (its overrides, and the in-cluster service address).
        prefix: The helper's prefix of the override variables (``CW_KEEPER``, ``CW_EVAL``).
    """

    def __init__(self, environ: dict, prefix: str) -> None:
        host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT", "443")
        self.server = environ.get(f"{prefix}_API") or f"https://{host}:{port}"
        self.token_file = environ.get(f"{prefix}_TOKEN_FILE") or f"{SA_DIR}/token"
        self.context = ssl.create_default_context(cafile=environ.get(f"{prefix}_CA_FILE") or f"{SA_DIR}/ca.crt")
        self.namespace = environ.get(f"{prefix}_NAMESPACE") or read_text(f"{SA_DIR}/namespace").strip()

    def call(self, method: str, path: str, body: dict | None = None) -> dict | None:
        """The JSON of the answer, or None for 404; ``{ns}`` in ``path`` is the namespace. A PATCH
        is a JSON merge patch.

        Raises:
            urllib.error.HTTPError: Any other refusal (409 for a create of something that exists).
            urllib.error.URLError, OSError: The server could not be reached.
        """
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.server + path.replace("{ns}", self.namespace), data=data, method=method)
        request.add_header("Authorization", f"Bearer {read_text(self.token_file).strip()}")  # re-read: it rotates
        request.add_header("Accept", "application/json")
        if body is not None:
            request.add_header("Content-Type", "application/merge-patch+json" if method == "PATCH" else "application/json")
        try:
            with urllib.request.urlopen(request, context=self.context, timeout=20) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise


def poll(one_round: Callable[[], bool], poll_s: float, once: bool, say: Callable[[str], None]) -> int:
    """Run ``one_round`` every ``poll_s`` seconds until it says it is done; the exit status.

    An API hiccup (the server unreachable, a refusal, an odd answer) is said and the round is tried
    again next time. With ``once``, one round: 0 when done, :data:`NOT_YET` otherwise.
    """
    while True:
        try:
            done = one_round()
        except (OSError, ValueError, urllib.error.URLError) as exc:
            say(f"cannot check yet: {exc}")
            done = False
        if done:
            return 0
        if once:
            return NOT_YET
        time.sleep(poll_s)
