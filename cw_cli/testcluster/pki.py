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
from .names import NAME


class CertPair(Struct, frozen=True):
    """A certificate and its key, as PEM files."""

    cert: Path
    key: Path


class Pki(Struct, frozen=True):
    """The files of the cluster's PKI: the CA, each component's certificate, the service-account keys."""

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


class _Issuer:
    """The cluster's CA, signing the other certificates into one folder."""

    def __init__(self, directory: Path, existing: bool = False) -> None:
        self.crypto = _imports()
        x509, hashes, serialization, ec, _, _, _ = self.crypto
        self.directory = directory
        self.now = _dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(minutes=5)
        self.name = self.subject(f"{NAME}-ca")
        if existing:  # sign with the CA already in ``directory``
            self.pair = CertPair(directory / "ca.crt", directory / "ca.key")
            self.key = serialization.load_pem_private_key(self.pair.key.read_bytes(), password=None)
            return
        self.key = ec.generate_private_key(ec.SECP256R1())
        cert = (
            self.builder(self.name, self.key.public_key(), days=3650, ca=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.key.public_key()), critical=False)
            .sign(self.key, hashes.SHA256())
        )
        self.pair = CertPair(directory / "ca.crt", directory / "ca.key")
        _write(self.pair.cert, cert.public_bytes(serialization.Encoding.PEM))
        _write(self.pair.key, _key_pem(self.key, serialization), private=True)

    def subject(self, cn: str, org: str | None = None):
        """An X.509 name: the common name, after the organization (a Kubernetes group) if any."""
        x509, NameOID = self.crypto[0], self.crypto[6]
        attrs = [x509.NameAttribute(NameOID.COMMON_NAME, cn)]
        if org:
            attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
        return x509.Name(attrs)

    def builder(self, subject, public_key, days: int, ca: bool):
        """A certificate of ``subject`` issued by this CA (itself when ``ca``), valid for ``days``."""
        x509 = self.crypto[0]
        usage = x509.KeyUsage(
            digital_signature=True, key_cert_sign=ca, crl_sign=ca, content_commitment=False, key_encipherment=False,
            data_encipherment=False, key_agreement=False, encipher_only=False, decipher_only=False,
        )  # fmt: skip
        return (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject if ca else self.name)
            .public_key(public_key)
            .serial_number(x509.random_serial_number())
            .not_valid_before(self.now)
            .not_valid_after(self.now + _dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
            .add_extension(usage, critical=True)
        )

    def issue(self, stem: str, cn: str, org: str | None = None, server: bool = False,
              dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()) -> CertPair:  # fmt: skip
        """A key and a client (or, with ``server``, serving) certificate as ``stem``.crt/.key."""
        x509, hashes, serialization, ec, _, EKU, _ = self.crypto
        key = ec.generate_private_key(ec.SECP256R1())
        usage = x509.ExtendedKeyUsage([EKU.SERVER_AUTH] if server else [EKU.CLIENT_AUTH])
        builder = (
            self.builder(self.subject(cn, org), key.public_key(), days=365, ca=False)
            .add_extension(usage, critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        if dns or ips:
            sans = [x509.DNSName(d) for d in dns] + [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        pair = CertPair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        _write(pair.cert, builder.sign(self.key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM))
        _write(pair.key, _key_pem(key, serialization), private=True)
        return pair


def _key_pem(key, serialization) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def issue_from_ca(directory: Path, stem: str, cn: str, org: str | None = None, server: bool = False,
                  dns: tuple[str, ...] = (), ips: tuple[str, ...] = ()) -> CertPair:  # fmt: skip
    """A certificate signed by the CA of an existing PKI folder (a real node's, say)."""
    return _Issuer(directory, existing=True).issue(stem, cn, org, server=server, dns=dns, ips=ips)


def generate_pki(directory: Path, service_ip: str = "10.96.0.1", api_ips: tuple[str, ...] = ()) -> Pki:
    """Create all keys and certificates under `directory` (overwriting)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _Issuer(directory)
    issue = ca.issue
    apiserver = issue(
        "apiserver", "kube-apiserver", server=True,
        dns=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"),
        ips=("127.0.0.1", service_ip, *api_ips),
    )  # fmt: skip
    kubelet_client = issue("apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")
    admin = issue("admin", f"{NAME}-admin", "system:masters")
    kcm = issue("controller-manager", "system:kube-controller-manager")
    sched = issue("scheduler", "system:kube-scheduler")
    kwok_client = issue("kwok-client", "kwok-controller", "system:masters")
    kwok_serving = issue("kwok-serving", "kwok", server=True, dns=("localhost",), ips=("127.0.0.1",))
    _, _, serialization, _, rsa, _, _ = ca.crypto
    sa = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    sa_key, sa_pub = directory / "sa.key", directory / "sa.pub"
    _write(sa_key, _key_pem(sa, serialization), private=True)
    _write(sa_pub, sa.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    return Pki(directory, ca.pair, apiserver, kubelet_client, admin, kcm, sched, kwok_client, kwok_serving, sa_key, sa_pub)


def load_pki(directory: Path) -> Pki:
    """The Pki paths of an existing directory made by generate_pki."""
    def pair(stem: str) -> CertPair:
        return CertPair(directory / f"{stem}.crt", directory / f"{stem}.key")

    return Pki(directory, pair("ca"), pair("apiserver"), pair("apiserver-kubelet-client"),
               pair("admin"), pair("controller-manager"), pair("scheduler"), pair("kwok-client"),
               pair("kwok-serving"), directory / "sa.key", directory / "sa.pub")
