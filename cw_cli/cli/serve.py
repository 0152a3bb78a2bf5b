"""`cw serve RUN` and `cw try RUN "question"`: the run's model answering, on the cluster."""

from __future__ import annotations

import click

from cw_cli import api
from cw_cli.cli.errors import handle_errors
from cw_cli.cli.options import checkpoint_form, context_option, duration_form, namespace_option, run_argument
from cw_cli.cli.plain import printable, say
from cw_cli.errors import CwError, ExitCode

SERVE_DRY_RUN_HEADER = (
    "# cw serve --dry-run: the server's Pod and Service, created nowhere (cw read the run's volume\n"
    "# in a reader pod to choose the model; `cw serve` also makes the Pod the Service's owner).\n"
)
_ENGINE_HELP = ("vllm (on GPUs) or transformers (transformers' own server, on CPU, in the run's image); "
                "default transformers where there is no GPU to use (--gpu 0, or the test cluster), else vllm.")
_CHECKPOINT_HELP = "final, latest, best (the best evaluated checkpoint), a step number, or export:NAME (e.g. export:final-merged)."


@click.command("serve")
@run_argument()
@click.option("--checkpoint", default="final", show_default=True, callback=checkpoint_form, help=_CHECKPOINT_HELP)
@click.option("--ttl", default="2h", show_default=True, callback=duration_form,
              help="How long the server lives (the kubelet ends it then).")
@click.option("--gpu", type=int, default=1, show_default=True, help="GPUs of the server.")
@click.option("--engine", type=click.Choice(["vllm", "transformers"]), default=None, help=_ENGINE_HELP)
@click.option("--forward", "forward_port", type=click.IntRange(0, 65535), metavar="PORT",
              help="Stay, and make the server reachable on 127.0.0.1:PORT (0: any free port) until Ctrl-C.")
@click.option("--timeout", type=click.FloatRange(1, 86400), default=900, show_default=True,
              help="With --forward: seconds to wait for the server to be Ready.")
@click.option("--dry-run", is_flag=True,
              help="Print the server's Pod and Service instead of creating them (the run's volume is still read).")
@namespace_option
@context_option
@handle_errors
def serve_command(
    run: str, checkpoint: str, ttl: str, gpu: int, engine: str | None, forward_port: int | None, timeout: float,
    dry_run: bool, namespace: str | None, context: str | None,
) -> None:  # fmt: skip
    """Serve a run's model (vLLM, or transformers on CPU) for a while, reachable through the API server."""
    from cw_cli.cli.runs import check_run_argument

    check_run_argument(run)
    session = api.Session(context=context, namespace=namespace)
    if dry_run:
        from cw_cli.render.helper_pods import manifests_yaml

        manifests = session.run(run).server_manifests(checkpoint=checkpoint, ttl=ttl, gpu=gpu, engine=engine)
        click.echo(SERVE_DRY_RUN_HEADER + manifests_yaml(manifests), nl=False)
        return
    if forward_port:
        _check_port_free(forward_port)  # before the server exists: it would live its whole lifetime for nothing
    name = session.run(run).serve(checkpoint=checkpoint, ttl=ttl, gpu=gpu, engine=engine)
    say(f"server {click.style(name, bold=True)} starting (ends after {printable(ttl)}; sooner: kubectl delete pod {name})")
    served = session.run(run).served_name()
    model = f"with model {served!r}" if served else "(its one model: name none)"
    if forward_port is None:
        say(f"reach it: kubectl port-forward -n {session.namespace} svc/{name} 8000:8000, then "
            f"POST http://localhost:8000/v1/chat/completions {model} (or cw serve ... --forward 8000)")  # fmt: skip
        return

    def listening(port: int) -> None:
        say(f"forwarding 127.0.0.1:{port} to {name}: POST http://127.0.0.1:{port}/v1/chat/completions {model}; "
            "Ctrl-C stops forwarding (the server lives on until its end)")  # fmt: skip

    try:
        session.run(run).forward(forward_port, timeout=timeout, progress=lambda line: say(printable(line)),
                                 listening=listening)  # fmt: skip
    except KeyboardInterrupt:
        say(f"stopped forwarding; {name} ends after {printable(ttl)} (kubectl delete pod {name} ends it now)")
        raise click.exceptions.Exit(int(ExitCode.INTERRUPTED)) from None


@click.command("try")
@run_argument()
@click.argument("question")
@click.option("--checkpoint", default="final", show_default=True, callback=checkpoint_form, help=_CHECKPOINT_HELP)
@click.option("--gpu", type=int, default=1, show_default=True, help="GPUs of the server.")
@click.option("--engine", type=click.Choice(["vllm", "transformers"]), default=None, help=_ENGINE_HELP)
@click.option("--max-tokens", type=click.IntRange(1, 32768), default=256, show_default=True, help="Longest answer.")
@click.option("--timeout", type=click.FloatRange(1, 86400), default=900, show_default=True,
              help="Seconds to wait for the server to be Ready.")
@namespace_option
@context_option
@handle_errors
def try_command(
    run: str, question: str, checkpoint: str, gpu: int, engine: str | None, max_tokens: int, timeout: float,
    namespace: str | None, context: str | None,
) -> None:  # fmt: skip
    """Ask a run's model one question (a server is started on it, asked and stopped)."""
    from cw_cli.cli.heartbeat import Heartbeat
    from cw_cli.cli.interrupts import termination_as_interrupt
    from cw_cli.cli.runs import check_run_argument

    check_run_argument(run)
    # The server is stopped on the way out, whatever ends cw; a line every 30 s on a pipe: not a hang.
    with termination_as_interrupt(), Heartbeat(f"reading run {run}'s volume to choose the model") as beat:
        answer = api.Session(context=context, namespace=namespace).run(run).try_(
            question, checkpoint=checkpoint, gpu=gpu, max_tokens=max_tokens, timeout=timeout, engine=engine,
            progress=lambda line: beat.stage(printable(line)),
        )  # fmt: skip
    click.echo(printable(answer, lines=True))


def _check_port_free(port: int) -> None:
    """Refuse a local port that is taken (exit 2), before anything is started."""
    import socket

    try:
        socket.create_server(("127.0.0.1", port)).close()
    except OSError as exc:
        raise CwError(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}",
                      hint="choose another port with --forward PORT (0: any free one)") from None  # fmt: skip
