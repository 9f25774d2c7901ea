"""A real ``airflow api-server`` and a real headless Chromium, for the connection-form tests.

:class:`ApiServer` runs Airflow's API server (REST API and the React UI) on a free loopback port,
with its own ``AIRFLOW_HOME``, SQLite database and Fernet key, the simple auth manager with
"everyone is admin" (no login page), and the Test button enabled. :func:`chromium` starts
Debian's ``/usr/bin/chromium`` through ``/usr/bin/chromedriver`` (scripts/setup.sh installs both;
nothing is downloaded). :class:`ConnectionForm` drives the "Add/Edit Connection" dialog the way a
person does: it types into the inputs, picks from the drop-downs and types into the JSON editors.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.error import HTTPError
from urllib.request import Request, urlopen

from cryptography.fernet import Fernet

from airflow_iceberg.get_provider_info import CONN_FIELDS
from tests.servers.ports import LOOPBACK, free_port
from tests.servers.process import ManagedProcess, ServerError, StartStop, log_tail
from tests.servers.safety_net import tracked_start, untrack

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
REPO_ROOT = Path(__file__).resolve().parents[2]
TOASTS = "[data-scope='toast'][data-part='root']"
#: Airflow's own section of the form, for extra fields that name no section of their own.
EXTRA_FIELDS = "Extra Fields"


class ApiServer(StartStop):
    """``airflow api-server`` on loopback, with a private home; ``with ApiServer(home):`` stops it.

    :param home: A fresh folder for ``AIRFLOW_HOME`` (database, logs, server log).
    """

    def __init__(self, home: Path, startup_timeout: float = 180.0) -> None:
        self.home = home
        self.port = free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.fernet_key = Fernet.generate_key().decode()
        self.startup_timeout = startup_timeout
        self.process: ManagedProcess | None = None

    @property
    def env(self) -> dict[str, str]:
        """The environment of every Airflow command of this server (and of the Test button)."""
        dags = self.home / "dags"
        dags.mkdir(parents=True, exist_ok=True)
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_"))},
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{self.home / 'airflow.db'}",
            "AIRFLOW__CORE__FERNET_KEY": self.fernet_key,
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__TEST_CONNECTION": "Enabled",
            "AIRFLOW__API__PORT": str(self.port),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")])),
        }

    def start(self) -> ApiServer:
        """Migrate the database and launch the server; :meth:`wait_ready` waits for it to answer.

        The two are apart so that a test can start its browser while the server boots.
        """
        airflow = [sys.executable, "-m", "airflow"]
        log = self.home / "api-server.log"
        self.home.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            migrated = subprocess.run(
                [*airflow, "db", "migrate"], env=self.env, stdout=out, stderr=subprocess.STDOUT, timeout=300
            )
        if migrated.returncode:
            raise ServerError(f"airflow db migrate failed; log {log}:\n{log_tail(log)}")
        self.process = ManagedProcess(
            "airflow api-server",
            # core: the REST API and the UI; the execution API for task workers is not needed
            [*airflow, "api-server", "--apps", "core", "--host", LOOPBACK, "--port", str(self.port)],
            log_path=log,
            env=self.env,
            cwd=self.home,
        )
        with tracked_start(self):
            self.process.start()
        return self

    def wait_ready(self) -> ApiServer:
        assert self.process is not None, "start() first"
        with tracked_start(self):
            self.process.wait_until(
                lambda: self.get("/api/v2/version"), timeout=self.startup_timeout, what="GET /api/v2/version"
            )
        return self

    def stop(self) -> None:
        try:
            if self.process is not None:
                self.process.stop()
        finally:
            untrack(self)

    # ------------------------------------------------------------------ REST API

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """``(status, decoded JSON body)``; the all-admins auth manager needs no token."""
        data = None if body is None else json.dumps(body).encode()
        request = Request(self.url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urlopen(request, timeout=60) as response:
                raw = response.read()
                status = response.status
        except HTTPError as error:
            raw, status = error.read(), error.code
        return status, (json.loads(raw) if raw else None)

    def get(self, path: str) -> Any:
        status, body = self.request("GET", path)
        if status != 200:
            raise AssertionError(f"GET {path}: {status} {body}")
        return body

    # ------------------------------------------------------------------ what was stored

    def stored_connection(self, conn_id: str) -> dict[str, Any]:
        """The connection row as Airflow stored it, decrypted: what the REST API must never echo."""
        fernet = Fernet(self.fernet_key.encode())
        with sqlite3.connect(self.home / "airflow.db") as db:
            row = db.execute(
                "SELECT conn_type, host, port, login, password, extra, is_encrypted, is_extra_encrypted "
                "FROM connection WHERE conn_id = ?",
                (conn_id,),
            ).fetchone()
        if row is None:
            raise AssertionError(f"connection {conn_id!r} was not stored")
        conn_type, host, port, login, password, extra, encrypted, extra_encrypted = row
        if password and encrypted:
            password = fernet.decrypt(password.encode()).decode()
        if extra and extra_encrypted:
            extra = fernet.decrypt(extra.encode()).decode()
        return {
            "conn_type": conn_type,
            "host": host,
            "port": port,
            "login": login,
            "password": password,
            "extra": json.loads(extra) if extra else {},
        }


# ---------------------------------------------------------------------- the browser


def chromium(user_data_dir: Path) -> Any:
    """Headless Debian Chromium under chromedriver; no network use of its own, a fresh profile."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1400,2400",
        f"--user-data-dir={user_data_dir}",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
    driver.implicitly_wait(0)
    return driver


