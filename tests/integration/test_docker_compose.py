"""docker/compose.yaml is valid for Docker users (checked by the compose client; no engine runs here)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker" / "compose.yaml"
pytestmark = pytest.mark.integration


def compose_config(path: Path) -> subprocess.CompletedProcess[str]:
    """``docker compose config`` where the v2 plugin exists, else Debian's ``docker-compose config``."""
    plugin = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True, check=False)
    if plugin.returncode == 0:
        cmd = ["docker", "compose", "-f", str(path), "config"]
    elif shutil.which("docker-compose"):
        cmd = ["docker-compose", "-f", str(path), "config"]
    else:
        pytest.fail("no compose client: scripts/setup installs Debian's docker-compose", pytrace=False)
    return subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=REPO)


def test_compose_file_is_valid_and_points_gtidsnap_at_the_replica() -> None:
    result = compose_config(COMPOSE)
    assert result.returncode == 0, result.stderr
    rendered = result.stdout
    for service in ("mysql-primary:", "mysql-replica:", "kafka:", "gtidsnap:"):
        assert service in rendered
    assert "GTIDSNAP_SOURCE_HOST: mysql-replica" in rendered
    assert "mysql:8.4" in rendered and "--gtid-mode=ON" in rendered


def test_a_broken_compose_file_is_rejected(tmp_path: Path) -> None:
    broken = tmp_path / "compose.yaml"
    broken.write_text(COMPOSE.read_text().replace("services:", "servicez:", 1))
    assert compose_config(broken).returncode != 0
