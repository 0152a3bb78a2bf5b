"""Reading the kubeconfig the way kubectl does, without the ``kubernetes`` package.

:func:`load` merges the files of ``$KUBECONFIG`` (else ``~/.kube/config``) like kubectl: the
first file that defines a cluster, user or context name wins it whole, the first file that sets
``current-context`` wins it, missing files are skipped, and relative paths are resolved against
the directory of the file that defined the entry. It returns the resolved :class:`Credentials`
of one context, with file contents read and an exec plugin already run.

What only the official client handles (``auth-provider``, and combinations kubectl itself
refuses but the official client accepts) raises :class:`Unsupported`, so the caller can
fall back to it and behave as before. Impersonation (``as``...) is read here: the official client
would drop it, so with anything it alone handles it is an error.
"""

from __future__ import annotations

import os

from cw_cli.client.credentials import (
    EXEC_API_VERSIONS,
    HELPER_IMAGE_ROLES,
    HELPER_IMAGES_EXTENSION,
    SIMULATED_GPUS_EXTENSION,
    Credentials,
    ExecPlugin,
    KubeconfigError,
    UnknownContext,
    Unsupported,
)
from cw_cli.client.exec_plugin import exec_timeout, expired, refresh, run_exec_plugin
from cw_cli.client.in_cluster import in_cluster
from cw_cli.client.kubeconfig_entries import IMPERSONATION_KEYS, Entry, read_cluster, read_user
from cw_cli.client.kubeconfig_values import MAX_NAMED_FILE_BYTES, header_problem, parse_file, text_field, type_name

__all__ = [
    "EXEC_API_VERSIONS", "MAX_NAMED_FILE_BYTES", "Credentials", "ExecPlugin", "KubeconfigError",
    "UnknownContext", "Unsupported", "exec_timeout", "expired", "header_problem", "in_cluster", "kubeconfig_paths", "load",
    "refresh", "run_exec_plugin",
]  # fmt: skip


class _Merged:
    """The merged kubeconfig files (plain classes: each dataclass costs a millisecond to import)."""

    def __init__(self) -> None:
        self.clusters: dict[str, Entry] = {}
        self.users: dict[str, Entry] = {}
        self.contexts: dict[str, Entry] = {}
        self.current_context = ""
        self.files: list[str] = []


def kubeconfig_paths(explicit: str | None = None) -> tuple[list[str], bool]:
    """The files to read, and whether they must exist (an explicit path must).

    Args:
        explicit: A path given by the caller (``--kubeconfig``); it overrides ``$KUBECONFIG``.
    """
    if explicit:
        return [os.path.expanduser(explicit)], True
    env = os.environ.get("KUBECONFIG")
    if env:
        return [os.path.expanduser(path) for path in env.split(os.pathsep) if path], False
    return [os.path.expanduser(os.path.join("~", ".kube", "config"))], False


def _merge(paths: list[str], must_exist: bool) -> _Merged:
    """Merge the files like kubectl: the first to define a name or current-context wins."""
    merged = _Merged()
    for path in paths:
        if not must_exist and not os.path.exists(path):
            continue  # kubectl skips missing files of $KUBECONFIG
        data = parse_file(path)
        merged.files.append(path)
        for section, key, target in (("clusters", "cluster", merged.clusters), ("users", "user", merged.users),
                                     ("contexts", "context", merged.contexts)):  # fmt: skip
            items = data.get(section) or []
            if not isinstance(items, list):
                raise KubeconfigError(f"{path}: {section} is {type_name(items)}, not a list of named entries")
            seen: set[str] = set()
            for item in items:
                if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                    raise KubeconfigError(f"{path}: every entry of {section} needs a name")
                name = item["name"]
                if name in seen:  # kubectl refuses this; the official client takes the first
                    raise Unsupported(f"{path}: {section} has {name!r} twice")
                seen.add(name)
                body = item.get(key) or {}
                if not isinstance(body, dict):
                    raise KubeconfigError(f"{path}: {section} {name!r} is not a mapping")
                target.setdefault(name, Entry(body, path))
        if not merged.current_context:
            merged.current_context = text_field(data, "current-context", f"{path}:") or ""
    return merged


