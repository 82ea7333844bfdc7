"""The typed records the statements answer (pydantic models and named tuples)."""

from sqljobs._client.records import *  # noqa: F403
from sqljobs._client.records import __all__  # noqa: F401
