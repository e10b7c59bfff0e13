"""Kubernetes ``submit`` and ``status`` against API servers that cannot be used, all real and on
127.0.0.1: a closed port, a name that cannot resolve, a TLS server whose certificate the
kubeconfig does not trust, a server that takes the connection and never answers, and an HTTP
server answering 401, 403, or 404 for the JobSet resource. Each ends in one line
``cluster: reason: next step`` and exit 3, never the client's traceback."""

from __future__ import annotations

import datetime
import json
import socket
import ssl
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpu_cluster.components.engine import run_offline
from gpu_cluster.components.spec import read_stack_file
from gpu_cluster.workloads.validate import kube
from gpu_cluster.workloads.validate.__main__ import main as validate_main

REPO = Path(__file__).resolve().parents[2]
STACK = "aws-h100-eks"
# Pinned by digest, so submit resolves nothing through a registry before it reaches the API.
IMAGE = "public.ecr.aws/deep-learning-containers/pytorch:2.13.0-cu133-amzn2023@sha256:" + "0" * 64


def kubeconfig(server: str, ca_pem: bytes | None = None) -> str:
    import base64

    cluster: dict[str, Any] = {"server": server}
    if ca_pem is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca_pem).decode()
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "c", "cluster": cluster}],
            "users": [{"name": "u", "user": {"token": "not-a-real-token"}}],
            "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
            "current-context": "x",
        }
    )


def _self_signed(tmp: Path, name: str) -> tuple[Path, Path, bytes]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )
    pem = cert.public_bytes(serialization.Encoding.PEM)
    cert_path, key_path = tmp / f"{name}.crt", tmp / f"{name}.key"
    cert_path.write_bytes(pem)
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path, pem


class _Status(BaseHTTPRequestHandler):
    """Answers every request with the status the server was made with, as a Kubernetes Status."""

    code = 404

    def _answer(self) -> None:
        reason = {401: "Unauthorized", 403: "Forbidden", 404: "NotFound"}[self.code]
        body = json.dumps(
            {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "code": self.code}
        ).encode()
        self.send_response(self.code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PATCH = do_DELETE = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _serve(code: int, tls: tuple[Path, Path] | None = None) -> Iterator[str]:
    handler = type(f"Status{code}", (_Status,), {"code": code})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if tls is not None:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(tls[0]), str(tls[1]))
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"{'https' if tls else 'http'}://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def closed_port() -> str:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"https://127.0.0.1:{port}"


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Takes connections into its backlog and never answers (a filtered path looks alike to a
    client once connected: nothing comes back)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    try:
        yield f"http://127.0.0.1:{s.getsockname()[1]}"
    finally:
        s.close()


@pytest.fixture
def wrong_cert(tmp_path: Path) -> Iterator[tuple[str, bytes]]:
    served = _self_signed(tmp_path, "server")
    _, _, other_ca = _self_signed(tmp_path, "other")
    for url in _serve(404, tls=(served[0], served[1])):
        yield url, other_ca


@pytest.fixture(params=[401, 403, 404])
def answering(request: pytest.FixtureRequest) -> Iterator[tuple[int, str]]:
    for url in _serve(request.param):
        yield request.param, url


def _one_line(api_call: Any) -> str:
    with pytest.raises(kube.ClusterUnreachable) as err:
        api_call()
    line = str(err.value)
    assert "\n" not in line and line.startswith("cluster: ")
    return line


def test_closed_port_says_refused_and_names_the_deployer_cidrs(closed_port: str) -> None:
    line = _one_line(lambda: kube.KubeApi(kubeconfig(closed_port)).check_jobset_api("gpu-jobs"))
    assert "connection refused" in line and closed_port.removeprefix("https://") in line
    assert "orchestration.deployer_cidrs" in line


def test_a_name_that_does_not_resolve_says_dns() -> None:
    # .invalid never resolves (RFC 2606).
    line = _one_line(lambda: kube.KubeApi(kubeconfig("https://gpuc-no-such-cluster.invalid")).list_nodes("a=b"))
    assert "does not resolve (DNS)" in line and "gpuc-no-such-cluster.invalid" in line


def test_an_untrusted_certificate_says_tls(wrong_cert: tuple[str, bytes]) -> None:
    url, other_ca = wrong_cert
    line = _one_line(lambda: kube.KubeApi(kubeconfig(url, other_ca)).check_jobset_api("gpu-jobs"))
    assert "TLS" in line and "certificate-authority-data" in line


def test_a_server_that_never_answers_times_out(silent_server: str) -> None:
    api = kube.KubeApi(kubeconfig(silent_server), connect_timeout_s=1.0, read_timeout_s=0.5)
    line = _one_line(lambda: api.check_jobset_api("gpu-jobs"))
    assert "did not answer in time" in line and "orchestration.deployer_cidrs" in line


