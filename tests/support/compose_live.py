"""docker-compose.yml on a real Docker engine that has no bridge network and no image registry.

CI machines can run Debian's ``dockerd --bridge=none --iptables=false``: every container then
shares the host's network, and nothing can be pulled. :func:`host_network_compose` turns the
compose file users run into one for such an engine, changing only what those two facts force:

* every service uses ``network_mode: host``, finds the others by their service names through
  ``extra_hosts`` entries that all point at 127.0.0.1, and listens on 127.0.0.1 instead of
  0.0.0.0 (published ports mean nothing on the host network and are dropped);
* images are built on a local base image (the Dockerfiles' ``BASE`` argument) with the build
  on the host network, and the NATS image, which users pull, is built from Debian's package
  (``deploy/nats.Dockerfile``).

Services, commands, volumes, health checks and dependencies stay the file's own, so the test
that runs the result exercises the topology users get.
"""

from __future__ import annotations

import copy
import shutil
import subprocess
import tempfile
from pathlib import Path

BASE_IMAGE = "jindou-base:bookworm"
NATS_IMAGE = "jindou-nats:local"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
LOCAL_ONLY = "127.0.0.1"


def _local(arg):
    return arg.replace("0.0.0.0", LOCAL_ONLY) if isinstance(arg, str) else arg


def host_network_compose(compose: dict, repo: Path, base_image: str = BASE_IMAGE) -> dict:
    """The compose document ``compose`` rewritten for a host-network, registry-less engine."""
    out = copy.deepcopy(compose)
    services = out["services"]
    hosts = [f"{name}:{LOCAL_ONLY}" for name in services]
    spark_env = {"SPARK_LOCAL_IP": LOCAL_ONLY, "SPARK_LOCAL_HOSTNAME": LOCAL_ONLY}
    for name, svc in services.items():
        svc.pop("ports", None)
        svc.pop("networks", None)
        svc["network_mode"] = "host"
        svc["extra_hosts"] = hosts
        if "command" in svc:
            svc["command"] = [_local(a) for a in svc["command"]]
        build = svc.get("build")
        if build is not None:
            build = {"context": build} if isinstance(build, str) else dict(build)
            build["context"] = str((repo / build.get("context", ".")).resolve())
            build["args"] = {**build.get("args", {}), "BASE": base_image}
            build["network"] = "host"
            svc["build"] = build
        image = svc.get("image", "")
        if image.startswith("jindou-pipeline"):
            svc["environment"] = {**svc.get("environment", {}), **spark_env}
        if name == "nats":
            svc["image"] = NATS_IMAGE
            svc["build"] = {"context": str(repo.resolve()), "dockerfile": "deploy/nats.Dockerfile",
                            "args": {"BASE": base_image}, "network": "host"}
            svc["command"] = [*svc.get("command", []), "-a", LOCAL_ONLY]
    return out


def docker(*args: str, timeout: float = 120, check: bool = True, **kw) -> subprocess.CompletedProcess:
    exe = shutil.which("docker") or "docker"
    return subprocess.run([exe, *args], capture_output=True, text=True, timeout=timeout, check=check, **kw)


def engine_up() -> bool:
    """A Docker engine answers on this machine."""
    if shutil.which("docker") is None:
        return False
    try:
        return docker("info", "--format", "{{.ServerVersion}}", timeout=30, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def ensure_base_image(name: str = BASE_IMAGE) -> None:
    """Import a minimal Debian with Python as ``name`` unless the engine has it (about a minute).

    The host's CA bundle goes into the image and pip is pointed at it, so pip inside builds trusts
    whatever this machine's own pip trusts."""
    if docker("image", "inspect", name, check=False).returncode == 0:
        return
    with tempfile.TemporaryDirectory(prefix="jindou-rootfs-") as root:
        subprocess.run(["debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
                        "bookworm", root, DEBIAN_MIRROR], check=True, capture_output=True, timeout=900)
        if CA_BUNDLE.is_file():
            shutil.copyfile(CA_BUNDLE, Path(root) / "etc/ssl/certs/ca-certificates.crt")
        tar = subprocess.Popen(["tar", "-C", root, "-c", "."], stdout=subprocess.PIPE)
        exe = shutil.which("docker") or "docker"
        subprocess.run([exe, "import", "-c", f"ENV PIP_CERT={CA_BUNDLE}", "-c", f"ENV SSL_CERT_FILE={CA_BUNDLE}",
                        "-c", "ENV LANG=C.UTF-8", "-", name], stdin=tar.stdout, check=True,
                       capture_output=True, timeout=600)
        tar.stdout.close()
        if tar.wait() != 0:
            raise RuntimeError("tar of the base image's root failed")
