import hashlib
import hmac

from gpufleet.domain.operations.signatures import signature, verify

SECRET = "s3cret-s3cret-s3cret"
BODY = b'{"notification":{"kind":"alert.firing"}}'


def test_the_signature_is_hmac_sha256_of_timestamp_dot_body():
    expected = hmac.new(SECRET.encode(), b"1700000000." + BODY, hashlib.sha256).hexdigest()
    assert signature(SECRET, 1_700_000_000, BODY) == f"t=1700000000,v1={expected}"


def test_verify_accepts_the_signature_within_tolerance_only():
    header = signature(SECRET, 1_700_000_000, BODY)
    assert verify(SECRET, header, BODY, 1_700_000_100)
    assert not verify(SECRET, header, BODY, 1_700_000_301)  # replayed later
    assert not verify(SECRET, header, BODY + b" ", 1_700_000_000)  # body changed
    assert not verify("another-secret-1234", header, BODY, 1_700_000_000)
    assert not verify(SECRET, "v1=abc", BODY, 1_700_000_000)  # no timestamp
    assert not verify(SECRET, "t=x,v1=abc", BODY, 1_700_000_000)


def test_the_documented_verification_snippet_accepts_our_signature():
    """docs/operations.md, "Receivers" shows readers how to verify; it must work."""
    import re
    import time

    from tests.paths import REPO_ROOT

    docs = (REPO_ROOT / "docs" / "operations.md").read_text()
    section = docs[docs.index("**Verifying a webhook's signature.**"):]
    snippet = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec(snippet, namespace)
    now = int(time.time())
    assert namespace["verify"](SECRET, signature(SECRET, now, BODY), BODY)
    assert not namespace["verify"](SECRET, signature(SECRET, now, BODY), BODY + b"x")
    assert not namespace["verify"](SECRET, signature(SECRET, now - 3600, BODY), BODY)
