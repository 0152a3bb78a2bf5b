"""cw's code step: put the run's own code in place before the trainer starts.

Copied verbatim into the run's ConfigMap (key ``cw_code.py``, mounted at /etc/cw), so it must
stay a single file with no cw imports. ``cw_entrypoint.py`` runs it as a setup step::

    python3 /etc/cw/cw_code.py --dest /cw-code --archive /etc/cw/cw_code.tar.gz [--install]
    python3 /etc/cw/cw_code.py --dest /cw-code --git URL --commit SHA [--install]

An archive (a local folder cw packed) is unpacked, refusing members that would land outside
``--dest``. A repository is cloned without checking out, the commit fetched and checked out
detached, and ``HEAD`` compared with it: the run runs exactly that commit or stops. A
``--dest`` already at that commit (a restarted container) is used as it is. ``--install``
pip-installs the folder (``--no-deps``: its requirements are the run's ``pip:`` list).
Exit codes: 0 when the code is in place, otherwise the failing tool's code (2 for a bad archive).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

_PREFIX = "[cw-code]"


def say(message: str) -> None:
    """One line in the trainer's log."""
    print(f"{_PREFIX} {message}", file=sys.stderr, flush=True)


def unpack(archive: Path, dest: Path) -> None:
    """Unpack ``archive`` into ``dest``: regular files and folders only, all inside ``dest``.

    Raises:
        ValueError: A member is a link, a device, absolute or climbs out of ``dest``.
    """
    root = dest.resolve()
    with tarfile.open(archive, "r:*") as tar:
        members = tar.getmembers()
        for member in members:
            target = (root / member.name).resolve()
            if not (member.isfile() or member.isdir()) or (target != root and root not in target.parents):
                raise ValueError(f"{member.name!r} is not a plain file inside the code folder")
        for member in members:
            target = root / member.name
            if member.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            if source is None:
                raise ValueError(f"{member.name!r} cannot be read from the archive")
            with source, open(target, "wb") as handle:
                shutil.copyfileobj(source, handle)
            os.chmod(target, 0o755 if member.mode & 0o111 else 0o644)


def _git(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)


def _head(dest: Path) -> str | None:
    if not (dest / ".git").exists():
        return None
    done = _git(["rev-parse", "HEAD"], dest)
    return done.stdout.strip() if done.returncode == 0 else None


def clone(url: str, commit: str, dest: Path) -> int:
    """Check out ``commit`` of ``url`` in ``dest`` (detached); 0 on success, else git's exit code."""
    if shutil.which("git") is None:
        say("the image has no `git`: install it in the image, or ship the code as a local folder (`code: ./folder`)")
        return 127
    if _head(dest) == commit:
        say(f"{dest} is already at {commit}")
        return 0
    dest.mkdir(parents=True, exist_ok=True)
    for child in dest.iterdir():  # a half-done earlier attempt: start again (dest itself may be a mount)
        shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    steps = [
        (["init", "--quiet", str(dest)], None),
        (["remote", "add", "origin", "--", url], dest),
        # By commit id first (one commit's objects); servers that refuse it get the whole history.
        (["fetch", "--quiet", "--depth", "1", "origin", commit], dest),
    ]
    for args, cwd in steps:
        done = _git(args, cwd)
        if done.returncode != 0 and args[0] == "fetch":
            say(f"fetching {commit} alone was refused ({done.stderr.strip()[:200]}); fetching the whole repository")
            done = _git(["fetch", "--quiet", "origin"], dest)
        if done.returncode != 0:
            say(f"git {' '.join(args)} failed (exit {done.returncode}): {done.stderr.strip()[:500]}")
            return done.returncode
    done = _git(["-c", "advice.detachedHead=false", "checkout", "--quiet", commit], dest)
    if done.returncode != 0:
        say(f"commit {commit} is not in {url} (git checkout: {done.stderr.strip()[:300]})")
        return done.returncode
    head = _head(dest)
    if head != commit:
        say(f"{url} checked out {head}, not {commit}; stopping")
        return 1
    return 0


def install(dest: Path) -> int:
    """``pip install --no-deps`` the folder; 0 on success, else pip's exit code."""
    command = [sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", str(dest)]
    say(f"installing: {' '.join(command)}")
    return subprocess.run(command, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="cw_code.py", description=__doc__.splitlines()[0])
    parser.add_argument("--dest", required=True, type=Path)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--archive", type=Path)
    source.add_argument("--git")
    parser.add_argument("--commit")
    parser.add_argument("--install", action="store_true")
    args = parser.parse_args(argv)
    if args.archive is not None:
        try:
            args.dest.mkdir(parents=True, exist_ok=True)
            unpack(args.archive, args.dest)
        except (OSError, ValueError, tarfile.TarError) as exc:
            say(f"cannot unpack {args.archive}: {exc}")
            return 2
        say(f"unpacked the run's code into {args.dest}")
    else:
        if not args.commit:
            parser.error("--git needs --commit")
        code = clone(args.git, args.commit, args.dest)
        if code != 0:
            return code
        say(f"checked out {args.git} at {args.commit} in {args.dest}")
    return install(args.dest) if args.install else 0


if __name__ == "__main__":
    raise SystemExit(main())
