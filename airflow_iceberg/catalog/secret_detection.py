"""Which catalog properties and which parts of a catalog URI are secrets.

A secret must never reach a place that shows it: spark-submit's command line, the task log, an
error message, Spark's event log, or a connection field Airflow shows in clear. The connection
keeps secrets in two fields Airflow masks, Password and Secret properties. This module finds
secrets that were put elsewhere: a property whose name says it is a credential, and a password
inside the catalog URI (``?password=``, ``;password=``, ``user:password@``).
"""

from __future__ import annotations

import re
import urllib.parse

#: A property whose name contains one of these words holds a credential.
SECRET_PROPERTY_RE = re.compile(
    r"(?i)passw(or)?d|passphrase|secret|token|credential|authorization|"
    r"(access|private|account|api)[._-]?key"
)
#: ...unless its last word says it is a setting *about* a credential, not the credential itself:
#: ``token-refresh-enabled``, ``token-expires-in-ms``, ``fs.s3a.aws.credentials.provider``,
#: ``client.credentials-provider``, ``hadoop.security.credential.provider.path``.
ABOUT_A_SECRET_RE = re.compile(
    r"(?i)[._-](enabled|ms|expires-at|providers?|type|uri|url|path|file|class|impl)\Z"
)
#: ``name=value`` parameters in a URI: after ``?``, ``&``, ``;`` (SQL Server, H2) or ``:`` (DB2).
_URI_PARAMETER_RE = re.compile(r"[?&;:]([A-Za-z][A-Za-z0-9_.\-]*)=")
#: Oracle's thin driver: ``jdbc:oracle:thin:user/password@host...``.
_ORACLE_CREDENTIALS_RE = re.compile(r"^jdbc:oracle:[a-z0-9]+:[^@/]*/[^@]+@", re.IGNORECASE)


def is_secret_property(key: str) -> bool:
    """Whether a catalog property's name says it holds a credential."""
    return bool(SECRET_PROPERTY_RE.search(key)) and not ABOUT_A_SECRET_RE.search(key)


def shown_in_clear_message(field_name: str, key: str) -> str:
    """Why a secret-looking key is refused outside Secret properties, and where it goes instead.

    The same words serve the operators, the hook and the Test button.
    """
    from airflow_iceberg.get_provider_info import form_label  # the form's words live with the form

    target = f"hadoop.{key}" if field_name == "hadoop_properties" and not key.startswith("hadoop.") else key
    return (
        f"key {key!r} looks like a secret, and Airflow shows {form_label(field_name)} in clear in the UI "
        "and REST API (it masks only some key names there, and none inside a JSON string); move it to "
        f"{form_label('secret_properties')} (secret_properties) as {target!r}"
    )


# --------------------------------------------------------------------------- catalog URIs


def display_uri(uri: str) -> str:
    """A URI fit for a message: no user info and no parameters (either may carry a password).

    Everything from the first ``?``, ``;`` (SQL Server, H2) or ``#`` is dropped, and so is the user
    info of each ``//user:password@`` authority and Oracle's ``user/password@``.
    """
    text = re.split(r"[?;#]", uri, maxsplit=1)[0]
    text = re.sub(r"//[^/@]*@", "//", text)
    return re.sub(r"^(jdbc:oracle:[a-z0-9]+:)[^@]*@", r"\1@", text, flags=re.IGNORECASE)


def split_jdbc_secrets(url: str) -> tuple[str, dict[str, str]]:
    """Take the secret-looking driver properties out of a JDBC URL.

    ``jdbc:postgresql://db/cat?user=etl&password=pw&sslmode=require`` becomes
    ``jdbc:postgresql://db/cat?user=etl&sslmode=require`` and ``{"password": "pw"}``; SQL Server's
    ``;password={p;w}`` and H2's ``;PASSWORD=pw`` are found the same way. Iceberg's JdbcCatalog
    hands every ``jdbc.<name>`` catalog property to the driver as a connection property, which the
    drivers treat exactly as the same parameter in the URL; so the URL can travel and be shown
    without them. Query values are percent-decoded as the drivers decode them.
    """
    main, question, query = url.partition("?")
    secrets: dict[str, str] = {}
    segments = _split_semicolons(main)
    kept_segments = [segments[0]]
    for segment in segments[1:]:
        name, equals, value = segment.partition("=")
        if equals and is_secret_property(name.strip()):
            secrets[name.strip()] = _unbrace(value)
        else:
            kept_segments.append(segment)
    kept_pairs = []
    for pair in query.split("&") if question else ():
        name, equals, value = pair.partition("=")
        if equals and is_secret_property(urllib.parse.unquote_plus(name)):
            secrets[urllib.parse.unquote_plus(name)] = urllib.parse.unquote_plus(value)
        else:
            kept_pairs.append(pair)
    clean = ";".join(kept_segments)
    kept_query = "&".join(pair for pair in kept_pairs if pair)
    return (f"{clean}?{kept_query}" if kept_query else clean), secrets


def uri_secret_problem(uri: str) -> str | None:
    """Why a catalog URI or warehouse may not be used as it is (it still holds a secret), or ``None``.

    A password in the user info (``user:password@``, Oracle's ``user/password@``) or a
    secret-looking ``name=value`` parameter would be shown in clear by Airflow and put on Spark's
    command line. The message names the part, never its value.
    """
    for part in uri.split(","):  # a Hive URI may list several metastores
        target = urllib.parse.urlsplit(part.strip().removeprefix("jdbc:"))
        try:
            has_password = bool(target.password)
        except ValueError:  # a netloc Python cannot read; the driver decides
            has_password = False
        if has_password or _ORACLE_CREDENTIALS_RE.match(part.strip()):
            return (
                "the URI carries a password in its user info (user:password@); put the "
                "password in the Password field (and the user in Login), which Airflow masks, and "
                "remove it from the URI"
            )
    for name in _URI_PARAMETER_RE.findall(uri):
        if is_secret_property(name):
            return (
                f"the URI carries the secret-looking parameter {name!r}; put the secret in "
                "the Password field or in secret_properties (Secret properties), which Airflow "
                "masks, and remove it from the URI"
            )
    return None


def _split_semicolons(text: str) -> list[str]:
    """Split at ``;`` outside SQL Server's ``{...}`` quoting (a value may hold ``;`` in braces)."""
    parts, current, depth = [], [], 0
    for char in text:
        if char == "{":
            depth += 1
        elif char == "}" and depth:
            depth -= 1
        if char == ";" and not depth:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return parts


def _unbrace(value: str) -> str:
    text = value.strip()
    return text[1:-1].replace("}}", "}") if text.startswith("{") and text.endswith("}") else value
