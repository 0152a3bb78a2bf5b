"""The `notify:` cluster field: where the cluster tells the user how a run is going.

```yaml
notify:
  urls: ["slack://{SLACK_A}/{SLACK_B}/{SLACK_C}", "json://hooks.example.com/cw"]
  secret: cw-notify            # the Secret whose keys fill the {KEY} placeholders, in the trainer pod only
  events: [succeeded, failed, stalled, restarted]   # the default: all four
```

URLs are Apprise URLs (https://github.com/caronc/apprise/wiki): Slack, Discord, email, Teams, a
plain JSON webhook (``json://``) and about a hundred more. A secret part of a URL (a token, a
password) is written as a ``{KEY}`` placeholder; the trainer pod reads ``KEY`` from the Secret
named by ``secret`` (``secretKeyRef`` on the trainer container), so no secret value is in the
ConfigMap, the Job's spec or the rendered manifests.

The model only checks the shape (it is read on every command, dry runs too). Whether each URL
is one Apprise understands, and that no secret part is written out in plain text, is checked at
launch by :func:`check_urls`, which imports Apprise (about 330 ms) only then.

Unlike cw's other modules, this one keeps its annotations evaluated (as config/models.py does).
"""

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.functional_validators import AfterValidator

from cw_cli.errors import ConfigError

#: What the cluster can say, in the order a run lives them.
Event = Literal["succeeded", "failed", "stalled", "restarted"]
EVENTS: tuple[Event, ...] = ("succeeded", "failed", "stalled", "restarted")
#: ``{KEY}``: a key of the Secret (Kubernetes allows letters, digits, ``-``, ``_`` and ``.``).
PLACEHOLDER = re.compile(r"\{([-._a-zA-Z0-9]{1,253})\}")
#: Stands for a placeholder's value while a URL is checked here: the secret never leaves the cluster.
DUMMY = "cwPlaceholder0"
_SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S+")
MAX_URLS = 20


def _url(value: str) -> str:
    if not _SCHEME.fullmatch(value):
        shown = value if len(value) <= 60 else value[:60] + "..."
        raise ValueError(f"{shown!r} is not a notification URL (SCHEME://..., e.g. slack://{{A}}/{{B}}/{{C}} or json://host/path)")
    return value


def _secret_name(value: str) -> str:
    if not _SECRET_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a Secret name (lowercase letters, digits, '-' and '.')")
    return value


class NotifySpec(BaseModel):
    """Where and when the cluster tells the user about a run (see the module's docstring)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    urls: list[Annotated[str, Field(max_length=2000), AfterValidator(_url)]] = Field(
        min_length=1,
        max_length=MAX_URLS,
        description="Apprise notification URLs (slack://, discord://, mailtos://, json://, ...); write a secret part "
        "as {KEY}, a key of `secret`.",
    )
    secret: Annotated[str, AfterValidator(_secret_name)] | None = Field(
        default=None, description="The Secret whose keys fill the URLs' {KEY} placeholders, in the trainer pod only."
    )
    events: list[Event] = Field(
        default=list(EVENTS),
        min_length=1,
        description="What the cluster tells: succeeded, failed (with the reason), stalled, restarted (default: all).",
    )

    @model_validator(mode="after")
    def _placeholders_have_a_secret(self) -> "NotifySpec":
        if self.secret is None:
            for index, url in enumerate(self.urls):
                if found := PLACEHOLDER.search(url):
                    raise ValueError(
                        f"urls[{index}] takes {{{found.group(1)}}} from a Secret, but `secret` names none; add "
                        "`secret: <Secret name>` (a Secret with that key in the run's namespace)"
                    )
        return self

    def keys(self) -> list[str]:
        """The Secret's keys the URLs use, sorted."""
        return sorted({key for url in self.urls for key in PLACEHOLDER.findall(url)})


def check_urls(spec: NotifySpec, config: Path) -> None:
    """Refuse a URL Apprise does not understand, or one with a secret part written out.

    Each placeholder is replaced by a dummy value first; the parts Apprise marks private (tokens,
    passwords, webhook ids) must all come from placeholders, so that the Secret, not the config,
    holds them.

    Args:
        spec: The run's `notify`.
        config: The config file, named in the error.

    Raises:
        ConfigError: The first bad URL, naming ``notify.urls[i]`` and the file, with a fix.
    """
    import apprise  # about 330 ms: only a launch with `notify` pays it

    for index, url in enumerate(spec.urls):
        where = f"{config}: `notify.urls[{index}]`"
        filled = PLACEHOLDER.sub(DUMMY, url)
        plugin = apprise.Apprise.instantiate(filled, suppress_exceptions=True)
        if plugin is None:
            raise ConfigError(
                [f"{where}: {_cut(url)} is not a notification URL Apprise understands"],
                hint="write it as the Apprise wiki shows for the service (https://github.com/caronc/apprise/wiki), "
                "e.g. slack://{A}/{B}/{C}, discord://{ID}/{TOKEN}, mailtos://user:{PASSWORD}@host, or "
                "json://host/path for a plain webhook (jsons:// over HTTPS)",
            )
        written = _plain_secrets(type(plugin), filled)
        if written:
            raise ConfigError(
                [f"{where}: {_cut(_mask(url, written))} holds a secret part ({', '.join(sorted(written))}) written "
                 "out; it would be readable in the run's objects"],
                hint="put the value in a Secret (kubectl create secret generic cw-notify --from-literal=KEY=...) and "
                "write {KEY} in the URL, with `notify.secret: cw-notify`",
            )  # fmt: skip


def _plain_secrets(plugin: type, url: str) -> dict[str, str]:
    """Private parts of ``url`` (Apprise's ``private`` tokens and arguments) that are not a placeholder."""
    parsed = plugin.parse_url(url) or {}  # type: ignore[attr-defined]
    described = {**getattr(plugin, "template_tokens", {}), **getattr(plugin, "template_args", {})}
    private = {name for name, info in described.items() if isinstance(info, dict) and info.get("private")}
    private |= {info["map_to"] for name, info in described.items() if name in private and isinstance(info, dict) and "map_to" in info}
    written = {}
    for name in private:
        value = parsed.get(name)
        values = value if isinstance(value, (list, tuple, set)) else [value]
        for item in values:
            if isinstance(item, str) and item and DUMMY not in item:
                written[name] = item
    return written


def _mask(url: str, secrets: dict[str, str]) -> str:
    for value in secrets.values():
        url = url.replace(value, "****")
    return url


def _cut(text: str) -> str:
    return text if len(text) <= 120 else text[:120] + "..."
