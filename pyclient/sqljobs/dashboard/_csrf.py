"""CSRF protection for the action forms: a double-submit token, signed.

A GET sets a cookie holding a random nonce and its HMAC (under a key made when the app
starts); every form carries the same value in a hidden field. A POST is refused unless
the field equals the cookie and the signature holds: another site can make the browser
send the cookie but cannot read it to fill in the field, nor forge one.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

COOKIE = "sqljobs_csrf"
FIELD = "csrf"


class CsrfTokens:
    def __init__(self, key: bytes | None = None) -> None:
        self._key = key or secrets.token_bytes(32)

    def _sign(self, nonce: str) -> str:
        return hmac.new(self._key, nonce.encode(), hashlib.sha256).hexdigest()

    def new(self) -> str:
        nonce = secrets.token_urlsafe(24)
        return f"{nonce}.{self._sign(nonce)}"

    def valid(self, token: str | None) -> bool:
        if not token or "." not in token:
            return False
        nonce, signature = token.split(".", 1)
        return hmac.compare_digest(signature, self._sign(nonce))

    def check(self, cookie: str | None, field: str | None) -> bool:
        """The form's field matches the cookie, and the cookie is ours."""
        return bool(cookie and field) and hmac.compare_digest(str(cookie), str(field)) \
            and self.valid(cookie)
