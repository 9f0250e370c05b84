"""No open door: the requests that record or bind (PUT /v1/state, DELETE /v1/bindings, the bind
verb) need a bearer token or a verified client certificate; a real service process each."""

from __future__ import annotations

import ssl
import subprocess

import httpx
import pytest

from service.testing import ServiceProcess, free_port

STATE = {"time_s": 0.0}
BIND = {"PodName": "p", "PodNamespace": "ml", "PodUID": "u", "Node": "h100-0"}


def test_a_token_is_required_on_every_recording_verb_and_nowhere_else(tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    with ServiceProcess(["--cluster", "mixed-64gpu", "--auth-token-file", str(token)]) as s, \
            httpx.Client(base_url=s.url, timeout=30) as c:
        for method, path, body in (("PUT", "/v1/state", STATE), ("DELETE", "/v1/bindings/ml/p", None),
                                   ("POST", "/scheduler/bind", BIND)):
            r = c.request(method, path, json=body)
            assert r.status_code == 401 and "bearer token" in r.json()["detail"], (path, r.text)
            assert r.headers["www-authenticate"].startswith("Bearer")
            r = c.request(method, path, json=body, headers={"Authorization": "Bearer wrong"})
            assert r.status_code == 401, path
            r = c.request(method, path, json=body, headers={"Authorization": "Bearer s3cret"})
            assert r.status_code in (200, 404), (path, r.text)  # 404: no such binding to release
        assert c.put("/v1/state", json=STATE, headers={"Authorization": "Bearer s3cret"}).json()["status"] == "ok"
        f = c.post("/scheduler/filter", json={"Pod": {"metadata": {"name": "x"}}, "NodeNames": ["h100-0"]})
        assert f.status_code == 200 and f.json()["Error"] == ""  # kube-scheduler sends no token
        assert c.get("/v1/state").status_code == 200 and c.get("/metrics").status_code == 200


def test_without_credentials_configured_the_recording_verbs_are_refused():
    with ServiceProcess(["--cluster", "mixed-64gpu"], secure=True) as s, httpx.Client(base_url=s.url, timeout=30) as c:
        r = c.put("/v1/state", json=STATE)
        assert r.status_code == 403 and "--auth-token-file" in r.json()["detail"]
        assert c.post("/scheduler/bind", json=BIND).status_code == 403
    with ServiceProcess(["--cluster", "mixed-64gpu"], secure=True, env={"GANGSCHED_AUTH_TOKEN": "from-env"}) as s, \
            httpx.Client(base_url=s.url, timeout=30) as c:
        assert c.put("/v1/state", json=STATE).status_code == 401
        assert c.put("/v1/state", json=STATE, headers={"Authorization": "Bearer from-env"}).status_code == 200


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate for 127.0.0.1 and a client certificate, made by openssl."""
    d = tmp_path_factory.mktemp("pki")
    try:
        _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=test-ca",
                 "-keyout", str(d / "ca.key"), "-out", str(d / "ca.crt"))
        for name, ext in (("server", "subjectAltName=IP:127.0.0.1"), ("client", "extendedKeyUsage=clientAuth")):
            _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={name}", "-keyout", str(d / f"{name}.key"),
                     "-out", str(d / f"{name}.csr"))
            (d / f"{name}.ext").write_text(ext + "\n")
            _openssl("x509", "-req", "-in", str(d / f"{name}.csr"), "-CA", str(d / "ca.crt"), "-CAkey", str(d / "ca.key"),
                     "-CAcreateserial", "-days", "2", "-extfile", str(d / f"{name}.ext"), "-out", str(d / f"{name}.crt"))
    except (OSError, subprocess.CalledProcessError) as e:
        pytest.skip(f"openssl cannot make test certificates: {e}")
    return d


def test_tls_with_client_certificates_as_kube_scheduler_sends_them(pki):
    """HTTPS (kube-scheduler's enableHTTPS + tlsConfig caFile, certFile, keyFile): a client
    certificate signed by --tls-client-ca authenticates the recording verbs; a connection without
    one is refused by the TLS layer; probes use the plain health port, which serves health only."""
    health = free_port()
    with ServiceProcess(["--cluster", "mixed-64gpu", "--tls-cert", str(pki / "server.crt"), "--tls-key", str(pki / "server.key"),
                         "--tls-client-ca", str(pki / "ca.crt"), "--health-port", str(health)]) as s:
        assert s.url.startswith("https://")
        with_cert = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        with_cert.load_cert_chain(str(pki / "client.crt"), str(pki / "client.key"))
        without = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        with httpx.Client(base_url=s.url, verify=with_cert, timeout=30) as c:
            assert c.put("/v1/state", json=STATE).status_code == 200
            assert c.post("/scheduler/bind", json=BIND).json()["Error"].startswith("bind ml/p: this service creates no Bindings")
        with httpx.Client(base_url=s.url, verify=without, timeout=30) as c, pytest.raises(httpx.HTTPError):
            c.put("/v1/state", json=STATE)
        with httpx.Client(base_url=f"http://127.0.0.1:{health}", timeout=30) as c:
            assert c.get("/readyz").status_code == 200 and c.get("/healthz").status_code == 200
            assert c.put("/v1/state", json=STATE).status_code == 404
            assert c.post("/scheduler/filter", json={}).status_code == 404
