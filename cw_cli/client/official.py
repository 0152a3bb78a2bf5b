"""The fallback for kubeconfigs only the official ``kubernetes`` client reads (``auth-provider``,
...): its loader reads the kubeconfig, within a time limit, and cw's transport sends the requests."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from cw_cli.errors import ClusterUnreachable

if TYPE_CHECKING:
    from cw_cli.client.connection import ClusterTarget
    from cw_cli.client.transport import Transport


def connect_with_official_client(target: ClusterTarget) -> tuple[Transport, str | None]:
    """The fallback: the official client loads the kubeconfig; our transport sends the requests.

    Returns:
        The transport and the context's namespace (or None).
    """

    from kubernetes.config.config_exception import ConfigException

    from cw_cli.client.kubeconfig import KubeconfigError

    config_file = target.kubeconfig or os.environ.get("KUBECONFIG") or None
    try:
        return _bounded(lambda: _official_load(target, config_file), _official_time_limit())
    except TimeoutError:
        raise ClusterUnreachable(
            f"loading the kubeconfig through the official client took more than {_official_time_limit():g}s",
            hint="its user runs a credential plugin or reads a file that does not answer; check the kubeconfig's user",
        ) from None
    except (ConfigException, KubeconfigError) as exc:
        raise ClusterUnreachable(
            f"no usable kubeconfig ({exc})",
            hint="set KUBECONFIG or run `cw cluster up` for the test cluster",
        ) from None
    except OSError as exc:
        raise ClusterUnreachable(f"cannot read the kubeconfig: {exc}", hint="set KUBECONFIG to a readable file") from None
    except (ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError) as exc:
        # The official loader's own crash on a field of the wrong type: still the kubeconfig's fault.
        raise ClusterUnreachable(f"no usable kubeconfig (the official client cannot read it: {type(exc).__name__}: {exc})",
                                 hint="check the kubeconfig's user and cluster fields") from None  # fmt: skip


def _official_time_limit() -> float:
    """Seconds the official client may take to load a kubeconfig: an exec plugin's limit and some."""
    from cw_cli.client.kubeconfig import exec_timeout

    return exec_timeout() + 15.0


def _bounded(work: Any, seconds: float) -> Any:
    """``work()`` in a daemon thread, waited for ``seconds``: the official loader runs plugins and
    opens files with no time limit, and cw must not hang on them. Its exception is re-raised here.

    Raises:
        TimeoutError: It did not end in time (the thread is left behind; cw exits anyway).
    """
    import threading

    result: list[Any] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(work())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="cw-official-kubeconfig", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"no answer in {seconds:g}s")
    if failure:
        raise failure[0]
    return result[0]


def _official_load(target: ClusterTarget, config_file: str | None) -> tuple[Transport, str | None]:
    """The official client's loading of the kubeconfig (see :func:`connect_with_official_client`)."""
    from kubernetes import client as kube_client
    from kubernetes import config as kube_config

    from cw_cli.client.kubeconfig import KubeconfigError
    from cw_cli.client.transport import Transport

    contexts, active = kube_config.list_kube_config_contexts(config_file=config_file)
    chosen = active
    if target.context:
        chosen = next((c for c in contexts if c["name"] == target.context), None)
        if chosen is None:
            known = ", ".join(c["name"] for c in contexts) or "none"
            raise ClusterUnreachable(f"no context {target.context!r} in the kubeconfig", hint=f"contexts: {known}")
    configuration = kube_client.Configuration()
    # Only the kubeconfig's proxy-url may fill it: the transport reads the environment's proxy
    # with kubectl's rules, not the official client's (see Transport.from_configuration).
    configuration.proxy = None
    kube_config.load_kube_config(
        config_file=config_file, context=chosen["name"] if chosen else None, client_configuration=configuration
    )
    transport = Transport.from_configuration(configuration)
    namespace = ((chosen or {}).get("context") or {}).get("namespace")
    if namespace is not None and not isinstance(namespace, str):
        raise KubeconfigError(f"the context's namespace is {type(namespace).__name__}, not text")
    return transport, namespace
