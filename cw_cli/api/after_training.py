"""After training: what a run left on its volume, copied here, served, asked, exported."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from msgspec import Struct, structs

from cw_cli.api.planning import Progress, _quiet
from cw_cli.errors import ConfigError, RunFailed
from cw_cli.labels import EVAL, EXPORT, SERVE

if TYPE_CHECKING:
    import threading

    from cw_cli.api.run import Run
    from cw_cli.api.session import Session


class Export(Struct):
    """An export Job of a run (:meth:`Run.export`).

    Attributes:
        name: The export Job's name.
        run: The run it exports.
        run_dir: The run's folder on its checkpoint volume (the export lands in ``exported/``).
    """

    name: str
    run: Run
    run_dir: str

    def wait(self, timeout: float | None = None, progress: Progress = _quiet) -> str:
        """Block until the export ends.

        Returns:
            ``"Succeeded"``.

        Raises:
            RunFailed: The export failed (its log says why: ``cw logs RUN --role export``).
            WaitTimeout: Still running after ``timeout`` seconds.
        """
        return _wait_for_job(self.run, self.name, EXPORT, timeout, progress)



class Evaluation(Struct):
    """An evaluation Job of a run (:meth:`Run.evaluate`).

    Attributes:
        name: The evaluation Job's name.
        run: The run it evaluates.
        checkpoint: ``checkpoint-N``, ``final`` or ``base``.
        scores: Where its scores.json lands on the run's volume.
    """

    name: str
    run: Run
    checkpoint: str
    scores: str

    def wait(self, timeout: float | None = None, progress: Progress = _quiet) -> str:
        """Block until the evaluation ends.

        Returns:
            ``"Succeeded"``.

        Raises:
            RunFailed: The evaluation failed (its log says why: ``cw logs RUN --role eval``).
            WaitTimeout: Still running after ``timeout`` seconds.
        """
        return _wait_for_job(self.run, self.name, EVAL, timeout, progress)

def _wait_for_job(run: Run, name: str, role: str, timeout: float | None, progress: Progress) -> str:
    """Wait for one of the run's after-training Jobs; a failure names it and the log to read."""
    from cw_cli.k8s.operations import wait_for_run

    what = "evaluation" if role == EVAL else role
    try:
        return wait_for_run(run.session.kube, name, timeout, progress)
    except RunFailed as failed:
        raise RunFailed(f"{what} {name} failed: {failed.message.removeprefix('run failed: ')}",
                        hint=f"see its log: cw logs {run.name} --role {role}") from None  # fmt: skip


