"""pip inside an image build: trusts an extra CA bundle given as the build secret `ca`, and first checks that every
package index pip will use answers over TLS, so that a build behind a TLS-intercepting proxy fails with a message
that says what to pass, not with pip's retries and a certificate traceback.

Usage (in the Dockerfile, with the secret mounted at /run/secrets/ca and a tmpfs at /run/ca):
    python image_pip.py install [pip arguments...]
The secret is appended to the system's CA bundle in the tmpfs (never in a layer) and handed to pip as PIP_CERT.
"""

from __future__ import annotations

import os
import ssl
import sys
import urllib.error
import urllib.request

SECRET = "/run/secrets/ca"
BUNDLE_DIR = "/run/ca"
SYSTEM_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
DEFAULT_INDEX = "https://pypi.org/simple"
HOW_TO_GIVE_CA = ("give the proxy's CA bundle as the build secret `ca`: `make images CA_BUNDLE=/path/to/ca.pem`, "
                  "or `docker build --secret id=ca,src=/path/to/ca.pem ...`")


def ca_bundle() -> str | None:
    """The CA bundle pip should trust: the system's bundle plus the secret, or None when no secret was given."""
    if not os.path.isfile(SECRET) or os.path.getsize(SECRET) == 0:
        return None
    extra = open(SECRET, "rb").read()
    if b"-----BEGIN CERTIFICATE-----" not in extra:
        sys.exit(f"the build secret `ca` ({SECRET}) holds no PEM certificate; give a CA bundle in PEM format")
    path = os.path.join(BUNDLE_DIR, "bundle.pem")
    with open(path, "wb") as out:
        if os.path.isfile(SYSTEM_BUNDLE):
            out.write(open(SYSTEM_BUNDLE, "rb").read().rstrip(b"\n") + b"\n")
        out.write(extra)
    return path


def indexes(args: list[str]) -> list[str]:
    """Every index URL this pip command reads: --index-url (or $PIP_INDEX_URL) and each --extra-index-url."""
    main, extra, no_index = os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX, [], False
    for i, a in enumerate(args):
        value = args[i + 1] if i + 1 < len(args) else ""
        if a in ("-i", "--index-url"):
            main = value
        elif a.startswith("--index-url="):
            main = a.split("=", 1)[1]
        elif a == "--extra-index-url":
            extra.append(value)
        elif a.startswith("--extra-index-url="):
            extra.append(a.split("=", 1)[1])
        elif a == "--no-index":
            no_index = True
    return [] if no_index else [main, *extra]


def probe(url: str, bundle: str | None) -> str | None:
    """Why `url` cannot serve pip (None when it answers)."""
    context = ssl.create_default_context(cafile=bundle) if bundle else ssl.create_default_context()
    try:
        with urllib.request.urlopen(url.rstrip("/") + "/", timeout=30, context=context):
            return None
    except urllib.error.HTTPError as e:  # it answered: TLS and the route work, pip judges the rest
        return None if e.code < 500 else f"the package index {url} answers HTTP {e.code}"
    except urllib.error.URLError as e:
        reason = e.reason
    except (TimeoutError, OSError) as e:
        reason = e
    if isinstance(reason, ssl.SSLCertVerificationError):
        if bundle:
            return (f"the TLS certificate of {url} is not trusted even with the CA bundle given as the build secret "
                    f"`ca` ({reason.verify_message}); give the bundle of the proxy that intercepts TLS here")
        return (f"the TLS certificate of {url} is not trusted ({reason.verify_message}): a proxy between this "
                f"build and the index intercepts TLS; {HOW_TO_GIVE_CA}")
    return (f"cannot reach the package index {url} from inside the build ({reason}); set the build argument "
            "PIP_INDEX_URL (or TORCH_INDEX_URL, or put the torch wheel into deploy/wheels/) to one this machine "
            "reaches")


def main(argv: list[str]) -> int:
    if not argv:
        sys.exit("usage: image_pip.py install [pip arguments...]")
    bundle = ca_bundle()
    env = dict(os.environ)
    if bundle:
        env["PIP_CERT"] = bundle
    for url in indexes(argv):
        if url.startswith(("http://", "https://")):
            why = probe(url, bundle)
            if why:
                print(f"error: {why}", file=sys.stderr)
                return 1
    os.execve(sys.executable, [sys.executable, "-m", "pip", *argv], env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
