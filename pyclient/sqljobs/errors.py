"""The exceptions: one class per SQLSTATE the engine raises (docs/reference/errors.md),
and the client's own. Every one is also exported by `sqljobs` itself."""

from sqljobs._client.errors import *  # noqa: F403
from sqljobs._client.errors import __all__  # noqa: F401
