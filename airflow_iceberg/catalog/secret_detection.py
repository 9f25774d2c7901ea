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

from airflow_iceberg.jdbc_urls import split_semicolons

#: A property whose name contains one of these words holds a credential: passwords, tokens and
#: keys, encryption keys (Iceberg's ``s3.sse.key`` and ``gcs.decryption-key``, S3A's
#: ``fs.s3a.encryption.key``, GCS's ``fs.gs.encryption.key``), Azure SAS entries
#: (``fs.azure.sas.<container>...``) and cookies (Iceberg REST's ``header.Cookie``). One pattern,
#: both a Python and a Java regex: the refusal (:func:`is_secret_property`) and Spark's
#: ``spark.redaction.regex`` (``spark_settings``) share it.
#: Each bracketed letter matches itself; it keeps the literal word out of the pattern, so that
#: SparkSubmitHook's log masking (which looks for such words in a command line) leaves it alone.
SECRET_WORDS_PATTERN = (
    r"(?i)pas[s]w(or)?d|pas[s]phrase|secr[e]t|tok[e]n|cr[e]dential|auth[o]rization|"
    r"(access|private|account|api)[._-]?k[e]y|(en|de)crypt[i]on[._-]?k[e]y|ss[e][._-]c?[._-]?k[e]y|"
    r"(\A|[._-])s[a]s([._-]|\Z)|c[o]okie"
)
SECRET_PROPERTY_RE = re.compile(SECRET_WORDS_PATTERN)
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
#: A password named in a JDBC URL in any syntax: MySQL's ``(host=..,password=..)`` and
#: ``address=(..)(password=..)``, Teradata's ``,PASSWORD=``, or whatever a driver accepts.
_JDBC_PASSWORD_WORD_RE = re.compile(r"(?i)(?<![a-z0-9])(passw(or)?d|pwd)(?![a-z0-9])")
#: ``name=`` inside MySQL's host forms, ``(host=db,port=3306,...)`` and ``address=(host=db)(...)``.
_JDBC_HOST_FORM_PARAMETER_RE = re.compile(r"[(,]\s*([A-Za-z][A-Za-z0-9_.\-]*)\s*=")


def is_secret_property(key: str) -> bool:
    """Whether a catalog property's name says it holds a credential."""
    return bool(SECRET_PROPERTY_RE.search(key)) and not ABOUT_A_SECRET_RE.search(key)


def shown_in_clear_message(field_name: str, key: str) -> str:
    """Why a secret-looking key is refused outside Secret properties, and where it goes instead.

    The same words serve the operators, the hook and the Test button.
    """
    from airflow_iceberg.get_provider_info import form_label  # the form's words live with the form

    target = f"hadoop.{key}" if field_name == "hadoop_properties" else key
    return (
        f"key {key!r} looks like a secret, and Airflow shows {form_label(field_name)} in clear in the UI "
        "and REST API (it masks only some key names there, and none inside a JSON string); move it to "
        f"{form_label('secret_properties')} (secret_properties) as {target!r}"
    )


# --------------------------------------------------------------------------- catalog URIs


def display_uri(uri: str) -> str:
    """A URI fit for a message: no user info and no parameters (either may carry a password).

    Everything from the first ``?``, ``;`` (SQL Server, H2) or ``#`` is dropped, and so is the user
    info of each ``//user:password@`` authority and Oracle's ``user/password@``, up to the *last*
    ``@`` (as ``urlsplit`` and the drivers read it: a password may hold an unescaped ``@``).
    """
    text = re.split(r"[?;#]", uri, maxsplit=1)[0]
    text = re.sub(r"//[^/]*@", "//", text)  # to the last '@': a password may hold one, unescaped
    return re.sub(r"^(jdbc:oracle:[a-z0-9]+:).*@", r"\1@", text, flags=re.IGNORECASE)


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
    segments = split_semicolons(main)
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
    # The whole URI first: a password may hold a comma. Then each part: a Hive URI may list
    # several metastores.
    for part in (uri, *uri.split(",")):
        if has_user_info_password(part) or _ORACLE_CREDENTIALS_RE.match(part.strip()):
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


def has_user_info_password(uri: str) -> bool:
    """Whether ``uri`` carries a password in its user info (``scheme://user:password@host``)."""
    target = urllib.parse.urlsplit(uri.strip().removeprefix("jdbc:"))
    try:
        return bool(target.password)
    except ValueError:  # a netloc Python cannot read; the driver decides
        return False


def has_user_info(uri: str) -> bool:
    """Whether ``uri`` carries user info at all (``https://user@`` or ``https://user:token@``)."""
    target = urllib.parse.urlsplit(uri.strip())
    try:
        return bool(target.username or target.password)
    except ValueError:
        return False


def looks_like_uri(value: str) -> bool:
    """Whether a property value is a URI that could carry user info or parameters."""
    return "://" in value or value.strip().lower().startswith("jdbc:")


def jdbc_password_problem(url: str) -> str | None:
    """Why a JDBC URL, once its known secret parameters are out, still names a password, or ``None``.

    ``split_jdbc_secrets`` knows ``?``/``&``/``;`` parameters; a driver's own syntax (MySQL's
    key-value hosts, Teradata's comma-separated parameters) cannot be taken out safely, so it is
    refused rather than sent on a command line and shown in the table's asset URI.
    """
    named_in_host_forms = (name for name in _JDBC_HOST_FORM_PARAMETER_RE.findall(url))
    if not _JDBC_PASSWORD_WORD_RE.search(url) and not any(map(is_secret_property, named_in_host_forms)):
        return None
    return (
        "the JDBC URL names a password in a form that cannot be taken out of it safely "
        "(such as MySQL's (host=..,password=..) or address=(..)(password=..), or Teradata's "
        ",PASSWORD=); put the password in the Password field, which Airflow masks, and remove it "
        "from the URL"
    )


def _unbrace(value: str) -> str:
    text = value.strip()
    return text[1:-1].replace("}}", "}") if text.startswith("{") and text.endswith("}") else value
