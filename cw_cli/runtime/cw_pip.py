"""cw's package step: pip-install a run's extra requirements, then exec the real command.

Copied verbatim into the run's ConfigMap (key ``cw_pip.py``, mounted at /etc/cw), so it must
stay a single file with no cw imports. A container whose run needs packages its image lacks
(the config's ``pip:`` list, or a framework's pinned stack) runs::

    python3 /etc/cw/cw_pip.py verifiers==0.1.9.post3 peft==0.17.1 -- vf-vllm --model M [...]

Requirements the image already has at exactly the pinned version (``name==version``, or a bare
name) are checked here first, with the standard library, and pip is not run at all: an image with
the packages baked in starts at once, offline, even one without pip (cw's test-cluster image).
Anything else goes to pip, which skips what is satisfied without contacting an index. Builds run without isolation: CUDA
extensions (flash-attn, deepspeed) must compile against the image's own torch, and a build
environment of its own would download a second torch. Index settings come from pip's own
environment variables (``PIP_INDEX_URL``, ``PIP_EXTRA_INDEX_URL``), set with the ``env:`` field.

``--dry-run`` as the first argument prints the pip command and the command as JSON instead.
With ``CW_PIP_CHECK=1`` in the environment (set by ``cw ... --local``, which must not change the
user's own environment) nothing is installed: the step checks, offline, that the requirements are
already satisfied and stops with the pip command to run when they are not.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from importlib import metadata

_PREFIX = "[cw-pip]"
_USAGE = "usage: cw_pip.py [--dry-run] REQUIREMENT [REQUIREMENT...] -- COMMAND [ARGS...]"
#: A requirement simple enough to check without pip's own parser: a name, optionally ``==version``.
_SIMPLE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:==([A-Za-z0-9.!+_-]+))?$")


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """(requirements, command) from ``REQ... -- CMD...``; exits with the usage when malformed."""
    if "--" not in argv:
        raise SystemExit(_USAGE)
    cut = argv.index("--")
    requirements, command = argv[:cut], argv[cut + 1 :]
    if not command or any(not req or req.startswith("-") for req in requirements):
        raise SystemExit(_USAGE)
    return requirements, command


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()  # PEP 503's name normalization


def already_satisfied(requirement: str) -> bool:
    """Whether this interpreter has ``requirement`` installed at exactly its pinned version; False
    for anything this check cannot decide (ranges, extras, markers, URLs): pip decides those."""
    match = _SIMPLE.match(requirement.strip())
    if not match:
        return False
    name, wanted = match.groups()
    try:
        installed = metadata.version(_normalized(name))
    except metadata.PackageNotFoundError:
        return False
    return wanted is None or installed == wanted


def pip_command(requirements: list[str], check_only: bool = False) -> list[str]:
    """The pip run that installs ``requirements`` into this interpreter.

    With ``check_only`` it installs nothing, offline, and fails unless they are already satisfied.
    """
    mode = ["--dry-run", "--no-index", "--quiet"] if check_only else ["--no-input", "--no-build-isolation"]
    return [sys.executable, "-m", "pip", "install", *mode, "--disable-pip-version-check", *requirements]


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    dry_run = bool(args) and args[0] == "--dry-run"
    requirements, command = split_argv(args[1:] if dry_run else args)
    missing = [req for req in requirements if not already_satisfied(req)]
    install = pip_command(missing) if missing else []
    if requirements and not missing and not dry_run:
        print(f"{_PREFIX} {' '.join(requirements)}: installed already", file=sys.stderr, flush=True)
    if dry_run:
        print(json.dumps({"pip": install, "exec": command}))
        return 0
    if install and os.environ.get("CW_PIP_CHECK") == "1":
        if subprocess.run(pip_command(requirements, check_only=True), check=False).returncode != 0:
            print(
                f"{_PREFIX} this environment lacks some of {' '.join(missing)}; install them with: "
                f"{sys.executable} -m pip install {' '.join(missing)}",
                file=sys.stderr,
                flush=True,
            )
            return 1
    elif install:
        print(f"{_PREFIX} ensuring {' '.join(missing)}", file=sys.stderr, flush=True)
        done = subprocess.run(install, check=False)
        if done.returncode != 0:
            print(
                f"{_PREFIX} pip could not install the run's requirements (exit {done.returncode}); "
                "bake them into the image (see docs/training.md) or fix the `pip:` list",
                file=sys.stderr,
                flush=True,
            )
            return done.returncode
    print(f"{_PREFIX} exec: {' '.join(command)}", file=sys.stderr, flush=True)
    os.execvp(command[0], command)
    return 127  # pragma: no cover - execvp does not return


if __name__ == "__main__":
    raise SystemExit(main())
