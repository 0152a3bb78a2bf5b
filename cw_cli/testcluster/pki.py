"""Throw-away PKI of the test cluster (needs the `cryptography` package).

One CA signs: the API server's serving cert (127.0.0.1/localhost/kubernetes.default...), client
certs for admin, controller-manager, scheduler, kwok and the API server's kubelet client, and
kwok's serving cert (the "kubelet" endpoint the API server dials for pods/log). Plus the RSA
service-account key pair used by the API server (verify/sign) and the controller-manager.
"""

from __future__ import annotations

import datetime as _dt
import ipaddress
from pathlib import Path

from msgspec import Struct

from .errors import TestClusterError


class CertPair(Struct, frozen=True):
    cert: Path
    key: Path


class Pki(Struct, frozen=True):
    dir: Path
    ca: CertPair
    apiserver: CertPair
    apiserver_kubelet_client: CertPair
    admin: CertPair
    controller_manager: CertPair
    scheduler: CertPair
    kwok_client: CertPair
    kwok_serving: CertPair
    sa_key: Path
    sa_pub: Path


def _imports():
    try:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec, rsa
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
    except ImportError:  # pragma: no cover
        raise TestClusterError(
            "the test cluster needs the 'cryptography' package: pip install cryptography"
        ) from None
    return x509, hashes, serialization, ec, rsa, ExtendedKeyUsageOID, NameOID


def _write(path: Path, data: bytes, private: bool = False) -> None:
    path.write_bytes(data)
    if private:
        path.chmod(0o600)


def generate_pki(directory: Path, service_ip: str = "10.96.0.1") -> Pki:
    """Create all keys and certificates under `directory` (overwriting)."""
    x509, hashes, serialization, ec, rsa, EKU, NameOID = _imports()
    directory.mkdir(parents=True, exist_ok=True)
    now = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(minutes=5)
    until = now + _dt.timedelta(days=365)

    def key_pem(key) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    def name(cn: str, org: str | None = None):
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        if org:
            attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
        return x509.Name(attrs)

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = name("cw-local-ca")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + _dt.timedelta(days=3650))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True, key_cert_sign=True, crl_sign=True,
                content_commitment=False, key_encipherment=False, data_encipherment=False,
                key_agreement=False, encipher_only=False, decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    ca = CertPair(directory / "ca.crt", directory / "ca.key")
    _write(ca.cert, ca_cert.public_bytes(serialization.Encoding.PEM))
    _write(ca.key, key_pem(ca_key), private=True)

    def issue(stem: str, cn: str, org: str | None = None, server: bool = False,
              dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()) -> CertPair:
        key = ec.generate_private_key(ec.SECP256R1())
        b = (
            x509.CertificateBuilder()
            .subject_name(name(cn, org))
            .issuer_name(ca_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now)
            .not_valid_after(until)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True, key_encipherment=False, content_commitment=False,
                    data_encipherment=False, key_agreement=False, key_cert_sign=False,
                    crl_sign=False, encipher_only=False, decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.ExtendedKeyUsage([EKU.SERVER_AUTH] if server else [EKU.CLIENT_AUTH]),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
        )
        if dns or ips:
            sans = [x509.DNSName(d) for d in dns] + [
                x509.IPAddress(ipaddress.ip_address(i)) for i in ips
            ]
            b = b.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = b.sign(ca_key, hashes.SHA256())
        pair = CertPair(directory / f"{stem}.crt", directory / f"{stem}.key")
        _write(pair.cert, cert.public_bytes(serialization.Encoding.PEM))
        _write(pair.key, key_pem(key), private=True)
        return pair

    apiserver = issue(
        "apiserver", "kube-apiserver", server=True,
        dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc",
             "kubernetes.default.svc.cluster.local"),
        ips=("127.0.0.1", service_ip),
    )
    kubelet_client = issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")
    admin = issue("admin", "cw-local-admin", "system:masters")
    kcm = issue("controller-manager", "system:kube-controller-manager")
    sched = issue("scheduler", "system:kube-scheduler")
    kwok_client = issue("kwok-client", "kwok-controller", "system:masters")
    kwok_serving = issue("kwok-serving", "kwok", server=True, dns=("localhost",), ips=("127.0.0.1",))

    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_key, sa_pub = directory / "sa.key", directory / "sa.pub"
    _write(sa_key, key_pem(sa), private=True)
    _write(
        sa_pub,
        sa.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        ),
    )
    return Pki(directory, ca, apiserver, kubelet_client, admin, kcm, sched, kwok_client,
               kwok_serving, sa_key, sa_pub)


def load_pki(directory: Path) -> Pki:
    """The Pki paths of an existing directory made by generate_pki."""
    def pair(stem: str) -> CertPair:
        return CertPair(directory / f"{stem}.crt", directory / f"{stem}.key")

    return Pki(directory, pair("ca"), pair("apiserver"), pair("apiserver-kubelet-client"),
               pair("admin"), pair("controller-manager"), pair("scheduler"), pair("kwok-client"),
               pair("kwok-serving"), directory / "sa.key", directory / "sa.pub")