def test_401_403_404_each_say_what_to_do(answering: tuple[int, str]) -> None:
    code, url = answering
    line = _one_line(lambda: kube.KubeApi(kubeconfig(url)).check_jobset_api("gpu-jobs"))
    expect = {
        401: ("401 Unauthorized", "refresh the credentials"),
        403: ("403 Forbidden", "access entry"),
        404: ("jobset.x-k8s.io/v1alpha2 JobSet", "JobSet controller is not installed"),
    }[code]
    assert all(e in line for e in expect), line


def test_the_trusted_certificate_passes_tls_and_reaches_the_answer(tmp_path: Path) -> None:
    """The control for the TLS case: the same server, trusted, gets as far as its 404."""
    cert, key, pem = _self_signed(tmp_path, "server")
    for url in _serve(404, tls=(cert, key)):
        line = _one_line(lambda: kube.KubeApi(kubeconfig(url, pem)).check_jobset_api("gpu-jobs"))
        assert "JobSet controller is not installed" in line


def _outputs_file(tmp_path: Path, server: str) -> Path:
    name, raw = read_stack_file(STACK)
    outs = run_offline(name, raw).outputs
    outs["access"]["kubeconfig"] = kubeconfig(server)
    outs["access"]["api_endpoint"] = server
    path = tmp_path / "outputs.json"
    path.write_text(json.dumps(outs), encoding="utf-8")
    return path


def test_submit_and_status_exit_3_with_one_line(
    tmp_path: Path, closed_port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = _outputs_file(tmp_path, closed_port)
    submit = [
        "submit",
        STACK,
        "--outputs",
        str(outputs),
        "--image",
        IMAGE,
        "--fetch-to",
        str(tmp_path / "back"),
    ]
    for argv in (submit, ["status", STACK, "--outputs", str(outputs)]):
        assert validate_main(argv) == 3
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("validate ")]
        assert len(err) == 1 and f"validate {argv[0]}: cluster: nothing accepts connections" in err[0], err


def test_the_command_line_prints_no_traceback(tmp_path: Path, answering: tuple[int, str]) -> None:
    code, url = answering
    outputs = _outputs_file(tmp_path, url)
    done = subprocess.run(
        [sys.executable, "-m", "gpu_cluster.workloads.validate", "status", STACK, "--outputs", str(outputs)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("validate status: cluster: ")


def _exec_outputs(tmp_path: Path, server: str, command: list[str]) -> Path:
    """Outputs whose kubeconfig gets its token from a credential command, as EKS's, GKE's and AKS's do."""
    path = _outputs_file(tmp_path, server)
    outs = json.loads(path.read_text(encoding="utf-8"))
    doc = yaml.safe_load(outs["access"]["kubeconfig"])
    api = "client.authentication.k8s.io/v1beta1"
    doc["users"][0]["user"] = {"exec": {"apiVersion": api, "command": command[0], "args": command[1:]}}
    outs["access"]["kubeconfig"] = yaml.safe_dump(doc)
    path.write_text(json.dumps(outs), encoding="utf-8")
    return path


def _validate(argv: list[str], *, configure_logging: bool = False) -> subprocess.CompletedProcess[str]:
    # configure_logging: a process that has configured logging (a user's wrapper, or the client's
    # own first logging.error), where urllib3's retry warnings would print.
    setup = "import logging; logging.basicConfig(); " if configure_logging else ""
    code = f"{setup}import sys; from gpu_cluster.workloads.validate.__main__ import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run(
        [sys.executable, "-c", code, *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_a_failing_credential_command_is_our_one_line_not_the_clients_log(tmp_path: Path, closed_port: str) -> None:
    """Issue 47 item 5: the client logged `ERROR:root:exec: ...` and urllib3's `Retrying (...)`
    before our line. Now the credential command's failure is the one line, naming the command."""
    fail = [sys.executable, "-c", "import sys; sys.stderr.write('Unable to locate credentials\\n'); sys.exit(255)"]
    outputs = _exec_outputs(tmp_path, closed_port, fail)
    submit = ["submit", STACK, "--outputs", str(outputs), "--image", IMAGE, "--fetch-to", str(tmp_path / "back")]
    for argv in (["status", STACK, "--outputs", str(outputs)], submit):
        done = _validate(argv)
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 3 and len(lines) == 1, done.stderr
        assert lines[0].startswith(
            f"validate {argv[0]}: cluster: the kubeconfig's credential command `{sys.executable} -c"
        ), lines
        assert "Unable to locate credentials" in lines[0] and "refresh the credentials" in lines[0]


def test_an_unreachable_api_is_one_line_where_logging_is_configured(tmp_path: Path, closed_port: str) -> None:
    token = json.dumps(
        {"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential", "status": {"token": "t"}}
    )
    outputs = _exec_outputs(tmp_path, closed_port, [sys.executable, "-c", f"print({token!r})"])
    done = _validate(["status", STACK, "--outputs", str(outputs)], configure_logging=True)
    assert done.returncode == 3 and "Retrying" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("validate status: cluster: nothing accepts connections"), lines
