"""The statements the package sends, each a `Call` a client runs:
`Client(conn).run(queries.enqueue("send_email", "order-42", {"to": "a@b.c"}))`."""

from sqljobs._client.queries import *  # noqa: F403
from sqljobs._client.queries import __all__  # noqa: F401
