"""docker-compose.yml without a Docker engine: the schema (``docker-compose config``) and
every command of the Jindou (coordinator + workers), Spark and NATS services checked against
the real programs, and the cluster file the coordinator reads."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "docker-compose.yml"
WORKERS = ("worker1", "worker2")


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load(COMPOSE.read_text())


def test_schema_with_docker_compose_config():
    exe = shutil.which("docker-compose")
    if exe is None:
        pytest.skip("docker-compose is not installed (Debian package docker-compose; CI installs it)")
    r = subprocess.run([exe, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, timeout=120,
                       cwd=REPO)
    assert r.returncode == 0, r.stderr
    # and the validator does reject a broken file
    bad = yaml.safe_load(COMPOSE.read_text())
    bad["services"]["pipeline"]["commandd"] = bad["services"]["pipeline"].pop("command")
    r = subprocess.run([exe, "-f", "-", "config", "-q"], input=yaml.safe_dump(bad), capture_output=True,
                       text=True, timeout=120, cwd=REPO)
    assert r.returncode != 0 and "commandd" in (r.stderr + r.stdout)


def test_services_and_dependencies(compose):
    svc = compose["services"]
    assert {"jindou", *WORKERS, "nats", "spark-master", "spark-worker", "pipeline"} <= set(svc)
    for name, s in svc.items():
        assert "image" in s or "build" in s, name
        for dep in s.get("depends_on", []):
            assert dep in svc, f"{name} depends on unknown service {dep}"
    for s in svc.values():
        build = s.get("build")
        if isinstance(build, dict):
            assert (REPO / build.get("context", ".") / build.get("dockerfile", "Dockerfile")).is_file()
    images = {s["image"] for s in svc.values() if "build" in s}
    for name in ("spark-worker", "pipeline"):
        assert svc[name]["image"] in images, f"{name} must use an image this file builds"
    for name in WORKERS:                  # started before jindou, so they build the image themselves
        assert svc[name]["image"] == svc["jindou"]["image"] and svc[name]["build"] == svc["jindou"]["build"]
        assert svc["jindou"]["depends_on"][name]["condition"] == "service_healthy"
        assert "healthcheck" in svc[name]


def test_jindou_commands_parse(compose):
    from pipeline.cli import _parser as pipeline_parser
    from pipeline.spec import load_spec
    from server.cli import build_parser

    serve = compose["services"]["jindou"]["command"]
    assert serve[0] == "jindou"
    a = build_parser().parse_args(serve[1:])
    assert a.command == "serve" and a.data_dir == "/data"
    assert a.cluster == "/app/deploy/cluster-compose.toml"
    cmd = compose["services"]["pipeline"]["command"]
    assert cmd[:3] == ["jindou", "pipeline", "run"]
    a = pipeline_parser().parse_args(cmd[2:])
    master = compose["services"]["spark-master"]["command"]
    assert a.master == f"spark://{master[master.index('--host') + 1]}:{master[master.index('--port') + 1]}"
    assert a.server.startswith("http://jindou:")
    spec_path = a.spec.replace("/app/", "", 1)              # the image copies the repo to /app
    spec = load_spec(REPO / spec_path)
    if spec.source.kind == "jetstream":
        assert spec.source.url.startswith("nats://nats:")


def test_spark_commands_name_real_classes(compose):
    import pyspark

    jars = Path(pyspark.__file__).parent / "jars"
    core = next(jars.glob("spark-core_*.jar"))
    names = set(zipfile.ZipFile(core).namelist())
    for svc in ("spark-master", "spark-worker"):
        cmd = compose["services"][svc]["command"]
        assert cmd[0] == "spark-class"
        assert cmd[1].replace(".", "/") + ".class" in names, cmd[1]
    worker = compose["services"]["spark-worker"]["command"]
    assert worker[-1].startswith("spark://spark-master:")
    # the options are the ones the real Worker accepts
    spark_class = shutil.which("spark-class", path=str(Path(pyspark.__file__).parent / "bin")) or "spark-class"
    r = subprocess.run([spark_class, worker[1], "--help"], capture_output=True, text=True, timeout=180)
    usage = r.stdout + r.stderr
    for opt in (o for o in worker[2:] if o.startswith("--")):
        assert opt in usage, f"spark Worker does not know {opt}"


def test_nats_command_flags_exist(compose):
    exe = shutil.which("nats-server")
    if exe is None:
        pytest.skip("nats-server is not installed")
    r = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    usage = r.stdout + r.stderr
    for flag in (f for f in compose["services"]["nats"]["command"] if f.startswith("-")):
        assert f" {flag}" in usage or f"{flag}," in usage, flag


def _dockerfile_copies(path: Path) -> dict[str, str]:
    """COPY source -> destination of a Dockerfile (WORKDIR /app: ``./x`` is ``/app/x``)."""
    out = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if parts[:1] == ["COPY"] and len(parts) == 3:
            out[parts[1]] = "/app/" + parts[2].removeprefix("./")
    return out


def test_cluster_topology(compose):
    """The coordinator's cluster file is in the image and names each worker service at the port it
    listens on; every worker keeps its partitions in a volume of its own."""
    from engine.cluster.coordinator import read_cluster_file
    from server.cli import build_parser

    svc = compose["services"]
    cluster = build_parser().parse_args(svc["jindou"]["command"][1:]).cluster
    copies = _dockerfile_copies(REPO / "Dockerfile")
    src = next(s for s, d in copies.items() if cluster.startswith(d.rstrip("/") + "/"))
    local = REPO / src / cluster.removeprefix(copies[src].rstrip("/") + "/")
    assert local.is_file(), f"{cluster} is not in the image"
    assert "pipeline" in copies                     # the jindou image has every package pyproject names
    addresses = read_cluster_file(str(local))
    usage = subprocess.run([sys.executable, "-m", "server.cli", "worker", "--help"], capture_output=True,
                           text=True, timeout=120, cwd=REPO).stdout
    listen = {}
    volumes = set()
    for name in WORKERS:
        cmd = svc[name]["command"]
        assert cmd[:2] == ["jindou", "worker"]
        for opt in (o for o in cmd[2:] if o.startswith("--")):
            assert opt in usage, f"jindou worker does not know {opt}"
        opts = dict(zip(cmd[2::2], cmd[3::2], strict=True))
        host, port = opts["--listen"].rsplit(":", 1)
        assert host == "0.0.0.0" and opts["--data-dir"] == "/data"
        listen[name] = int(port)
        (vol,) = [v for v in svc[name]["volumes"] if v.endswith(":/data")]
        volumes.add(vol.split(":")[0])
        assert vol.split(":")[0] in compose["volumes"]
        hc = " ".join(svc[name]["healthcheck"]["test"])
        assert f", {port})" in hc, "the healthcheck probes the listen port"
    assert len(volumes) == len(WORKERS) and "jindou-data" not in volumes
    assert sorted(addresses) == sorted(f"{n}:{p}" for n, p in listen.items())
