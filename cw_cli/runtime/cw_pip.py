"""cw's package step: pip-install a run's extra requirements, then exec the real command.

Copied verbatim into the run's ConfigMap (key ``cw_pip.py``, mounted at /etc/cw), so it must
stay a single file with no cw imports. A container whose run needs packages its image lacks
(the config's ``pip:`` list, or a framework's pinned stack) runs::

    python3 /etc/cw/cw_pip.py verifiers==0.1.9.post3 peft==0.17.1 -- vf-vllm --model M [...]

pip skips every requirement the image already satisfies without contacting an index, so an
image with the packages baked in starts at once, offline. Builds run without isolation: CUDA
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
import subprocess
import sys

_PREFIX = "[cw-pip]"
_USAGE = "usage: cw_pip.py [--dry-run] REQUIREMENT [REQUIREMENT...] -- COMMAND [ARGS...]"


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """(requirements, command) from ``REQ... -- CMD...``; exits with the usage when malformed."""
    if "--" not in argv:
        raise SystemExit(_USAGE)
    cut = argv.index("--")
    requirements, command = argv[:cut], argv[cut + 1 :]
    if not command or any(not req or req.startswith("-") for req in requirements):
        raise SystemExit(_USAGE)
    return requirements, command


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
    install = pip_command(requirements) if requirements else []
    if dry_run:
        print(json.dumps({"pip": install, "exec": command}))
        return 0
    if install and os.environ.get("CW_PIP_CHECK") == "1":
        if subprocess.run(pip_command(requirements, check_only=True), check=False).returncode != 0:
            print(
                f"{_PREFIX} this environment lacks some of {' '.join(requirements)}; install them with: "
                f"{sys.executable} -m pip install {' '.join(requirements)}",
                file=sys.stderr,
                flush=True,
            )
            return 1
    elif install:
        print(f"{_PREFIX} ensuring {' '.join(requirements)}", file=sys.stderr, flush=True)
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