def load(kubeconfig: str | None = None, context: str | None = None) -> Credentials:
    """Resolve the credentials of a context, as kubectl would use them.

    Every value that becomes part of a request (the server URL, a token from any source, basic
    auth, impersonation) is checked here, so no request of any kind sends a header line the
    kubeconfig's author slipped in.

    Args:
        kubeconfig: An explicit kubeconfig file; None reads ``$KUBECONFIG`` (at each call), else
            ``~/.kube/config``.
        context: The context to use; None uses ``current-context``.

    Raises:
        UnknownContext: ``context`` is not defined.
        Unsupported: The context needs the official client.
        KubeconfigError: The kubeconfig cannot be used (no file, no context, a missing file it names,
            a failing exec plugin, a field of the wrong type, a value that cannot be sent), naming
            the file and the field.
        OSError: A kubeconfig file cannot be read.
    """
    paths, must_exist = kubeconfig_paths(kubeconfig)
    merged = _merge(paths, must_exist)
    if not merged.files:
        inside = in_cluster() if kubeconfig is None and context is None else None
        if inside is not None:  # kubectl's rule: no kubeconfig, but a pod's service account
            return inside
        raise KubeconfigError(f"no kubeconfig file at {os.pathsep.join(paths)}")
    name = context or merged.current_context
    if not name:
        raise KubeconfigError("the kubeconfig sets no current-context", hint="pass --context, or `kubectl config use-context`")
    if name not in merged.contexts:
        if context:
            raise UnknownContext(context, list(merged.contexts))
        raise KubeconfigError(f"current-context {name!r} is not defined")
    entry_ctx = merged.contexts[name]
    ctx, where = entry_ctx.body, f"{entry_ctx.origin}: context {name!r}"
    cluster_name, user_name = text_field(ctx, "cluster", where) or "", text_field(ctx, "user", where) or ""
    namespace = text_field(ctx, "namespace", where)
    if cluster_name not in merged.clusters:
        raise KubeconfigError(f"context {name!r} names cluster {cluster_name!r}, which is not defined")
    cluster = read_cluster(cluster_name, merged.clusters[cluster_name])
    entry = merged.users.get(user_name) if user_name else None
    try:
        user = read_user(user_name, entry, cluster)
    except Unsupported as exc:
        if entry is not None and set(entry.body) & IMPERSONATION_KEYS:
            # The official client, cw's fallback, ignores `as`: cw would act as the wrong identity.
            raise KubeconfigError(f"{exc}, together with impersonation (`as`), which cw's fallback would drop; "
                                  "use a kubeconfig user without one of the two") from None  # fmt: skip
        raise
    return Credentials(
        server=cluster["server"], context=name, namespace=namespace, ca_data=cluster["ca"],
        insecure=cluster["insecure"], tls_server_name=cluster["tls_server_name"], proxy=cluster["proxy"],
        helper_images=_helper_images(ctx, where), simulated_gpus=_simulated_gpus(ctx, where), **user,
    )  # fmt: skip


def _helper_images(ctx: dict, where: str) -> tuple[tuple[str, str], ...]:
    """The context's helper images (:data:`HELPER_IMAGES_EXTENSION`), checked like any value cw sends.

    Raises:
        KubeconfigError: The extension is not a mapping of a known role to an image reference.
    """
    extensions = ctx.get("extensions") or []
    if not isinstance(extensions, list):
        raise KubeconfigError(f"{where}: extensions is {type_name(extensions)}, not a list of named extensions")
    found: list[tuple[str, str]] = []
    for item in extensions:
        if not isinstance(item, dict) or item.get("name") != HELPER_IMAGES_EXTENSION:
            continue
        images = item.get("extension")
        if not isinstance(images, dict):
            raise KubeconfigError(f"{where}: extension {HELPER_IMAGES_EXTENSION} is {type_name(images)}, not a mapping of role to image")
        for role, image in images.items():
            if role not in HELPER_IMAGE_ROLES:
                raise KubeconfigError(f"{where}: extension {HELPER_IMAGES_EXTENSION}: unknown role {role!r}",
                                      hint=f"roles: {', '.join(HELPER_IMAGE_ROLES)}")  # fmt: skip
            if not isinstance(image, str) or not image or len(image) > 512 or any(c.isspace() or ord(c) < 32 for c in image):
                raise KubeconfigError(f"{where}: extension {HELPER_IMAGES_EXTENSION}: {role}: not an image reference")
            found.append((role, image))
    return tuple(found)


def _simulated_gpus(ctx: dict, where: str) -> bool:
    """Whether the context's :data:`SIMULATED_GPUS_EXTENSION` is ``true``.

    Raises:
        KubeconfigError: The extension is there but not a boolean.
    """
    extensions = ctx.get("extensions") or []
    for item in extensions if isinstance(extensions, list) else []:
        if isinstance(item, dict) and item.get("name") == SIMULATED_GPUS_EXTENSION:
            value = item.get("extension")
            if not isinstance(value, bool):
                raise KubeconfigError(f"{where}: extension {SIMULATED_GPUS_EXTENSION} is {type_name(value)}, not true or false")
            return value
    return False
