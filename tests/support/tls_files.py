"""A CA, a server certificate and client certificates, generated for the TLS tests (tests/integration).

On the tests' path (``pythonpath`` in pyproject.toml): test folders are not packages.
"""

from __future__ import annotations


class TLSFiles:
    """A CA, a server certificate for localhost/127.0.0.1, a client certificate, and a
    rogue CA with its own client certificate (PEM files in one directory)."""

    def __init__(self, directory) -> None:
        import datetime
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        now = datetime.datetime.now(datetime.UTC)

        def name(cn):
            return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

        def write(stem, key, cert):
            (directory / f"{stem}.key").write_bytes(
                key.private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                )
            )
            (directory / f"{stem}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))

        def ca(cn):
            key = ec.generate_private_key(ec.SECP256R1())
            cert = (
                x509.CertificateBuilder()
                .subject_name(name(cn))
                .issuer_name(name(cn))
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=7))
                .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
                .sign(key, hashes.SHA256())
            )
            return key, cert

        def leaf(cn, issuer_key, issuer_cert, usage, sans=()):
            key = ec.generate_private_key(ec.SECP256R1())
            builder = (
                x509.CertificateBuilder()
                .subject_name(name(cn))
                .issuer_name(issuer_cert.subject)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=7))
                .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            )
            if sans:
                builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
            return key, builder.sign(issuer_key, hashes.SHA256())

        ca_key, ca_cert = ca("embedtext test CA")
        write("ca", ca_key, ca_cert)
        write(
            "server",
            *leaf(
                "localhost",
                ca_key,
                ca_cert,
                ExtendedKeyUsageOID.SERVER_AUTH,
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
            ),
        )
        write("client", *leaf("embedtext test client", ca_key, ca_cert, ExtendedKeyUsageOID.CLIENT_AUTH))
        rogue_key, rogue_cert = ca("rogue CA")
        write("rogue-ca", rogue_key, rogue_cert)
        write("rogue-client", *leaf("rogue client", rogue_key, rogue_cert, ExtendedKeyUsageOID.CLIENT_AUTH))
        self.dir = directory

    def __getattr__(self, stem: str):
        # tls.ca_pem, tls.server_key, tls.rogue_client_pem, ...
        base, _, ext = stem.rpartition("_")
        return str(self.dir / f"{base.replace('_', '-')}.{ext}")