def wait_for(check: Any, timeout: float = 20.0, what: str = "the page") -> Any:
    """Poll ``check()`` until it returns something truthy; exceptions mean "not yet"."""
    deadline = time.monotonic() + timeout
    last: BaseException | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
            if value:
                return value
        except Exception as error:  # the element is not there yet
            last = error
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}: {last!r}")


class ConnectionForm:
    """The Connections page and its Add/Edit dialog, driven through the browser.

    Airflow 3.3's dialog has no Test button; Test is a button in the connection's list row. The
    dialog's sections are an accordion that shows one section at a time, so every step opens
    the section of the field it touches, as a person would.

    :param driver: A Selenium WebDriver.
    :param base_url: The API server's URL.
    """

    def __init__(self, driver: Any, base_url: str) -> None:
        self.driver = driver
        self.base_url = base_url

    def _by(self) -> Any:
        from selenium.webdriver.common.by import By

        return By

    def find(self, xpath: str, timeout: float = 20.0) -> Any:
        by = self._by()
        return wait_for(lambda: self.driver.find_element(by.XPATH, xpath), timeout, xpath)

    def css(self, selector: str) -> list[Any]:
        return self.driver.find_elements(self._by().CSS_SELECTOR, selector)

    def open_list(self, reload: bool = False) -> None:
        """The Connections page; stays on it (no reload of the whole app) when already there."""
        on_list = self.driver.current_url.rstrip("/").endswith("/connections")
        if reload or not on_list or self.css("[role='dialog']"):
            self.driver.get(f"{self.base_url}/connections")
        self.find("//button[contains(., 'Add Connection')]")

    def open_add(self) -> None:
        from selenium.webdriver.common.keys import Keys

        self.open_list()
        self.find("//button[contains(., 'Add Connection')]").click()
        choose = self.find("//*[contains(text(),'Select Connection Type')]/following::input[1]")
        choose.send_keys("Iceberg Catalog")
        time.sleep(0.3)
        choose.send_keys(Keys.ENTER)
        self.find("//input[@name='host']")

    def open_edit(self, conn_id: str) -> None:
        self.open_list()
        self.row_button(conn_id, "Edit").click()
        self.find("//input[@name='host']")

    def row_button(self, conn_id: str, label: str) -> Any:
        """A button of the connection's row in the list (Edit, Test, Delete), by its aria-label."""
        return self.find(
            f"//tr[.//*[normalize-space(text())='{conn_id}']]//button[contains(@aria-label, '{label}')]"
        )

    def expand(self, section: str) -> None:
        """Open an accordion section ("Standard Fields", "Extra Fields") if it is closed."""
        button = self.find(f"//button[@data-part='item-trigger' and normalize-space(.)='{section}']")
        if button.get_attribute("aria-expanded") != "true":
            button.click()
            wait_for(lambda: button.get_attribute("aria-expanded") == "true", 10, f"{section} to open")
            time.sleep(0.5)  # the opening animation

    def type_into(self, element: Any, text: str) -> None:
        """Replace an input's text by typing it, or by pasting it when typing lost a key.

        While React re-renders the form, Chromium under chromedriver now and then drops a key of
        a long value (a path, a URI); a person would notice and paste it, and so does this.
        """
        from selenium.webdriver.common.keys import Keys

        element.send_keys(Keys.CONTROL, "a")
        element.send_keys(Keys.DELETE)
        if text:
            element.send_keys(text)
        if element.get_attribute("value") != text:
            element.send_keys(Keys.CONTROL, "a")
            self.driver.execute_script("document.execCommand('insertText', false, arguments[0]);", text)
        shown = element.get_attribute("value")
        assert shown == text, f"typed {text!r}, the input shows {shown!r}"

    def extra_field(self, name: str) -> Any:
        """An extra field's element, its section opened first (see ``get_provider_info``)."""
        self.expand(CONN_FIELDS[name]["schema"].get("section", EXTRA_FIELDS))
        return self.find(f"//*[@id='element_{name}']")

    def fill_standard(self, **fields: str | int | None) -> None:
        """Type into Connection ID (``connection_id``), URI (``host``), Login, Password, Port."""
        self.expand("Standard Fields")
        for name, value in fields.items():
            if value is not None:
                self.type_into(self.find(f"//input[@name='{name}']"), str(value))

    def fill_extra(self, **fields: Any) -> None:
        """Set extra fields: text inputs are typed, drop-downs picked, dicts typed as JSON."""
        for name, value in fields.items():
            element = self.extra_field(name)
            if isinstance(value, dict):
                self.type_json(element, value)
            elif element.tag_name == "div":  # a react-select drop-down
                self.pick(element, str(value))
            else:
                self.type_into(element, str(value))

    def pick(self, element: Any, label: str) -> None:
        from selenium.webdriver.common.keys import Keys

        box = element.find_element(self._by().TAG_NAME, "input")
        box.send_keys(label)
        time.sleep(0.2)
        box.send_keys(Keys.ENTER)

    def type_json(self, element: Any, value: dict[str, Any]) -> None:
        """Paste JSON over everything in a Monaco editor, as a person would.

        Typed key by key, the form re-formats the JSON after every keystroke that makes it valid
        and the cursor jumps, so people paste; this sends the browser's paste event.
        """
        from selenium.webdriver.common.action_chains import ActionChains
        from selenium.webdriver.common.keys import Keys

        element.find_element(self._by().CSS_SELECTOR, ".view-lines").click()
        ActionChains(self.driver).key_down(Keys.CONTROL).send_keys("a").key_up(Keys.CONTROL).perform()
        self.driver.execute_script(
            """const data = new DataTransfer();
            data.setData('text/plain', arguments[0]);
            document.activeElement.dispatchEvent(
                new ClipboardEvent('paste', {clipboardData: data, bubbles: true, cancelable: true}));""",
            json.dumps(value),
        )
        time.sleep(0.3)

    def editor_text(self, name: str) -> str:
        """What a JSON editor shows, as text."""
        element = self.extra_field(name)
        text = element.find_element(self._by().CSS_SELECTOR, ".view-lines").text.replace("\u00a0", " ")
        return "".join(text.splitlines())  # long lines are wrapped on screen

    def input_value(self, name: str, extra: bool = False) -> tuple[str, str]:
        """``(value, type)`` of a standard (``name=``) or extra (``element_`` id) input."""
        if extra:
            element = self.extra_field(name)
        else:
            self.expand("Standard Fields")
            element = self.find(f"//input[@name='{name}']")
        return element.get_attribute("value"), element.get_attribute("type")

    def selected(self, name: str) -> str:
        """The label shown by a drop-down (its placeholder when nothing is chosen)."""
        return self.extra_field(name).text.strip()

    def options(self, name: str) -> list[str]:
        """The choices a drop-down offers, as a person sees them when opening it."""
        from selenium.webdriver.common.keys import Keys

        box = self.extra_field(name).find_element(self._by().TAG_NAME, "input")
        box.click()
        box.send_keys(Keys.ARROW_DOWN)
        choices = wait_for(lambda: [o.text for o in self.css("[id*='-option-']")], 10, f"{name} options")
        # Escape would close the whole dialog, Tab would pick the highlighted choice: click away.
        self.find(f"//*[@id='element_{name}']/ancestor::*[@data-part='root'][1]//label").click()
        wait_for(lambda: not self.css("[id*='-option-']"), 10, f"{name} options to close")
        return choices

    def label_row(self, name: str) -> str:
        """The text of an extra field's row: label, required mark ``*`` and help line."""
        self.extra_field(name)
        return self.find(f"//*[@id='element_{name}']/ancestor::*[@role='group'][1]").text

    def is_required(self, name: str) -> bool:
        """Whether the field's label carries the form's required mark, a red ``*``."""
        self.extra_field(name)
        label = self.find(f"//*[@id='element_{name}']/ancestor::*[@data-part='root'][1]//label")
        return label.text.split()[-1] == "*"

    def save(self) -> None:
        button = self.find("//button[normalize-space(.)='Save']")
        wait_for(lambda: button.is_enabled(), 10, "the Save button to be enabled")
        button.click()
        wait_for(
            lambda: not self.css("[role='dialog']"),
            30,
            "the dialog to close after Save (an error shown in it?)",
        )

    def toast(self, starts_with: str = "Test Connection") -> str:
        """The text of the newest notification that starts with ``starts_with``; closes them all.

        Other notifications (such as "Create Connection Request Submitted" after Save) may still
        be on screen, so the one awaited is picked by its title.
        """

        def wanted() -> str | None:
            texts = [" ".join(toast.text.split()) for toast in self.css(TOASTS)]
            return next((text for text in reversed(texts) if text.startswith(starts_with)), None)

        text = wait_for(wanted, 60, f"a notification starting with {starts_with!r}")
        for close in self.css("[data-scope='toast'] [data-part='close-trigger']"):
            with contextlib.suppress(Exception):  # it went away by itself
                close.click()
        wait_for(lambda: not self.css(TOASTS), 10, "the notifications to close")
        return text
