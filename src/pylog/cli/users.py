"""``pylog users``: SCRAM users, as ``kafka-configs.sh --entity-type users`` manages them.

    pylog users --log-dirs D --alter --entity-name alice --add-config 'SCRAM-SHA-512=[password=secret]'
    pylog users --log-dirs D --alter --entity-name alice --delete-config SCRAM-SHA-256
    pylog users --log-dirs D --describe [--entity-name alice]
    pylog users --bootstrap-server H:P --command-config admin.properties --alter ...

The password is salted here (a fresh random salt, ``iterations`` as given or Kafka's
4096) and only the credential leaves this process: with ``--log-dirs`` into the store
(which must not be in use: stop ``pylog serve``, or use ``--bootstrap-server``), with
``--bootstrap-server`` in an AlterUserScramCredentials request, as Kafka's admin client
sends it. ``--command-config`` is a Kafka client properties file (``security.protocol``,
``sasl.mechanism``, ``sasl.jaas.config``; for SSL and SASL_SSL ``ssl.truststore.location``
and the other keys of pylog.remote.tls), as Kafka's tools take it. A password left out
of ``--add-config`` is asked for on the terminal (or read from stdin), not echoed.
"""

from __future__ import annotations

import re

import click

from .common import fail_on, log_dirs_option, print_json
from .remote import bootstrap_option

__all__ = ["users"]

_CREDENTIAL = re.compile(r"(?P<mechanism>SCRAM-SHA-(?:256|512))=\[(?P<body>.*)\]", re.DOTALL)


def _upsertions(items: tuple[str, ...]) -> list[tuple[str, int, str | None]]:
    """(mechanism, iterations, password or None) from Kafka's --add-config syntax
    ``SCRAM-SHA-256=[iterations=8192,password=alice-secret]``."""
    from pylog.common.scram import DEFAULT_ITERATIONS, MECHANISMS
    out = []
    for item in items:
        for part in _split_configs(item):
            found = _CREDENTIAL.fullmatch(part.strip())
            if found is None:
                raise click.BadParameter(
                    f"expected SCRAM-SHA-256=[password=...] or SCRAM-SHA-512=[iterations=N,"
                    f"password=...], got {part!r}", param_hint="--add-config")
            body = found["body"]
            iterations, password = DEFAULT_ITERATIONS, None
            if body.startswith("iterations="):
                number, _, body = body[len("iterations="):].partition(",")
                if not number.lstrip("-").isdigit():
                    raise click.BadParameter(f"iterations must be a number, got {number!r}",
                                             param_hint="--add-config")
                iterations = DEFAULT_ITERATIONS if int(number) == -1 else int(number)
            if body.startswith("password="):
                password = body[len("password="):]
            elif body:
                raise click.BadParameter(f"unexpected {body!r} in {part!r}", param_hint="--add-config")
            mechanism = MECHANISMS[found["mechanism"]]
            if iterations < mechanism.min_iterations:
                raise click.BadParameter(f"Iterations {iterations} is less than the minimum "
                                         f"{mechanism.min_iterations} required for {mechanism.name}",
                                         param_hint="--add-config")
            out.append((mechanism.name, iterations, password))
    return out


def _split_configs(text: str) -> list[str]:
    """Kafka's --add-config list: commas separate entries, except inside [...]."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


@click.command(help="Add, delete and describe users' SCRAM credentials (kafka-configs.sh "
                    "--entity-type users), in log dirs or at a broker (--bootstrap-server).")
@log_dirs_option(required=False)
@bootstrap_option()
@click.option("--command-config", type=click.Path(dir_okay=False, exists=True),
              help="Kafka client properties for --bootstrap-server (security.protocol, "
                   "sasl.mechanism, sasl.jaas.config, ssl.truststore.location, ...)")
@click.option("--alter", "action", flag_value="alter")
@click.option("--describe", "action", flag_value="describe")
@click.option("--entity-type", type=click.Choice(["users"]), default="users", show_default=True,
              help="kafka-configs' entity type (users only)")
@click.option("--entity-name", help="the user")
@click.option("--add-config", "add", multiple=True, metavar="'SCRAM-SHA-512=[password=...]'",
              help="a credential to set, Kafka's syntax (iterations=N, optional, first)")
@click.option("--delete-config", "delete", multiple=True, metavar="SCRAM-SHA-256",
              help="a mechanism whose credential to delete (comma-separated or repeated)")
@click.option("--json", "as_json", is_flag=True, help="machine-readable output (describe)")
@fail_on(Exception)
def users(log_dirs, bootstrap_server, command_config, action, entity_type, entity_name, add, delete,
          as_json) -> int:
    if bool(log_dirs) == bool(bootstrap_server):
        raise click.UsageError("give --log-dirs or --bootstrap-server (one of them)")
    if action is None:
        raise click.UsageError("give --alter or --describe")
    if command_config and not bootstrap_server:
        raise click.UsageError("--command-config goes with --bootstrap-server")
    store = _Local(log_dirs) if log_dirs else _Remote(bootstrap_server, command_config)
    if action == "describe":
        with store:
            return _describe(store, entity_name, as_json)
    if not entity_name:
        raise click.UsageError("--alter needs --entity-name")
    deletions = [m.strip() for d in delete for m in d.split(",") if m.strip()]
    upsertions = _upsertions(add)
    if not deletions and not upsertions:
        raise click.UsageError("--alter needs --add-config or --delete-config")
    import secrets

    from pylog.common.scram import MECHANISMS, salted_password
    for name in deletions:
        if name not in MECHANISMS:
            raise click.BadParameter(f"{name!r} is not a SCRAM mechanism (SCRAM-SHA-256, "
                                     f"SCRAM-SHA-512)", param_hint="--delete-config")
    salted = []                 # (mechanism, iterations, salt, salted password): no password
    for name, iterations, password in upsertions:
        if password is None:
            password = click.prompt(f"{name} password for {entity_name}", hide_input=True,
                                    confirmation_prompt=True, err=True)
        salt = secrets.token_bytes(32)
        salted.append((name, iterations, salt,
                       salted_password(MECHANISMS[name], password, salt, iterations)))
    with store:
        # One change per mechanism: Kafka's controller refuses a user named twice in one
        # AlterUserScramCredentials (DUPLICATE_RESOURCE), which kafka-configs runs into
        # when given both mechanisms at once.
        changes = [([name], []) for name in deletions] + [([], [u]) for u in salted]
        for removed, added in changes:
            problem = store.alter(entity_name, removed, added)
            if problem:
                raise click.ClickException(f"could not alter {entity_name}'s SCRAM credentials: {problem}")
        click.echo(f"Completed updating config for user {entity_name}.")
    return 0


def _describe(store, user: str | None, as_json: bool) -> int:
    """kafka-configs' lines: "SCRAM credential configs for user-principal 'alice' are
    SCRAM-SHA-512=iterations=4096"."""
    found = store.describe([user] if user else None)
    if as_json:
        print_json({u: v if isinstance(v, dict) else {"error": v} for u, v in found.items()})
        return 0
    for name, value in found.items():
        if isinstance(value, dict):
            text = ", ".join(f"{m}=iterations={i}" for m, i in value.items())
            click.echo(f"SCRAM credential configs for user-principal '{name}' are {text}")
        else:
            click.echo(f"Error retrieving SCRAM credential configs for user-principal '{name}': {value}")
    return 0


