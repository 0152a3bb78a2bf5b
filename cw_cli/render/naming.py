"""Run and object names: DNS-1123 labels, unique per run, never longer than Kubernetes allows."""

from __future__ import annotations

import re
import string

from cw_cli.errors import ConfigError

MAX_RUN_NAME = 40  # leaves room for "-<role>" and the "-<index>-<5 chars>" Kubernetes adds to pod names
SUFFIX_LENGTH = 5
_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_ALPHABET = string.ascii_lowercase + string.digits


def sanitize(text: str) -> str:
    """Turn any text into lower-case letters, digits and single dashes, starting with a letter."""
    cleaned = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    cleaned = re.sub(r"^[^a-z]+", "", cleaned)
    return cleaned or "run"


def generate_run_name(framework: str, training_type: str, stem: str = "") -> str:
    """A fresh run name: ``<framework>-<type>[-<config stem>]-<5 random chars>``."""
    import secrets  # hashlib, hmac and random: only a launch without --name pays for them

    suffix = "".join(secrets.choice(_ALPHABET) for _ in range(SUFFIX_LENGTH))
    words: list[str] = []
    for word in sanitize("-".join(part for part in (framework, training_type, stem) if part)).split("-"):
        if word not in words:  # "trl sft trl-sft.yaml" -> "trl-sft", not "trl-sft-trl-sft"
            words.append(word)
    base = "-".join(words)
    base = base[: MAX_RUN_NAME - SUFFIX_LENGTH - 1].rstrip("-")
    return f"{base}-{suffix}"


#: A namespace name as the API server takes it (a DNS-1123 label; the k8s layer checks the same).
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def validate_namespace(namespace: str) -> str:
    """Check a namespace written into the manifests (``--namespace``), as a launch does: a dry run
    never prints manifests in a namespace no cluster can have.

    Raises:
        ConfigError: Not a DNS-1123 label of at most 63 characters.
    """
    if _NAMESPACE.fullmatch(namespace):
        return namespace
    shown = namespace if len(namespace) <= 70 and namespace.isprintable() else repr(namespace[:70])
    raise ConfigError(
        [f"--namespace {shown}: not a valid namespace name (at most 63 lower-case letters, digits or '-')"],
        hint=f"try --namespace {sanitize(namespace)[:63].rstrip('-') or 'default'}",
    )


def is_run_name(name: str) -> bool:
    """Whether ``name`` can be a run's name (what :func:`validate_run_name` accepts)."""
    return len(name) <= MAX_RUN_NAME and bool(_LABEL.fullmatch(name))


def validate_run_name(name: str) -> str:
    """Check a user-chosen run name (``--name``).

    Raises:
        ConfigError: Not a DNS-1123 label starting with a letter, or too long; the hint offers a
            valid spelling.
    """
    if is_run_name(name):
        return name
    suggestion = sanitize(name)[:MAX_RUN_NAME].rstrip("-")
    raise ConfigError(
        [f"--name {name!r}: a run name must be at most {MAX_RUN_NAME} lower-case letters, digits or '-', starting with a letter"],
        hint=f"try --name {suggestion}",
    )