class AfterTraining:
    """:class:`~cw_cli.api.run.Run`'s calls on what a finished (or running) run left on its volume."""

    __slots__ = ()
    name: str
    session: Session

    def artifacts(self) -> dict[str, Any]:
        """What the run left on its checkpoint volume: each checkpoint (step, size, time, complete or
        not, the metrics logged at its step), the final model and the exports, read in a short-lived
        pod that mounts the volume read-only.

        Raises:
            NotFound: No such run.
            ConfigError: The run kept its outputs on no volume.
        """
        from cw_cli.after_training.artifacts import read_artifacts

        return read_artifacts(self.session.kube, self.name)

    def download(
        self, dest: str | Path, *, checkpoint: str = "final", started: Callable[[int, int], None] | None = None,
        progress: Callable[[int], None] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Copy the final model, a checkpoint or an export of the run to ``dest`` on this machine,
        through the API server; verified file by file, and going on where an interrupted call stopped.

        Args:
            dest: A new or empty folder (or one an earlier call of the same download started).
            checkpoint: ``final``, ``latest`` (the newest complete checkpoint), a step number or
                ``export:NAME`` (a folder of ``RUN/exported``).
            started: Called with the total bytes and those already there.
            progress: Called with each chunk's size as it is written.

        Raises:
            NotFound: No such run, or its volume is gone.
            ConfigError: Nothing of that name, or a checkpoint still being written.
            Conflict: ``dest`` holds other files.
        """
        from cw_cli.after_training.download import check_destination, download

        check_destination(Path(dest))  # a bad destination is the user's (exit 2), before the cluster is asked
        return download(self.session.kube, self.name, str(checkpoint), Path(dest).expanduser(),
                        started or (lambda total, have: None), progress or (lambda size: None))  # fmt: skip

    def serve(self, *, checkpoint: str = "final", ttl: str = "2h", gpu: int = 1, engine: str | None = None) -> str:
        """Start a vLLM server on the run's model (``checkpoint`` as for :meth:`download`) that the
        kubelet ends after ``ttl``; returns the server pod's name (its Service has the same).
        ``engine``: ``vllm`` or ``transformers`` (on CPU); default transformers' where there is
        no GPU to use (``gpu`` 0, or a cluster whose GPUs are simulated), else vLLM.

        Raises:
            NotFound: No such run, or its volume is gone.
            ConfigError: No such model, a bad ``ttl`` or ``gpu``.
            Conflict: The run's server is up already.
        """
        from cw_cli.after_training.serving import start_server
        from cw_cli.config.quantity import parse_duration

        if not 0 <= gpu <= 64:
            raise ConfigError([f"--gpu {gpu}: expected 0 to 64"])
        return start_server(self.session.kube, self.name, str(checkpoint), parse_duration(ttl, "--ttl"), gpu, engine)

    def served_name(self) -> str | None:
        """The model name requests to the run's server give: the run's on vLLM, none on
        transformers' server (pinned to its one model)."""
        from cw_cli.after_training.serving import served_name

        return served_name(self.session.kube, f"{self.name}-{SERVE}", self.name)

    def server_manifests(self, *, checkpoint: str = "final", ttl: str = "2h", gpu: int = 1,
                         engine: str | None = None) -> list[dict[str, Any]]:  # fmt: skip
        """The server Pod and Service :meth:`serve` would create (``cw serve --dry-run``), created
        nowhere; what the run left is read in a reader pod, as :meth:`artifacts` does.

        Raises:
            NotFound: No such run, or its volume is gone.
            ConfigError: No such model, an adapter the server cannot load, a bad ``ttl`` or ``gpu``.
        """
        from cw_cli.after_training.serving import server_manifests
        from cw_cli.config.quantity import parse_duration

        if not 0 <= gpu <= 64:
            raise ConfigError([f"--gpu {gpu}: expected 0 to 64"])
        lifetime = parse_duration(ttl, "--ttl")
        return server_manifests(self.session.kube, self.name, str(checkpoint), lifetime, gpu, engine)

    def try_(self, question: str, *, checkpoint: str = "final", gpu: int = 1, max_tokens: int = 256,
             timeout: float = 900, progress: Progress = _quiet, engine: str | None = None) -> str:  # fmt: skip
        """Ask the run's model one question through its chat template: a server is started on it,
        asked through a port-forward of the API server, and stopped, whatever happens.

        Returns:
            The model's answer.
        """
        from cw_cli.after_training.serving import ask, served_name, stop_server, wait_ready_or_say_why

        if not question.strip():
            raise ConfigError(["the question is empty"], hint='cw try RUN "What is 2 + 2?"')
        name = self.serve(checkpoint=checkpoint, ttl=f"{int(timeout) + 600}s", gpu=gpu, engine=engine)
        try:
            progress(f"server {name} started; waiting until it is Ready")
            wait_ready_or_say_why(self.session.kube, name, timeout)
            progress(f"asking {name} through a port-forward")
            return ask(self.session.kube, name, served_name(self.session.kube, name, self.name), question, max_tokens)
        finally:
            stop_server(self.session.kube, name)

    def forward(
        self, local_port: int = 8000, *, timeout: float = 900, stop: threading.Event | None = None,
        progress: Progress = _quiet, listening: Callable[[int], None] = lambda port: None,
    ) -> None:  # fmt: skip
        """Make the run's server (started by :meth:`serve`) reachable on ``127.0.0.1:local_port``
        until ``stop`` is set, through port-forwards of the API server (one per connection, as
        ``kubectl port-forward``); waits for the server to be Ready first.

        Args:
            local_port: The local port; 0 picks a free one (``listening`` is told which).
            timeout: Seconds to wait for the server to be Ready.
            stop: Ends the forwarding (default: never; Ctrl-C ends it from the CLI).
            progress: Gets what is being waited for.
            listening: Called with the port once connections are accepted.

        Raises:
            WaitTimeout: The server is not Ready in time (or it ended).
            CwError: The local port is taken.
        """
        import threading

        from cw_cli.after_training.serving import forward, wait_ready

        name = f"{self.name}-{SERVE}"
        progress(f"waiting until server {name} is Ready")
        wait_ready(self.session.kube, name, timeout)
        forward(self.session.kube, name, local_port, stop or threading.Event(), listening)

    def export(
        self, *, checkpoint: str = "final", merge: bool = False, push_to_hub: str | None = None, private: bool = False,
        overwrite: bool = False, gpu: int = 0, cpu: str | None = None, memory: str | None = None, to: str | None = None,
        secrets: Sequence[str] = (), force: bool = False,
    ) -> Export:  # fmt: skip
        """Start a Job that turns a checkpoint of the run into a model ready to use, on its volume.

        Args:
            checkpoint: ``final`` (the model saved at the end; the run must have succeeded),
                ``latest`` (its newest complete checkpoint), ``best`` (its best evaluated
                checkpoint) or a step number.
            merge: Merge a LoRA adapter into its base model.
            push_to_hub: Also upload it to this Hub repository (with the run's ``HF_TOKEN``).
            private: Create that repository private.
            overwrite: Replace an earlier export of the same checkpoint and form.
            gpu: GPUs for the export pod (merging is CPU work by default).
            cpu: Its CPU request and limit (default 8, at most what the run's trainer asked for).
            memory: Its memory request and limit (a merge holds the base model in memory; default
                64Gi, at most what the run's trainer asked for).
            to: Also copy it to object storage (``s3://BUCKET/PATH``, ``gs://``, ``az://``) from the pod.
            secrets: ``VAR=SECRET[:KEY]``: environment variables of the export pod taken from Secrets
                (the upload's credentials, e.g. ``AWS_SECRET_ACCESS_KEY=s3-credentials``).
            force: Export even where the run's export gate (its config's ``gate:``) refuses the
                checkpoint for scoring worse than the base model.

        Returns:
            The export, to wait for (``RUN/exported/<final|checkpoint-N>[-merged]`` on the volume).

        Raises:
            ConfigError: A bad choice, outputs on no volume, ``final`` before the run succeeded,
                what the run's folder lacks for the choice (read in a reader pod first), or
                ``best`` without scores.
            GateRefused: The export gate refuses the checkpoint (without ``force``).
            NotFound: No such run.
            Conflict: The same export exists already.
        """
        from cw_cli.after_training.export import create_export, export_facts
        from cw_cli.config.quantity import MIN_CPU, MIN_MEMORY, normalize_quantity
        from cw_cli.render.export import (
            EXPORT_CPU,
            EXPORT_MEMORY,
            ExportChoice,
            check_choice,
            check_gate,
            listing_problems,
            resolve_best,
        )
        from cw_cli.render.helper_sizing import fit_to_trainer

        try:
            cpu = None if cpu is None else normalize_quantity(cpu, MIN_CPU, "cpu")
            memory = None if memory is None else normalize_quantity(memory, MIN_MEMORY, "memory")
        except ValueError as exc:
            raise ConfigError([f"--cpu/--memory: {exc}"]) from None
        choice = ExportChoice(checkpoint=str(checkpoint), merge=merge, push_to_hub=push_to_hub, private=private,
                              overwrite=overwrite, gpu=gpu, to=to, secrets=tuple(secrets))  # fmt: skip
        problems = check_choice(choice)
        if problems:
            raise ConfigError(problems, hint="cw export --help")
        facts = export_facts(self.session.kube, self.name, choice)
        fitted_cpu, fitted_memory = fit_to_trainer(EXPORT_CPU, EXPORT_MEMORY, facts.trainer_requests)
        choice = structs.replace(choice, cpu=cpu or fitted_cpu, memory=memory or fitted_memory)
        listing = self.artifacts()
        choice = resolve_best(choice, listing)  # `best` is a step from here on: the Job's name says which
        problems = listing_problems(choice, listing)  # what the Job would fail on, before it exists
        if problems:
            raise ConfigError(problems, hint=f"`cw artifacts {self.name}` lists what the run left")
        if facts.gate is not None and not force:
            check_gate(facts.gate, choice, listing)
        return Export(create_export(self.session.kube, facts, choice), cast("Run", self), facts.run_dir)

    def evaluate(
        self, *, checkpoint: str = "final", tasks: Sequence[str] = (), metric: str | None = None,
        limit: float | None = None, gpu: int | None = None, cpu: str | None = None, memory: str | None = None,
        environments: Sequence[str] = (),
    ) -> Evaluation:  # fmt: skip
        """Start a Job that scores one model of the run with lm-evaluation-harness; its scores land
        beside the model (docs/evaluation.md).

        Args:
            checkpoint: ``final``, ``latest``, ``best``, a step number, or ``base`` (the model the
                run started from, for comparison).
            tasks: lm-eval tasks, or local task YAMLs; default: the run's ``eval:`` tasks.
            metric: The deciding ``<task>/<metric>`` (default: the run's, else the first task's first score).
            limit: Samples per task (default: the run's).
            gpu: GPUs of the evaluation pod: vLLM on a GPU, transformers on CPU (default: the run's choice).
            cpu: Its CPU request and limit (default: the run's ``eval.cpu``, else 4 capped at what
                its trainer asked for).
            memory: Its memory request and limit (default: the run's ``eval.memory``, else 32Gi
                capped at what its trainer asked for).
            environments: verifiers environments to score with vf-eval instead of lm-eval tasks (one
                the run shipped travels from its ConfigMap; any other is installed from the hub).

        Raises:
            ConfigError: No tasks (the run had no ``eval:`` and none given), an unknown task, a metric
                they do not report, no such model; all before anything is created.
            NotFound: No such run.
            Conflict: The same evaluation exists already.
        """
        from cw_cli.after_training.evaluation import (
            choose_target,
            create_eval,
            eval_facts,
            eval_settings,
            run_environments,
            run_settings,
        )
        from cw_cli.config.quantity import MIN_CPU, MIN_MEMORY, normalize_quantity
        from cw_cli.render.evaluation import EvalResources
        from cw_cli.render.helper_sizing import fit_to_trainer

        try:
            cpu = None if cpu is None else normalize_quantity(cpu, MIN_CPU, "cpu")
            memory = None if memory is None else normalize_quantity(memory, MIN_MEMORY, "memory")
        except ValueError as exc:
            raise ConfigError([f"--cpu/--memory: {exc}"]) from None
        if gpu is not None and not 0 <= gpu <= 8:
            raise ConfigError([f"--gpu {gpu}: expected 0 to 8"])
        named = str(checkpoint)
        if named not in ("final", "latest", "best", "base") and not (named.isdecimal() and named.isascii() and len(named) <= 11):
            raise ConfigError([f"--checkpoint {str(checkpoint)[:40]!r}: expected final, latest, best, base or a step number"])
        kube = self.session.kube
        settings, base = run_settings(kube, self.name)
        sized = (settings or {}).get("resources") or {}  # the run's eval: cpu/memory, as launched
        shipped = run_environments(kube, self.name) if environments else None
        settings = eval_settings(self.name, settings, list(tasks), metric, limit, gpu,
                                 environments=list(environments), shipped=shipped)  # fmt: skip
        facts = eval_facts(kube, self.name)
        chosen = choose_target(kube, self.name, facts.run_dir, str(checkpoint), base)
        default = EvalResources()
        fitted_cpu, fitted_memory = fit_to_trainer(default.cpu, default.memory, facts.trainer_requests)
        resources = EvalResources(gpu=int(settings.get("gpu") or 0), cpu=cpu or str(sized.get("cpu") or fitted_cpu),
                                  memory=memory or str(sized.get("memory") or fitted_memory))  # fmt: skip
        name = create_eval(kube, facts, settings, chosen, resources)
        return Evaluation(name=name, run=cast("Run", self), checkpoint=chosen.label, scores=f"{chosen.out}/scores.json")
