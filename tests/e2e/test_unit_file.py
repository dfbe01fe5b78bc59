"""deploy/threadline.service: systemd accepts it, and it says what the service needs."""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest

from gateway.config import EXIT_CONFIG
from gateway.config.models import default_data_dir
from gateway.service.app import DRAIN_TIMEOUT_S
from gateway.service.run import EXIT_SECOND_SIGNAL
from tests.harness.cli import THREADLINE

UNIT = Path(__file__).resolve().parents[2] / "deploy" / "threadline.service"
INSTALLED = "/opt/threadline/venv/bin/threadline"
HARDENING = {
    "NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
    "PrivateTmp": "yes", "PrivateDevices": "yes", "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes", "ProtectControlGroups": "yes", "LockPersonality": "yes",
    "RestrictRealtime": "yes", "RestrictSUIDSGID": "yes", "SystemCallArchitectures": "native",
    "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
}


def unit_keys(text: str) -> dict[str, dict[str, list[str]]]:
    """section -> key -> every value given (systemd allows repeating most keys)."""
    sections: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    section = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        sections[section][key.strip()].append(value.strip())
    return sections


def seconds(value: str) -> float:
    """A systemd time span as written in this unit: "45", "45s", "1min"."""
    units = {"min": 60.0, "s": 1.0, "": 1.0}
    for suffix in ("min", "s", ""):
        if value.endswith(suffix) and value[:len(value) - len(suffix)].isdigit():
            return float(value[:len(value) - len(suffix)]) * units[suffix]
    raise ValueError(f"unexpected time span {value!r}")


def verify(unit: Path) -> subprocess.CompletedProcess[str]:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.fail("systemd-analyze is missing: install Debian's `systemd` package "
                    "(`make test` tries `apt-get install -y --no-install-recommends systemd`)")
    return subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True,
                          timeout=60, check=False)


def unit_with_exec(tmp_path: Path, text: str) -> Path:
    """The unit as shipped, but starting this checkout's real `threadline`."""
    copy = tmp_path / "threadline.service"
    copy.write_text(text.replace(INSTALLED, THREADLINE))
    return copy


def test_systemd_analyze_verify_accepts_the_unit(tmp_path):
    text = UNIT.read_text()
    assert INSTALLED in text
    # verify checks that ExecStart= exists, and /opt/threadline is not installed here: the
    # copy differs from the shipped unit in that one path only.
    ran = verify(unit_with_exec(tmp_path, text))
    # verify exits 0 even for unknown keys and unparsable values; it only warns on stderr.
    assert (ran.returncode, ran.stderr.strip()) == (0, "")


def test_verify_would_report_a_mistake_in_the_unit(tmp_path):
    """The check above can fail: a misspelt key and a bad value show up on stderr."""
    broken = UNIT.read_text().replace("ProtectHome=yes", "ProtectHome=sometimes")
    broken = broken.replace("WatchdogSec=", "WatchDogSec=")
    ran = verify(unit_with_exec(tmp_path, broken))
    assert "sometimes" in ran.stderr and "WatchDogSec" in ran.stderr
    missing = verify(UNIT)  # the shipped path does not exist on a test machine
    assert missing.returncode != 0 and INSTALLED in missing.stderr


def test_the_unit_is_a_notify_service_that_restarts_on_failure_but_not_on_bad_config():
    service = unit_keys(UNIT.read_text())["Service"]
    assert service["Type"] == ["notify"]
    assert service["NotifyAccess"] == ["main"]
    assert service["ExecStart"] == [f"{INSTALLED} run --config /etc/threadline/config.yaml"]
    assert service["EnvironmentFile"] == ["/etc/threadline/threadline.env"]
    assert (service["User"], service["Group"]) == (["threadline"], ["threadline"])
    assert service["Restart"] == ["on-failure"]
    assert service["RestartPreventExitStatus"] == [str(EXIT_CONFIG)] == ["78"]
    assert service["SuccessExitStatus"] == [str(EXIT_SECOND_SIGNAL)]
    assert seconds(service["WatchdogSec"][0]) >= 10
    assert seconds(service["TimeoutStopSec"][0]) > DRAIN_TIMEOUT_S


def test_the_database_goes_to_the_state_directory_and_nothing_else_is_writable():
    service = unit_keys(UNIT.read_text())["Service"]
    assert service["StateDirectory"] == ["threadline"]
    assert "THREADLINE_HOME=%S/threadline" in service["Environment"]
    # %S is /var/lib for a system service; the code reads THREADLINE_HOME as its data dir.
    home = default_data_dir({"THREADLINE_HOME": "/var/lib/threadline"})
    assert service["ReadWritePaths"] == [str(home)]
    for key, value in HARDENING.items():
        assert service[key] == [value], key


TEMPLATE = UNIT.with_name("threadline@.service")


def test_the_instance_template_verifies_and_differs_only_in_its_instance(tmp_path):
    # deploy/threadline@.service (README "Scale out"): systemd accepts an instance of it,
    # and apart from naming its instance it is the single unit, hardening and all.
    copy = tmp_path / "threadline@8441.service"
    copy.write_text(TEMPLATE.read_text().replace(INSTALLED, THREADLINE))
    ran = verify(copy)
    assert (ran.returncode, ran.stderr.strip()) == (0, "")
    single, template = unit_keys(UNIT.read_text()), unit_keys(TEMPLATE.read_text())
    service = template["Service"]
    assert service["Environment"] == ["THREADLINE_HOME=%S/threadline/%i",
                                      "THREADLINE_INSTANCE=%i", "PYTHONUNBUFFERED=1"]
    assert service["StateDirectory"] == ["threadline/%i"]
    assert service["ReadWritePaths"] == ["%S/threadline/%i"]
    instance_keys = {"Environment", "StateDirectory", "ReadWritePaths"}
    for section, keys in single.items():
        for key, values in keys.items():
            if key not in instance_keys and key != "Description":
                assert template[section][key] == values, (section, key)