class _Local:
    """The store's own methods (the store opened here, so not in use elsewhere)."""

    def __init__(self, log_dirs: str) -> None:
        self.log_dirs = log_dirs

    def __enter__(self):
        import pylog
        self.store = pylog.open(self.log_dirs)
        return self

    def __exit__(self, *exc) -> None:
        self.store.close()

    def describe(self, users):
        return {u: v if isinstance(v, dict) else str(v)
                for u, v in self.store.describe_user_scram_credentials(users).items()}

    def alter(self, user, deletions, upsertions) -> str | None:
        from pylog.common.scram import MECHANISMS, credential_from_salted
        outcome = self.store.alter_user_scram_credentials(
            [(user, name) for name in deletions],
            [(user, name, credential_from_salted(MECHANISMS[name], salt, salted, iterations))
             for name, iterations, salt, salted in upsertions])
        return None if outcome.get(user) is None else str(outcome[user])


class _Remote:
    """Describe/AlterUserScramCredentials at a broker, authenticated as --command-config says."""

    def __init__(self, bootstrap: str, command_config: str | None) -> None:
        self.bootstrap, self.command_config = bootstrap, command_config

    def __enter__(self):
        from pylog.broker import read_properties
        from pylog.protocol.client import ProtocolClient
        from pylog.remote.sasl import SaslLogin
        from pylog.remote.tls import client_ssl_context
        props = read_properties(self.command_config) if self.command_config else {}
        where = self.command_config or "client config"
        self.client = ProtocolClient(self.bootstrap.split(",")[0].strip(), client_id="pylog-users",
                                     authenticate=SaslLogin.from_properties(props, where),
                                     ssl_context=client_ssl_context(props, where))
        return self

    def __exit__(self, *exc) -> None:
        self.client.close()

    def describe(self, users):
        from pylog.common.scram import MECHANISMS_BY_TYPE
        from pylog.protocol import ApiKey
        from pylog.protocol import messages as m
        from pylog.protocol.client import ProtocolError
        request = m.DescribeUserScramCredentialsRequest(
            users=None if users is None else [m.DescribeUserScramCredentialsRequestUserName(name=u)
                                              for u in users])
        answer = self.client.request(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, request)
        if answer.error_code:
            raise ProtocolError(answer.error_code, f"DescribeUserScramCredentials: {answer.error_message}")
        return {r.user: {MECHANISMS_BY_TYPE[c.mechanism].name: c.iterations for c in r.credential_infos}
                if not r.error_code else f"{r.error_message} (Kafka error {r.error_code})"
                for r in answer.results}

    def alter(self, user, deletions, upsertions) -> str | None:
        from pylog.common.scram import MECHANISMS
        from pylog.protocol import ApiKey
        from pylog.protocol import messages as m
        request = m.AlterUserScramCredentialsRequest(
            deletions=[m.AlterUserScramCredentialsRequestScramCredentialDeletion(
                name=user, mechanism=MECHANISMS[name].type) for name in deletions],
            upsertions=[m.AlterUserScramCredentialsRequestScramCredentialUpsertion(
                name=user, mechanism=MECHANISMS[name].type, iterations=iterations, salt=salt,
                salted_password=salted) for name, iterations, salt, salted in upsertions])
        answer = self.client.request(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, request)
        for r in answer.results:
            if r.user == user and r.error_code:
                return f"{r.error_message} (Kafka error {r.error_code})"
        return None
