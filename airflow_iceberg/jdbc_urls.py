"""A JDBC URL read the way its driver reads it: driver, hosts, database, and the properties it sets.

Three readers need to know which database a JDBC URL reaches: the asset URI and OpenLineage
names (:mod:`airflow_iceberg.naming`), the snapshot sensor, which reaches a JDBC catalog's
PostgreSQL database through SQLAlchemy and psycopg2 (:mod:`airflow_iceberg.catalog.pyiceberg_tables`),
and the connection form's Test button (:mod:`airflow_iceberg.catalog.connection_check`). They all
read it here, so they agree on the database and on the schema the catalog's tables live in.

Each driver has its own syntax, and the forms below are the documented ones:

- pgjdbc: ``jdbc:postgresql://host[:port][,host[:port]...]/[database][?k=v&...]``, and
  ``jdbc:postgresql:database`` / ``jdbc:postgresql:/`` (``localhost:5432``);
- MySQL Connector/J and MariaDB Connector/J: a mode before the hosts
  (``jdbc:mysql:loadbalance://``, ``:replication:``, mariadb ``:sequential:`` ...), which says how
  the client picks a host, not which database it reaches; hosts as ``host:port``,
  ``address=(host=h)(port=p)``, ``(host=h,port=p)`` or a bracketed list;
- SQL Server: ``jdbc:sqlserver://[server[\\instance][:port]][;property=value...]``, where
  ``serverName``, ``instanceName``, ``portNumber`` and ``databaseName`` may also be properties;
- Oracle: ``jdbc:oracle:thin:[user[/password]]@`` followed by ``//host:port/service``,
  ``host:port:SID``, a ``(DESCRIPTION=...)`` descriptor or a TNS alias;
- DB2: ``jdbc:db2://host:port/database:property=value;...``;
- SQLite: ``jdbc:sqlite:<path>`` (``file:`` URIs included);
- any other driver: ``jdbc:<driver>:[mode:]//hosts/path`` with ``?`` or ``;`` properties, or an
  opaque ``jdbc:<driver>:<name>``.

:func:`schema_properties` picks the properties that choose the database or the schema (pgjdbc's
``currentSchema`` and the ``search_path`` in ``options``, SQL Server's ``databaseName`` ...): two
JdbcCatalogs on one database in two schemas are two catalogs. :func:`libpq_parameters` maps a
pgjdbc URL to libpq's parameters. Pure and light: no Airflow, SQLAlchemy or driver import.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

#: Driver modes written between ``jdbc:<driver>:`` and ``//``: how a client picks among the hosts.
_MODE_RE = re.compile(r"^((?:[A-Za-z][A-Za-z0-9+_-]*:)+)//")
#: ``key=value`` pairs inside MySQL/MariaDB's ``address=(host=h)(port=p)`` and ``(host=h,port=p)``.
_HOST_KEY_RE = re.compile(r"\(?\s*(host|port)\s*=\s*([^,()]*)\)?", re.IGNORECASE)
#: Each ``(ADDRESS=...)`` of an Oracle ``(DESCRIPTION=...)``, and the keys inside one.
_TNS_ADDRESS_RE = re.compile(r"\(\s*ADDRESS\s*=((?:[^()]|\([^()]*\))*)\)", re.IGNORECASE)
_TNS_KEY_RE = re.compile(r"\(\s*(HOST|PORT|SERVICE_NAME|SID)\s*=\s*([^)]*)\)", re.IGNORECASE)
#: The properties that choose the database or schema, per driver (matched case-insensitively for
#: drivers that read them so); ``*`` is any driver not listed.
SCHEMA_KEYS: dict[str, tuple[str, ...]] = {
    "postgresql": ("currentSchema",),
    "sqlserver": ("databaseName",),
    "db2": ("currentSchema",),
    "h2": ("SCHEMA",),
    "mysql": (),
    "mariadb": (),
    "oracle": (),
    "sqlite": (),
    "*": ("currentSchema", "schema", "databaseName", "database", "db"),
}
#: Drivers whose property names are case-sensitive (pgjdbc reads ``currentSchema`` only).
_CASE_SENSITIVE_KEYS = ("postgresql",)
#: pgjdbc properties that have a libpq parameter, and its name.
_LIBPQ_NAMES = {
    "sslmode": "sslmode",
    "sslcert": "sslcert",
    "sslkey": "sslkey",
    "sslrootcert": "sslrootcert",
    "gssEncMode": "gssencmode",
    "connectTimeout": "connect_timeout",
    "ApplicationName": "application_name",
    "options": "options",
}
#: pgjdbc's ``targetServerType`` values and libpq's ``target_session_attrs`` for them.
_TARGET_SESSION_ATTRS = {
    "any": "any",
    "primary": "primary",
    "master": "primary",
    "secondary": "standby",
    "slave": "standby",
    "preferSecondary": "prefer-standby",
    "preferSlave": "prefer-standby",
}


@dataclass(frozen=True)
class JdbcUrl:
    """A JDBC URL taken apart: what it reaches, and every property it sets.

    ``hosts`` are ``(host, port)`` as written (port ``""`` when none is written); ``database`` is
    the database, path, service (Oracle ``/service``), SID (Oracle ``:sid``) or file; ``opaque``
    says the URL names its database without hosts (``jdbc:derby:memory:db``). The
    ``properties`` are decoded as the driver decodes them and may hold credentials: never show
    them; :func:`schema_properties` picks the ones that name a schema.
    """

    driver: str
    hosts: tuple[tuple[str, str], ...] = ()
    database: str = ""
    properties: tuple[tuple[str, str], ...] = ()
    opaque: bool = False

    def property(self, name: str) -> str | None:
        """The last value set for ``name`` (case-insensitively unless the driver reads names exactly)."""
        exact = self.driver in _CASE_SENSITIVE_KEYS
        found = [v for k, v in self.properties if (k == name if exact else k.lower() == name.lower())]
        return found[-1] if found else None


def parse_jdbc_url(url: str) -> JdbcUrl:
    """Take ``jdbc:<driver>:...`` apart as its driver does (see the module docstring for the forms)."""
    text = url.strip()
    if not text.lower().startswith("jdbc:"):
        raise ValueError("a JDBC URL starts with jdbc:")
    driver, _, rest = text[5:].partition(":")
    driver = driver.lower()
    if driver == "sqlite":
        return _sqlite(rest)
    if driver == "oracle":
        return _oracle(rest)
    if driver == "sqlserver":
        return _sqlserver(rest)
    mode = _MODE_RE.match(rest)
    if mode:  # jdbc:mysql:loadbalance://..., jdbc:h2:tcp://...: how to connect, not where
        rest = rest[len(mode.group(1)) :]
    if rest.startswith("//"):
        return _with_authority(driver, rest[2:])
    if driver == "postgresql":  # jdbc:postgresql:database and jdbc:postgresql:/ reach localhost:5432
        database, _, query = rest.partition("?")
        return JdbcUrl(driver, (("localhost", ""),), database.lstrip("/"), _query_pairs(query))
    return _opaque(driver, rest)


def schema_properties(jdbc: JdbcUrl) -> list[tuple[str, str]]:
    """The ``(key, value)`` properties that choose the database or the schema, in canonical form.

    For PostgreSQL this is ``currentSchema``, which pgjdbc sends as ``search_path``; a
    ``-c search_path=...`` in ``options`` says the same thing and counts when ``currentSchema``
    is not set (when both are, the startup parameter is applied after ``options``). Values are
    kept as written, lists without spaces around their commas.
    """
    keys = SCHEMA_KEYS.get(jdbc.driver, SCHEMA_KEYS["*"])
    found = [(key, value) for key in keys if (value := jdbc.property(key))]
    if jdbc.driver == "postgresql" and not found:
        search_path = options_search_path(jdbc.property("options") or "")
        if search_path:
            found = [("currentSchema", search_path)]
    return sorted((key, re.sub(r"\s*,\s*", ",", value.strip())) for key, value in found)


def options_search_path(options: str) -> str | None:
    """The ``search_path`` a libpq ``options`` string sets (``-c search_path=a`` or ``-csearch_path=a``)."""
    words = re.split(r"(?<!\\)\s+", options.strip())
    value = None
    for index, word in enumerate(words):
        setting = word[2:] if word.startswith("-c") and len(word) > 2 else None
        if word in ("-c", "--") and index + 1 < len(words):
            setting = words[index + 1]
        elif word.startswith("--"):
            setting = word[2:]
        if setting and setting.replace("-", "_").lower().startswith("search_path="):
            value = setting.split("=", 1)[1].replace("\\ ", " ")
    return value


def libpq_parameters(jdbc: JdbcUrl) -> dict[str, str]:
    """libpq connection parameters (psycopg2, SQLAlchemy) for a pgjdbc URL, without user and password.

    Hosts and ports as libpq lists them (``a,b`` / ``5432,5433``), the database, and the pgjdbc
    properties libpq has too: ``sslmode`` (pgjdbc's ``ssl=true`` alone means ``verify-full``),
    ``sslcert``, ``sslkey``, ``sslrootcert``, ``gssEncMode``, ``connectTimeout``,
    ``ApplicationName``, ``options`` and ``targetServerType``; ``currentSchema`` becomes a
    ``-c search_path=`` at the end of ``options``, so it wins as it does with pgjdbc. Java-only
    properties are left out. Raises ``ValueError`` for a port that is not a number.
    """
    hosts = jdbc.hosts or (("localhost", ""),)
    for host, port in hosts:
        if port and not port.isdigit():
            raise ValueError(f"the port {port!r} of the host {host!r} is not a number")
    parameters = {
        "host": ",".join(host.strip("[]") or "localhost" for host, _ in hosts),
        "port": ",".join(port or "5432" for _, port in hosts),
    }
    if jdbc.database:
        parameters["dbname"] = jdbc.database
    for name, libpq_name in _LIBPQ_NAMES.items():
        value = jdbc.property(name)
        if value:
            parameters[libpq_name] = value
    if "sslmode" not in parameters and (jdbc.property("ssl") or "").lower() == "true":
        parameters["sslmode"] = "verify-full"
    target = _TARGET_SESSION_ATTRS.get(jdbc.property("targetServerType") or "")
    if target:
        parameters["target_session_attrs"] = target
    schema = jdbc.property("currentSchema")
    if schema:
        setting = "-c search_path=" + re.sub(r"\s*,\s*", ",", schema.strip()).replace(" ", "\\ ")
        parameters["options"] = f"{parameters['options']} {setting}" if "options" in parameters else setting
    return parameters


def split_semicolons(text: str) -> list[str]:
    """Split at ``;`` outside SQL Server's ``{...}`` quoting (a value may hold ``;`` in braces)."""
    return split_outside_brackets(text, ";", "{", "}")


def split_outside_brackets(text: str, separator: str, openers: str, closers: str) -> list[str]:
    """Split ``text`` at ``separator`` where no bracket of ``openers``/``closers`` is open."""
    parts, current, depth = [], [], 0
    for char in text:
        if char in openers:
            depth += 1
        elif char in closers and depth:
            depth -= 1
        if char == separator and not depth:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


# --------------------------------------------------------------------------- the forms


def _with_authority(driver: str, text: str) -> JdbcUrl:
    """``hosts/path`` followed by ``?k=v&...`` or ``;k=v;...`` (DB2: ``/database:k=v;...``)."""
    main, _, query = text.partition("?")
    main, *semicolon_properties = split_semicolons(main)
    authority, _, path = _split_authority(main)
    properties = _semicolon_pairs(semicolon_properties)
    if driver == "db2" and ":" in path:  # jdbc:db2://h:50000/SAMPLE:currentSchema=X;user=u;
        path, _, tail = path.partition(":")
        properties = _semicolon_pairs(split_semicolons(tail)) + properties
    hosts = tuple(_host_and_port(member) for member in _split_hosts(authority))
    if driver == "postgresql" and not hosts:  # jdbc:postgresql:///db: pgjdbc's default host
        hosts = (("localhost", ""),)
    return JdbcUrl(driver, hosts, path, properties + _query_pairs(query))


def _sqlite(rest: str) -> JdbcUrl:
    path, _, query = rest.partition("?")
    return JdbcUrl("sqlite", (), path, _query_pairs(query))


def _sqlserver(rest: str) -> JdbcUrl:
    main, *properties_text = split_semicolons(rest)
    properties = _semicolon_pairs(properties_text)
    jdbc = JdbcUrl("sqlserver", (), "", properties)
    server, _, port = main.removeprefix("//").rstrip("/").partition(":")
    server = server or jdbc.property("serverName") or ""
    if "\\" not in server and jdbc.property("instanceName"):
        server = f"{server}\\{jdbc.property('instanceName')}"
    port = port or jdbc.property("portNumber") or jdbc.property("port") or ""
    database = jdbc.property("databaseName") or jdbc.property("database") or ""
    properties = tuple((k, v) for k, v in properties if k.lower() != "database") + (
        (("databaseName", database),) if database and not jdbc.property("databaseName") else ()
    )
    return JdbcUrl("sqlserver", ((server, port),) if server else (), "", properties)


def _oracle(rest: str) -> JdbcUrl:
    """``thin:[user[/password]]@<spec>``: everything up to the last ``@`` is credentials, and goes."""
    _, _, spec = rest.partition(":")  # thin, oci, kprb: which client, not which database
    spec = spec.rpartition("@")[2]
    spec = re.sub(r"^(tcps?://)", "", spec, flags=re.IGNORECASE)
    if spec.startswith("("):  # (DESCRIPTION=(ADDRESS=(PROTOCOL=TCP)(HOST=h)(PORT=1521))(CONNECT_DATA=...))
        return _oracle_descriptor(spec)
    spec = spec.partition("?")[0]
    if spec.startswith("//") or "/" in spec:  # EZConnect: [//]host[:port][/service[:server][/instance]]
        authority, slash, service = spec.removeprefix("//").partition("/")
        hosts = tuple(_host_and_port(member) for member in _split_hosts(authority))
        return JdbcUrl("oracle", hosts, f"/{service}" if slash else "")
    host, _, tail = spec.partition(":")
    port, _, sid = tail.partition(":")
    if sid:  # host:port:SID
        return JdbcUrl("oracle", ((host, port),), ":" + sid)
    if port.isdigit():
        return JdbcUrl("oracle", ((host, port),))
    return JdbcUrl("oracle", (), spec)  # a TNS alias, resolved through tnsnames.ora


def _oracle_descriptor(spec: str) -> JdbcUrl:
    """Hosts, ports and the service (``/name``) or SID (``:name``) of an Oracle ``(DESCRIPTION=...)``."""
    hosts = []
    for address in _TNS_ADDRESS_RE.findall(spec):
        keys = {key.upper(): value.strip() for key, value in _TNS_KEY_RE.findall(address)}
        if keys.get("HOST"):
            hosts.append((keys["HOST"], keys.get("PORT", "")))
    keys = {key.upper(): value.strip() for key, value in _TNS_KEY_RE.findall(spec)}
    database = ""
    if keys.get("SERVICE_NAME"):
        database = "/" + keys["SERVICE_NAME"]
    elif keys.get("SID"):
        database = ":" + keys["SID"]
    return JdbcUrl("oracle", tuple(hosts), database)


def _opaque(driver: str, rest: str) -> JdbcUrl:
    """``jdbc:<driver>:<name>``: the name up to the first property; credentials before an ``@`` go."""
    main, _, query = rest.partition("?")
    main, *semicolon_properties = split_semicolons(main)
    name = main.rpartition("@")[2]
    if "=" in name:  # a property written DB2-style, after a ':'
        name = name[: name.rfind(":", 0, name.index("="))] if ":" in name[: name.index("=")] else ""
    properties = _semicolon_pairs(semicolon_properties) + _query_pairs(query)
    return JdbcUrl(driver, (), name, properties, opaque=True)


# --------------------------------------------------------------------------- hosts and properties


def _split_authority(text: str) -> tuple[str, str, str]:
    """``hosts`` and ``path`` of ``hosts/path``, the hosts' own parentheses and brackets kept whole."""
    depth = 0
    for index, char in enumerate(text):
        if char in "([":
            depth += 1
        elif char in ")]" and depth:
            depth -= 1
        elif char == "/" and not depth:
            return text[:index], "/", text[index + 1 :]
    return text, "", ""


def _split_hosts(authority: str) -> list[str]:
    """The hosts of a comma-separated list; a bracketed list (not an IPv6 address) is opened."""
    # user info never names a host
    members = split_outside_brackets(authority.rpartition("@")[2], ",", "([", ")]")
    hosts = []
    for member in (m.strip() for m in members):
        if member.startswith("[") and member.endswith("]") and ("," in member or "=" in member):
            hosts.extend(_split_hosts(member[1:-1]))  # Connector/J: jdbc:mysql://[a,b]/db
        elif member:
            hosts.append(member)
    return hosts


def _host_and_port(member: str) -> tuple[str, str]:
    """``(host, port)`` of ``host:port``, ``[v6]:port``, ``address=(host=h)(port=p)``, ``(host=h,port=p)``."""
    if "=" in member:
        keys = {key.lower(): value.strip() for key, value in _HOST_KEY_RE.findall(member)}
        return keys.get("host", ""), keys.get("port", "")
    if member.startswith("["):
        host, _, rest = member.partition("]")
        return host + "]", rest[1:] if rest.startswith(":") else ""
    host, _, port = member.partition(":")
    return host, port


def _query_pairs(query: str) -> tuple[tuple[str, str], ...]:
    """``k=v&...`` decoded as the drivers decode it (Java's ``URLDecoder``: ``+`` is a space)."""
    pairs = []
    for pair in query.split("&"):
        key, equals, value = pair.partition("=")
        if key and equals:
            pairs.append((urllib.parse.unquote_plus(key), urllib.parse.unquote_plus(value)))
    return tuple(pairs)


def _semicolon_pairs(segments: list[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for segment in segments:
        key, equals, value = segment.partition("=")
        if key.strip() and equals:
            value = value.strip()
            if value.startswith("{") and value.endswith("}"):
                value = value[1:-1].replace("}}", "}")
            pairs.append((key.strip(), value))
    return tuple(pairs)
